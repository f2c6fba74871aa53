package wheel

import (
	"fmt"
	"math/bits"
)

// fired is one entry handed over by Expire.
type fired struct {
	d   int64
	ref Ref
}

func (f fired) String() string { return fmt.Sprintf("%d/%#x", f.d, uint64(f.ref)) }

// model is the obviously correct reference: the pending entries by ref, and
// a binary heap of them ordered by (deadline, insertion sequence) from which
// removed entries are dropped lazily: a heap entry is current only if byRef
// holds it with the same sequence number. refs lists the pending refs, for
// picking one at random.
type model struct {
	byRef map[Ref]modelEntry
	heap  []modelEntry
	refs  []Ref
	pos   map[Ref]int // index in refs
	seq   uint64
}

type modelEntry struct {
	d   int64
	seq uint64
	ref Ref
}

func newModel() *model {
	return &model{byRef: make(map[Ref]modelEntry), pos: make(map[Ref]int)}
}

func less(a, b modelEntry) bool { return a.d < b.d || a.d == b.d && a.seq < b.seq }

func (m *model) len() int { return len(m.byRef) }

func (m *model) add(d int64, ref Ref) bool {
	if _, ok := m.byRef[ref]; ok {
		return false
	}
	m.seq++
	e := modelEntry{d: d, seq: m.seq, ref: ref}
	m.byRef[ref] = e
	m.pos[ref] = len(m.refs)
	m.refs = append(m.refs, ref)
	m.heap = append(m.heap, e)
	for i := len(m.heap) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(m.heap[i], m.heap[p]) {
			break
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
	return true
}

func (m *model) remove(ref Ref) bool {
	if _, ok := m.byRef[ref]; !ok {
		return false
	}
	delete(m.byRef, ref)
	i, last := m.pos[ref], len(m.refs)-1
	m.refs[i] = m.refs[last]
	m.pos[m.refs[i]] = i
	m.refs = m.refs[:last]
	delete(m.pos, ref)
	return true
}

// pick returns the pending entry chosen by x.
func (m *model) pick(x uint64) (modelEntry, bool) {
	if len(m.refs) == 0 {
		return modelEntry{}, false
	}
	return m.byRef[m.refs[x%uint64(len(m.refs))]], true
}

// top drops removed entries from the top of the heap and returns the
// earliest pending entry.
func (m *model) top() (modelEntry, bool) {
	for len(m.heap) > 0 {
		e := m.heap[0]
		if c, ok := m.byRef[e.ref]; ok && c.seq == e.seq {
			return e, true
		}
		m.pop()
	}
	return modelEntry{}, false
}

func (m *model) pop() {
	last := len(m.heap) - 1
	m.heap[0] = m.heap[last]
	m.heap = m.heap[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= last {
			break
		}
		if c+1 < last && less(m.heap[c+1], m.heap[c]) {
			c++
		}
		if !less(m.heap[c], m.heap[i]) {
			break
		}
		m.heap[i], m.heap[c] = m.heap[c], m.heap[i]
		i = c
	}
}

// expire takes up to limit (0: no limit) entries due at now.
func (m *model) expire(now int64, limit int) []fired {
	var out []fired
	for limit == 0 || len(out) < limit {
		e, ok := m.top()
		if !ok || e.d > now {
			break
		}
		m.remove(e.ref)
		m.pop()
		out = append(out, fired{e.d, e.ref})
	}
	return out
}

func (m *model) next() (int64, bool) {
	e, ok := m.top()
	return e.d, ok
}

// expireN calls w.Expire with a batch limit (0: none) and collects what fired.
func expireN(w *Wheel, now int64, limit int) []fired {
	var out []fired
	n := w.Expire(now, func(d int64, ref Ref) bool {
		out = append(out, fired{d, ref})
		return limit == 0 || len(out) < limit
	})
	if n != len(out) {
		panic(fmt.Sprintf("Expire returned %d, handed over %d", n, len(out)))
	}
	return out
}

// checkInvariants walks every stored word of w and returns an error if the
// structure and the ref states disagree. It returns the pending entries it
// found, by ref.
func checkInvariants(w *Wheel) (map[Ref]int64, error) {
	seen := make(map[uint64]*copies)
	pending := make(map[Ref]int64)
	visit := func(k, x uint64) error {
		if x == hole {
			return nil
		}
		if x&^rgMask != 0 {
			return fmt.Errorf("word %#x has bits outside ref and gen", x)
		}
		r := x & refMask
		st, _, m := w.refs.state(r)
		if st == nil {
			return fmt.Errorf("stored ref %#x has no page", r)
		}
		c := seen[r]
		if c == nil {
			c = new(copies)
			seen[r] = c
		}
		if st.live&m != 0 && (st.gen&m != 0) == (x&genBit != 0) {
			c.live++
			pending[Ref(r)] = deadline(k)
		} else {
			c.stale++
			if st.stale&m == 0 {
				return fmt.Errorf("stored ref %#x is neither pending nor marked stale", r)
			}
		}
		return nil
	}
	var walk func(n *node) error
	walk = func(n *node) error {
		span := uint64(1) << (uint(n.level) * slotBits)
		if n.base%(span*fanout) != 0 {
			return fmt.Errorf("node base %#x not aligned for level %d", n.base, n.level)
		}
		for i := range fanout {
			l, kid := &n.slots[i], n.kids[i]
			if n.occ&(1<<i) == 0 && (!l.empty() || kid != nil) {
				return fmt.Errorf("level %d slot %d holds entries but occ bit is clear", n.level, i)
			}
			if kid != nil {
				if !l.empty() {
					return fmt.Errorf("level %d slot %d has both a list and a kid", n.level, i)
				}
				if kid.level != n.level-1 || kid.base != n.base+uint64(i)*span {
					return fmt.Errorf("level %d slot %d: kid level %d base %#x", n.level, i, kid.level, kid.base)
				}
				if err := walk(kid); err != nil {
					return err
				}
			}
			if n.runs&(1<<i) != 0 {
				if err := checkRun(n, i); err != nil {
					return err
				}
			}
			for c := l.head; c != nil; c = c.next {
				if c.lo >= len(c.w) {
					return fmt.Errorf("chunk with lo %d of %d words", c.lo, len(c.w))
				}
				for _, x := range c.w[c.lo:] {
					off := x >> offShift
					if x != hole && off >= span {
						return fmt.Errorf("level %d: offset %d out of slot span %d", n.level, off, span)
					}
					if x == hole {
						continue
					}
					if err := visit(n.base+uint64(i)*span+off, x&rgMask); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	for j, win := range w.wins {
		if j > 0 && w.wins[j-1].key >= win.key {
			return nil, fmt.Errorf("windows out of order")
		}
		if win.root != nil {
			if win.root.level != topLevel || win.root.base != win.key<<windowBits {
				return nil, fmt.Errorf("bad window root")
			}
			if !win.wide.empty() {
				return nil, fmt.Errorf("open window with wide entries")
			}
			if err := walk(win.root); err != nil {
				return nil, err
			}
			continue
		}
		n := 0
		for c := win.wide.head; c != nil; c = c.next {
			for j := c.lo; j < len(c.w); j += 2 {
				n++
				if c.w[j+1] == hole {
					continue
				}
				if c.w[j]>>windowBits != win.key {
					return nil, fmt.Errorf("wide entry %#x in window %#x", c.w[j], win.key)
				}
				if err := visit(c.w[j], c.w[j+1]); err != nil {
					return nil, err
				}
			}
		}
		if n != win.n {
			return nil, fmt.Errorf("window counts %d wide entries, holds %d", win.n, n)
		}
	}
	if len(pending) != w.n {
		return nil, fmt.Errorf("Len %d, found %d pending copies", w.n, len(pending))
	}
	for r, c := range seen {
		if c.live > 1 || c.stale > 1 {
			return nil, fmt.Errorf("ref %#x has %d pending and %d stale copies", r, c.live, c.stale)
		}
	}
	for ti, md := range w.refs.top {
		if md == nil {
			continue
		}
		leaves := 0
		for mi, ld := range md.leaves {
			if ld == nil {
				continue
			}
			leaves++
			used := 0
			for li, p := range ld.pages {
				if p == nil {
					continue
				}
				used++
				key := uint64(ti)<<(2*dirBits) | uint64(mi)<<dirBits | uint64(li)
				if err := checkPage(key, p, int(ld.refs[li]), func(r uint64) *copies { return seen[r] }); err != nil {
					return nil, err
				}
			}
			if used == 0 || used != ld.used {
				return nil, fmt.Errorf("leaf directory counts %d pages, holds %d", ld.used, used)
			}
		}
		if leaves == 0 || leaves != md.used {
			return nil, fmt.Errorf("middle directory counts %d leaves, holds %d", md.used, leaves)
		}
	}
	return pending, nil
}

type copies struct{ live, stale int }

// checkPage checks that the bits of page p (refs key<<pageBits ...) agree
// with the stored copies counted by seen.
func checkPage(key uint64, p *page, count int, seen func(r uint64) *copies) error {
	used := 0
	for i, s := range p {
		used += bits.OnesCount64(s.live | s.stale)
		for b := range 64 {
			r := key<<pageBits | uint64(i*64+b)
			m := uint64(1) << b
			c := seen(r)
			if s.live&m != 0 && (c == nil || c.live != 1) {
				return fmt.Errorf("ref %#x is pending without a stored copy", r)
			}
			if s.stale&m != 0 && (c == nil || c.stale != 1) {
				return fmt.Errorf("ref %#x is marked stale without a stored stale copy", r)
			}
		}
	}
	if used != count || used == 0 {
		return fmt.Errorf("page %#x: use count %d, counted %d", key, count, used)
	}
	return nil
}

// checkRun checks that slot i of n, marked as a run, is one.
func checkRun(n *node, i int) error {
	if n.level == 0 || n.kids[i] != nil || n.occ&(1<<i) == 0 {
		return fmt.Errorf("level %d slot %d: a run at level 0, with a kid, or not occupied", n.level, i)
	}
	l := &n.slots[i]
	if l.head != l.tail || l.head != nil && cap(l.head.w) > maxRun {
		return fmt.Errorf("level %d slot %d: a run of more than one chunk or over %d words", n.level, i, maxRun)
	}
	if l.head == nil {
		return nil
	}
	last := uint64(0)
	for _, x := range l.head.w[l.head.lo:] {
		if x == hole {
			continue
		}
		if offset(x) < last {
			return fmt.Errorf("level %d slot %d: run out of order", n.level, i)
		}
		last = offset(x)
	}
	return nil
}

package wheel

import (
	"cmp"
	"fmt"
	"slices"
)

// fired is one entry handed over by Expire.
type fired struct {
	d   int64
	ref Ref
}

func (f fired) String() string { return fmt.Sprintf("%d/%#x", f.d, uint64(f.ref)) }

// model is the obviously correct reference: a binary heap of the pending
// entries ordered by (deadline, insertion sequence).
type model struct {
	heap []modelEntry
	seq  uint64
}

type modelEntry struct {
	d   int64
	seq uint64
	ref Ref
}

func newModel() *model { return &model{} }

func less(a, b modelEntry) bool { return a.d < b.d || a.d == b.d && a.seq < b.seq }

func (m *model) len() int { return len(m.heap) }

func (m *model) add(d int64, ref Ref) {
	m.seq++
	m.heap = append(m.heap, modelEntry{d: d, seq: m.seq, ref: ref})
	for i := len(m.heap) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(m.heap[i], m.heap[p]) {
			break
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
}

// pick returns the pending entry chosen by x.
func (m *model) pick(x uint64) (modelEntry, bool) {
	if len(m.heap) == 0 {
		return modelEntry{}, false
	}
	return m.heap[x%uint64(len(m.heap))], true
}

// pending returns the pending entries in deadline order, ties in the order
// they were added.
func (m *model) pending() []fired {
	es := slices.Clone(m.heap)
	slices.SortFunc(es, func(a, b modelEntry) int { return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.seq, b.seq)) })
	out := make([]fired, len(es))
	for i, e := range es {
		out[i] = fired{e.d, e.ref}
	}
	return out
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
	for (limit == 0 || len(out) < limit) && len(m.heap) > 0 && m.heap[0].d <= now {
		e := m.heap[0]
		m.pop()
		out = append(out, fired{e.d, e.ref})
	}
	return out
}

func (m *model) next() (int64, bool) {
	if len(m.heap) == 0 {
		return 0, false
	}
	return m.heap[0].d, true
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
// structure is not sound or its count is not Len. It returns the stored
// entries, in deadline order, ties in the order they are stored.
func checkInvariants(w *Wheel) ([]fired, error) {
	var stored []fired
	visit := func(k, x uint64) error {
		if x&^refMask != 0 {
			return fmt.Errorf("word %#x has bits outside the ref", x)
		}
		stored = append(stored, fired{deadline(k), Ref(x)})
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
					off := offset(x)
					if off >= span {
						return fmt.Errorf("level %d: offset %d out of slot span %d", n.level, off, span)
					}
					if err := visit(n.base+uint64(i)*span+off, x&refMask); err != nil {
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
	if len(stored) != w.n {
		return nil, fmt.Errorf("Len %d, found %d stored entries", w.n, len(stored))
	}
	slices.SortStableFunc(stored, func(a, b fired) int { return cmp.Compare(a.d, b.d) })
	return stored, nil
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
		if offset(x) < last {
			return fmt.Errorf("level %d slot %d: run out of order", n.level, i)
		}
		last = offset(x)
	}
	return nil
}

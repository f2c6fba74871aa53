package wheel

import (
	"fmt"
	"math/bits"
)

// RefBits is the width of a Ref: refs are at most MaxRef.
const RefBits = 40

// MaxRef is the largest Ref a wheel accepts.
const MaxRef Ref = 1<<RefBits - 1

// Ref is the caller's handle for an entry: the wheel stores it, hands it back
// when the entry fires and uses it to find the entry on Remove. At most one
// pending entry may have a given Ref. Refs must be at most MaxRef.
//
// The wheel keeps a few bits of state for every block of 4096 consecutive
// refs that holds a pending ref, so refs should be dense, like entry indexes
// within a segment: NewRef builds one from a small bucket number and such an
// index.
type Ref uint64

// NewRef returns the Ref for entry index of the loaded bucket numbered
// bucket (for example the bucket's sequence number modulo 256).
func NewRef(bucket uint8, index uint32) Ref { return Ref(bucket)<<32 | Ref(index) }

// Bucket returns the bucket number r was made with by NewRef.
func (r Ref) Bucket() uint8 { return uint8(r >> 32) }

// Index returns the entry index r was made with by NewRef.
func (r Ref) Index() uint32 { return uint32(r) }

// Wheel is a set of pending entries, each a deadline in UTC epoch
// milliseconds and a Ref, from which the due ones are taken in deadline
// order. It has no clock: the caller says what time it is.
//
// The zero Wheel is empty and ready to use. A Wheel is not safe for
// concurrent use: one goroutine owns it, and others send that goroutine work.
type Wheel struct {
	untracked bool // no per-ref state: see NewUntracked

	wins  []*window // windows that hold stored entries, by key ascending
	last  *window   // the window last looked up, or nil; a member of wins
	refs  refTable
	n     int // pending entries
	pool  chunkPool
	spare []*node // emptied nodes kept for reuse
}

// NewUntracked returns a wheel that keeps no state per ref: it costs the
// same 8 bytes per entry however sparse the refs are, but Add does not
// detect a ref that is already pending (the caller must not add one twice)
// and Remove panics. It suits a caller that cancels lazily, by skipping
// cancelled entries as they fire, and whose refs are not dense, such as
// entry offsets within a segment.
func NewUntracked() *Wheel { return &Wheel{untracked: true} }

// Len returns the number of pending entries: added, and neither removed nor
// handed over by Expire.
func (w *Wheel) Len() int { return w.n }

// Add makes ref pending with the given deadline, in constant amortized time.
// Any deadline is accepted; one that is not after the time of the next
// Expire call is handed over by that call.
//
// Add reports false and changes nothing if ref is already pending. It panics
// if ref is greater than MaxRef.
func (w *Wheel) Add(deadlineMs int64, ref Ref) bool {
	if ref > MaxRef {
		panic(fmt.Sprintf("wheel: ref %#x is greater than MaxRef %#x", uint64(ref), uint64(MaxRef)))
	}
	r := uint64(ref)
	if w.untracked {
		w.insert(key(deadlineMs), r)
		w.n++
		return true
	}
	s, used, m := w.refs.stateOrCreate(r)
	if s.live&m != 0 {
		return false
	}
	if s.stale&m == 0 {
		*used++
	}
	s.live |= m
	rg := r
	if s.gen&m != 0 {
		rg |= genBit
	}
	w.insert(key(deadlineMs), rg)
	w.n++
	return true
}

// Remove makes ref no longer pending, so that it will never be handed over,
// and reports whether it was pending. The answer depends on ref alone.
//
// deadlineMs should be the deadline ref was added with. Remove is constant
// time except in one case: removing a ref that was removed before and added
// again, while the copy stored by the first Add is still there (Next and
// Expire drop such stale copies when they reach their deadline). Then Remove
// scans the stored entries of deadlineMs's slot, or, if deadlineMs is wrong,
// all stored entries.
func (w *Wheel) Remove(deadlineMs int64, ref Ref) bool {
	if w.untracked {
		panic("wheel: Remove on a wheel made by NewUntracked")
	}
	if ref > MaxRef {
		return false
	}
	r := uint64(ref)
	s, _, m := w.refs.state(r)
	if s == nil || s.live&m == 0 {
		return false
	}
	if s.stale&m == 0 {
		// Leave the stored copy where it is; flipping gen makes it stale.
		s.stale |= m
		s.gen ^= m
	} else {
		// A stale copy is stored already and a ref can have only one:
		// erase the pending copy in place.
		rg := r
		if s.gen&m != 0 {
			rg |= genBit
		}
		if !w.erase(key(deadlineMs), rg) && !w.eraseAnywhere(rg) {
			panic(fmt.Sprintf("wheel: internal error: pending ref %#x has no stored copy", r))
		}
	}
	s.live &^= m
	w.n--
	if w.n == 0 {
		w.reset()
	}
	return true
}

// Next returns the earliest deadline among pending entries, exact to the
// millisecond; ok is false if nothing is pending. The deadline may be in the
// past. Next does deferred sorting work, so a call may take longer than
// constant time, but the cost is amortized: over its life each entry is
// moved at most once per level (four times).
func (w *Wheel) Next() (deadlineMs int64, ok bool) {
	_, k, _, ok := w.front()
	if !ok {
		return 0, false
	}
	return deadline(k), true
}

// Expire hands the pending entries whose deadline is at or before nowMs to
// fn, in deadline order and, among entries with the same deadline, in the
// order they were added. Each entry is no longer pending when fn sees it. If
// fn returns false, Expire stops after that entry, leaving the rest pending.
// Expire never hands over an entry whose deadline is after nowMs, whatever
// times earlier calls were given. It returns the number of entries handed
// over.
//
// fn must not call methods of w.
func (w *Wheel) Expire(nowMs int64, fn func(deadlineMs int64, ref Ref) bool) int {
	now := key(nowMs)
	fired := 0
slots:
	for {
		l, k, start, ok := w.front()
		if !ok || k > now {
			break
		}
		d := deadline(k)
		for {
			x, ok := l.peek()
			if !ok || x != hole && start+offset(x) != k {
				break
			}
			l.pop(&w.pool)
			if x == hole || !w.take(x) {
				continue
			}
			w.n--
			fired++
			if !fn(d, Ref(x&refMask)) {
				break slots
			}
		}
	}
	if w.n == 0 {
		w.reset()
	}
	return fired
}

// front finds the slot that holds the earliest pending entry and returns
// its list, whose head is that entry (stale copies and holes before it have
// been dropped), the entry's deadline key k, and the key where the slot
// starts, from which the offsets of its words count. ok is false if nothing
// is pending.
//
// The slot is a millisecond slot, or a coarser slot of at most maxRun words
// that front sorts into a run rather than opening it into a node: a sparse
// front then costs no nodes. On the way front opens windows and larger
// slots into finer nodes, and drops emptied nodes and windows.
func (w *Wheel) front() (l *list, k, start uint64, ok bool) {
restart:
	for w.n > 0 {
		win := w.wins[0]
		if win.root == nil {
			w.openWindow(win)
		}
		n := win.root
		if n.occ == 0 {
			w.dropFirstWindow()
			continue
		}
		i := bits.TrailingZeros64(n.occ)
		for n.level > 0 {
			kid := n.kids[i]
			if kid == nil {
				if n.runs&(1<<i) != 0 {
					break
				}
				if n.slots[i].count(maxRun) <= maxRun {
					n.slots[i].sortRun(&w.pool, uint(n.level)*slotBits)
					n.runs |= 1 << i
					break
				}
				kid = w.openSlot(n, i)
			}
			if kid.occ == 0 {
				n.kids[i] = nil
				n.occ &^= 1 << i
				w.freeNode(kid)
				continue restart
			}
			n = kid
			i = bits.TrailingZeros64(n.occ)
		}
		l := &n.slots[i]
		start := n.base + uint64(i)<<(uint(n.level)*slotBits)
		for {
			x, ok := l.peek()
			if !ok {
				n.occ &^= 1 << i
				n.runs &^= 1 << i
				continue restart
			}
			if x != hole {
				if w.live(x) {
					return l, start + offset(x), start, true
				}
				w.take(x)
			}
			l.pop(&w.pool)
		}
	}
	return nil, 0, 0, false
}

// live reports whether the stored word x is its ref's pending copy.
func (w *Wheel) live(x uint64) bool {
	if w.untracked {
		return true
	}
	s, _, m := w.refs.state(x & refMask)
	return s.live&m != 0 && (s.gen&m != 0) == (x&genBit != 0)
}

// take settles the stored word x, which is being dropped from the head of a
// millisecond slot: if it is its ref's pending copy, the ref stops being
// pending and take returns true; otherwise it is the ref's stale copy, which
// is now gone, and take returns false.
func (w *Wheel) take(x uint64) bool {
	if w.untracked {
		return true
	}
	r := x & refMask
	s, used, m := w.refs.state(r)
	if s == nil {
		panic(fmt.Sprintf("wheel: internal error: stored ref %#x has no state", r))
	}
	if s.live&m != 0 && (s.gen&m != 0) == (x&genBit != 0) {
		s.live &^= m
		if s.stale&m == 0 {
			w.refs.unuse(r, used)
		}
		return true
	}
	if s.stale&m == 0 {
		panic(fmt.Sprintf("wheel: internal error: stored ref %#x is neither pending nor stale", r))
	}
	s.stale &^= m
	if s.live&m == 0 {
		w.refs.unuse(r, used)
	}
	return false
}

// reset empties w, which holds no pending entry, dropping all stale copies
// at once. The chunk pool and spare nodes are kept.
func (w *Wheel) reset() {
	clear(w.wins)
	w.wins = nil
	w.last = nil
	w.refs = refTable{}
}

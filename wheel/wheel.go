package wheel

import (
	"fmt"
	"math/bits"
)

// RefBits is the width of a Ref: refs are at most MaxRef.
const RefBits = 40

// MaxRef is the largest Ref a wheel accepts.
const MaxRef Ref = 1<<RefBits - 1

// Ref is the caller's handle for an entry: the wheel stores it and hands it
// back when the entry fires, and does not look at it otherwise (two entries
// may have the same Ref). Refs must be at most MaxRef. NewRef builds one from
// a small bucket number and an entry index within the bucket.
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
// order. It has no clock: the caller says what time it is. An entry leaves
// the wheel only when Expire hands it over; a caller that cancels entries
// skips them then.
//
// The zero Wheel is empty and ready to use. A Wheel is not safe for
// concurrent use: one goroutine owns it, and others send that goroutine work.
type Wheel struct {
	wins  []*window // windows that hold stored entries, by key ascending
	last  *window   // the window last looked up, or nil; a member of wins
	n     int       // pending entries
	pool  chunkPool
	spare []*node // emptied nodes kept for reuse
}

// New returns an empty wheel.
func New() *Wheel { return new(Wheel) }

// Len returns the number of pending entries: added and not yet handed over
// by Expire.
func (w *Wheel) Len() int { return w.n }

// Add makes an entry with ref pending with the given deadline, in constant
// amortized time. Any deadline is accepted; one that is not after the time
// of the next Expire call is handed over by that call. It costs about 8
// bytes however the refs are spread.
//
// Add panics if ref is greater than MaxRef.
func (w *Wheel) Add(deadlineMs int64, ref Ref) {
	if ref > MaxRef {
		panic(fmt.Sprintf("wheel: ref %#x is greater than MaxRef %#x", uint64(ref), uint64(MaxRef)))
	}
	w.insert(key(deadlineMs), uint64(ref))
	w.n++
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
			if !ok || start+offset(x) != k {
				break
			}
			l.pop(&w.pool)
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
// its list, whose head is that entry, the entry's deadline key k, and the key where the slot
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
		x, ok := l.peek()
		if !ok {
			n.occ &^= 1 << i
			n.runs &^= 1 << i
			continue
		}
		return l, start + offset(x), start, true
	}
	return nil, 0, 0, false
}

// reset empties w, which holds no pending entry. The chunk pool and spare
// nodes are kept.
func (w *Wheel) reset() {
	clear(w.wins)
	w.wins = nil
	w.last = nil
}

package wheel

import (
	"cmp"
	"slices"
)

// Geometry of the tree. See the package documentation for the picture.
const (
	slotBits   = 6
	fanout     = 1 << slotBits // slots per node
	slotMask   = fanout - 1
	topLevel   = 3                         // level of a window's root node
	windowBits = slotBits * (topLevel + 1) // a window spans 1<<windowBits ms (4.66 h)
	rootShift  = slotBits * topLevel       // a root slot spans 1<<rootShift ms (4.4 min)
	maxSpare   = 16                        // emptied nodes kept for reuse
	// openAt is the number of wide (16-byte) entries at which a window
	// opens even though it is not the earliest: a root node costs about
	// 1.5 KiB, which is then at most 1.5 bytes per entry, while a window
	// holding a few far entries does not pay for a node at all.
	openAt  = 1024
	signBit = 1 << 63 // flips int64 order into uint64 order
)

// Layout of a packed word (an entry in a node slot):
//
//	63       40 39                0
//	+----------+-------------------+
//	|  offset  |        ref        |
//	+----------+-------------------+
//
// offset is the entry's deadline minus the start of its slot (0 at level 0,
// at most 18 bits at level 3).
const (
	refMask  = 1<<RefBits - 1
	offShift = RefBits
)

// The largest offset (a level-3 slot's) must fit above the ref.
var _ [64 - offShift - rootShift]struct{}

// key maps a deadline to an unsigned key of the same order.
func key(ms int64) uint64 { return uint64(ms) ^ signBit }

// deadline is the inverse of key.
func deadline(k uint64) int64 { return int64(k ^ signBit) }

// node is a level's worth of slots covering an aligned range of
// fanout<<(level*slotBits) milliseconds. Slot i of a level-l node covers the
// 1<<(l*slotBits) ms starting at base + i<<(l*slotBits). A slot holds either
// a list of packed words or, once opened, a child node (level > 0 only).
type node struct {
	base  uint64 // key of the first millisecond covered
	level uint8
	// occ has bit i set if slot i may hold entries: its list is not empty
	// or it has a kid. A set bit over an empty list or an empty kid is
	// allowed and cleaned up by the next search (Wheel.front).
	occ uint64
	// runs has bit i set if slot i's list is a run: one chunk sorted by
	// offset, served in place instead of being opened (level > 0 only).
	runs  uint64
	slots [fanout]list
	kids  [fanout]*node
}

// window is the part of the wheel covering one aligned span of
// 1<<windowBits ms. Until it opens it keeps its entries as wide pairs
// (key, ref) in one list; once open, in a tree under root.
type window struct {
	key  uint64 // deadline key >> windowBits
	wide list   // pairs of words; only while root == nil
	n    int    // pairs in wide
	root *node
}

// window returns the window with key k, creating it if create is set.
func (w *Wheel) window(k uint64, create bool) *window {
	if w.last != nil && w.last.key == k {
		return w.last
	}
	i, found := slices.BinarySearchFunc(w.wins, k, func(win *window, k uint64) int {
		return cmp.Compare(win.key, k)
	})
	if found {
		w.last = w.wins[i]
		return w.last
	}
	if !create {
		return nil
	}
	win := &window{key: k}
	w.wins = slices.Insert(w.wins, i, win)
	w.last = win
	return win
}

// dropFirstWindow forgets wins[0], whose root is empty.
func (w *Wheel) dropFirstWindow() {
	win := w.wins[0]
	if win.root != nil {
		w.freeNode(win.root)
	}
	if w.last == win {
		w.last = nil
	}
	w.wins[0] = nil
	w.wins = w.wins[1:]
	if len(w.wins) == 0 {
		w.wins = nil // let the backing array go
	}
}

// insert stores the entry (k, ref): in its window's wide list if the window
// is not open, else in the deepest existing slot covering k.
func (w *Wheel) insert(k, ref uint64) {
	win := w.window(k>>windowBits, true)
	if win.root == nil {
		win.wide.push2(&w.pool, k, ref)
		win.n++
		if win.n >= openAt {
			w.openWindow(win)
		}
		return
	}
	n := win.root
	for {
		shift := uint(n.level) * slotBits
		i := (k >> shift) & slotMask
		if kid := n.kids[i]; kid != nil {
			n = kid
			continue
		}
		x := (k&(1<<shift-1))<<offShift | ref
		n.occ |= 1 << i
		if n.runs&(1<<i) != 0 {
			if n.slots[i].insertRun(&w.pool, x) {
				return
			}
			n.runs &^= 1 << i // full: the slot will be opened
		}
		n.slots[i].push(&w.pool, x)
		return
	}
}

// openWindow moves win's wide pairs into a new root node.
func (w *Wheel) openWindow(win *window) {
	root := w.newNode(topLevel, win.key<<windowBits)
	for c := win.wide.head; c != nil; c = c.next {
		for j := c.lo; j < len(c.w); j += 2 {
			k, ref := c.w[j], c.w[j+1]
			i := (k >> rootShift) & slotMask
			root.slots[i].push(&w.pool, (k&(1<<rootShift-1))<<offShift|ref)
			root.occ |= 1 << i
		}
	}
	win.wide.release(&w.pool)
	win.n = 0
	win.root = root
}

// openSlot moves the entries of slot i of n (level > 0) into a new kid node
// one level down and returns the kid. Insertion order is kept within each of
// the kid's slots.
func (w *Wheel) openSlot(n *node, i int) *node {
	shift := uint(n.level) * slotBits
	kid := w.newNode(n.level-1, n.base+uint64(i)<<shift)
	ks := shift - slotBits
	l := &n.slots[i]
	for c := l.head; c != nil; c = c.next {
		for _, x := range c.w[c.lo:] {
			off := x >> offShift
			j := off >> ks
			kid.slots[j].push(&w.pool, (off&(1<<ks-1))<<offShift|x&refMask)
			kid.occ |= 1 << j
		}
	}
	l.release(&w.pool)
	n.runs &^= 1 << i
	n.kids[i] = kid
	return kid
}

func (w *Wheel) newNode(level uint8, base uint64) *node {
	var n *node
	if k := len(w.spare); k > 0 {
		n = w.spare[k-1]
		w.spare[k-1] = nil
		w.spare = w.spare[:k-1]
	} else {
		n = new(node)
	}
	n.level, n.base, n.occ, n.runs = level, base, 0, 0
	return n
}

// freeNode recycles n, whose slots are all empty and kidless.
func (w *Wheel) freeNode(n *node) {
	if len(w.spare) < maxSpare {
		w.spare = append(w.spare, n)
	}
}

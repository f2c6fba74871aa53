package wheel

import "math/bits"

// Chunk sizes, in 8-byte words. A list's first chunk holds minChunk words and
// each further chunk twice as many as the one before, up to maxChunk: a list
// of n words wastes at most about n (small lists) or maxChunk words (large
// lists), and a large list costs one small chunk header per 8 KiB.
const (
	minChunk   = 4
	maxChunk   = 1024
	numClasses = 9       // minChunk<<0 ... minChunk<<8 == maxChunk
	poolWords  = 1 << 14 // free words kept for reuse per size class (128 KiB)
	// maxRun is the largest slot kept as a sorted run rather than opened
	// into a node (see Wheel.front): a node costs about 1.5 KiB, so a slot
	// opened into one holds more than 128 entries and the node costs at
	// most 12 bytes per entry; inserting into a run moves at most 1 KiB.
	maxRun = 128
)

// chunk is one link of a list: a fixed-capacity array of words.
type chunk struct {
	next *chunk
	lo   int      // words at the front of w already consumed; < len(w) while in a list
	w    []uint64 // the stored words; cap(w) is the chunk's size class
}

// list is a FIFO of words kept in a chain of chunks. Words are appended at
// the tail and consumed at the head, so order is insertion order (except in
// a run, see sortRun, which is kept sorted by offset). The zero list
// is empty.
type list struct {
	head, tail *chunk
}

func (l *list) empty() bool { return l.head == nil }

// push appends x.
func (l *list) push(p *chunkPool, x uint64) {
	t := l.tail
	if t == nil || len(t.w) == cap(t.w) {
		t = l.grow(p)
	}
	t.w = append(t.w, x)
}

// push2 appends the pair a, b, keeping both in one chunk. A list must use
// either push or push2, never both: chunk sizes are even, so pairs never
// straddle two chunks.
func (l *list) push2(p *chunkPool, a, b uint64) {
	t := l.tail
	if t == nil || len(t.w) == cap(t.w) {
		t = l.grow(p)
	}
	t.w = append(t.w, a, b)
}

// grow links a new, empty tail chunk and returns it.
func (l *list) grow(p *chunkPool) *chunk {
	size := minChunk
	if l.tail != nil {
		size = min(2*cap(l.tail.w), maxChunk)
	}
	c := p.get(size)
	if l.tail == nil {
		l.head = c
	} else {
		l.tail.next = c
	}
	l.tail = c
	return c
}

// peek returns the first word; ok is false if l is empty.
func (l *list) peek() (x uint64, ok bool) {
	h := l.head
	if h == nil {
		return 0, false
	}
	return h.w[h.lo], true
}

// pop drops the first word. l must not be empty.
func (l *list) pop(p *chunkPool) {
	h := l.head
	h.lo++
	if h.lo < len(h.w) {
		return
	}
	l.head = h.next
	if l.head == nil {
		l.tail = nil
	}
	p.put(h)
}

// release returns every chunk of l to p and leaves l empty.
func (l *list) release(p *chunkPool) {
	for c := l.head; c != nil; {
		next := c.next
		p.put(c)
		c = next
	}
	*l = list{}
}

// count returns the number of words in l, or limit+1 if it has more than
// limit.
func (l *list) count(limit int) int {
	n := 0
	for c := l.head; c != nil && n <= limit; c = c.next {
		n += len(c.w) - c.lo
	}
	return min(n, limit+1)
}

// offset returns the offset field of a packed word.
func offset(x uint64) uint64 { return x >> offShift }

// sortRun rewrites l, which holds at most maxRun words of a slot spanning
// 1<<shift ms (shift >= slotBits), as a run: one chunk holding its words
// stably sorted by offset, so that entries with the same
// deadline stay in insertion order. It sorts by counting on the offset's top
// slotBits bits, then by insertion, which only has to fix entries that
// share a sub-slot.
func (l *list) sortRun(p *chunkPool, shift uint) {
	var buf [maxRun]uint64
	var counts [fanout + 1]int
	n := 0
	for c := l.head; c != nil; c = c.next {
		for _, x := range c.w[c.lo:] {
			buf[n] = x
			n++
			counts[offset(x)>>(shift-slotBits)+1]++
		}
	}
	l.release(p)
	if n == 0 {
		return
	}
	for i := 1; i <= fanout; i++ {
		counts[i] += counts[i-1]
	}
	size := minChunk
	for size < n {
		size *= 2
	}
	r := p.get(size)
	r.w = r.w[:n]
	for _, x := range buf[:n] {
		j := offset(x) >> (shift - slotBits)
		r.w[counts[j]] = x
		counts[j]++
	}
	for i := 1; i < n; i++ {
		x := r.w[i]
		j := i
		for ; j > 0 && offset(r.w[j-1]) > offset(x); j-- {
			r.w[j] = r.w[j-1]
		}
		r.w[j] = x
	}
	l.head, l.tail = r, r
}

// insertRun inserts x into the run l after the words whose offset is at most
// x's, keeping l a run. It reports false, changing nothing, if l already
// holds maxRun words.
func (l *list) insertRun(p *chunkPool, x uint64) bool {
	c := l.head
	if c == nil {
		l.push(p, x)
		return true
	}
	if len(c.w) == cap(c.w) {
		switch {
		case c.lo > 0:
			c.w = c.w[:copy(c.w, c.w[c.lo:])]
			c.lo = 0
		case cap(c.w) >= maxRun:
			return false
		default:
			r := p.get(2 * cap(c.w))
			r.w = append(r.w, c.w[c.lo:]...)
			p.put(c)
			l.head, l.tail, c = r, r, r
		}
	}
	j := len(c.w)
	for j > c.lo && offset(c.w[j-1]) > offset(x) {
		j--
	}
	c.w = append(c.w, 0)
	copy(c.w[j+1:], c.w[j:])
	c.w[j] = x
	return true
}

// chunkPool keeps freed chunks for reuse, by size class, so that a wheel in
// steady state does not feed the garbage collector. It keeps at most
// poolWords words per class; the rest are left to the collector.
type chunkPool struct {
	free [numClasses][]*chunk
}

func sizeClass(size int) int { return bits.TrailingZeros(uint(size / minChunk)) }

func (p *chunkPool) get(size int) *chunk {
	k := sizeClass(size)
	if n := len(p.free[k]); n > 0 {
		c := p.free[k][n-1]
		p.free[k][n-1] = nil
		p.free[k] = p.free[k][:n-1]
		return c
	}
	return &chunk{w: make([]uint64, 0, size)}
}

func (p *chunkPool) put(c *chunk) {
	k := sizeClass(cap(c.w))
	if (len(p.free[k])+1)*cap(c.w) > poolWords {
		return
	}
	c.next, c.lo, c.w = nil, 0, c.w[:0]
	p.free[k] = append(p.free[k], c)
}

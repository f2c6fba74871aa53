// Package wheel is the in-memory timing wheel of Hourglass: the set of
// loaded, pending entries (a deadline in UTC epoch milliseconds and a Ref
// naming the entry in its schedule segment), from which the driver takes
// what is due.
//
// It is a pure data structure: no goroutines, no clock. The caller adds
// entries, asks for the earliest deadline with Next, sleeps until then, and
// takes what is due with Expire(now). One goroutine owns a Wheel.
//
// # Guarantees
//
//   - Expire(now) hands over exactly the pending entries with deadline <= now,
//     in deadline order, ties in the order they were added; never one whose
//     deadline is after now, whatever now earlier calls were given (a clock
//     that steps back fires nothing new; one that jumps ahead fires all that
//     is due, in order).
//   - Next is exact to the millisecond, so the driver never wakes early for
//     nothing and never late.
//   - Any int64 deadline works, past or centuries ahead.
//   - Add is O(1) amortized; Next and Expire are amortized O(1) per entry:
//     each entry is moved at most four times in its life, and sorted at
//     most once per level, in a run of at most 128.
//   - About 8 bytes of heap per pending entry, overhead included, for the
//     engine's loaded window of millions of entries, however sparse the
//     refs: the wheel keeps nothing per ref beside the entry itself.
//   - There is no Remove: an entry leaves only when Expire hands it over.
//     The engine cancels lazily: a cancelled entry stays in the wheel until
//     its deadline and the engine skips it when it fires.
//
// # Design
//
// The wheel is a radix tree over absolute time, refined lazily only where
// the earliest entries are. Deadlines are mapped to uint64 keys of the same
// order. The key space is cut into windows of 2^24 ms (4.66 h); a window is
// cut into 64 slots of 2^18 ms (4.4 min), each of those into 64 of 2^12 ms
// (4.1 s), 64 of 64 ms, and 64 of 1 ms:
//
//	windows (sorted slice)   w0            w1            w2 ...
//	                         |             |
//	                         |             +-- wide list: (key, ref) pairs, 16 B each,
//	                         |                 until 1024 entries or w1 is earliest
//	level 3 node (root)    [ s0 | s1 | s2 | ... | s63 ]   slot = 2^18 ms
//	                          |     |
//	                          |     +-- list of packed words, offset within slot 18 bits
//	level 2 node           [ s0 | s1 | ... | s63 ]        slot = 2^12 ms
//	                          |     |
//	                          |     +-- run: one chunk sorted by offset (<= 128 words)
//	level 1 node           [ s0 | s1 | ... | s63 ]        slot = 64 ms
//	                          |
//	level 0 node           [ s0 | s1 | ... | s63 ]        slot = 1 ms: lists of refs
//
// Only the path to the earliest entries is refined (s0 above); every other
// slot is a plain list or a run.
//
// Add appends the entry to the deepest slot that exists for its deadline, in
// O(1) (with a one-window cache and a binary search of the few windows
// otherwise). Nothing is sorted until Next or Expire need the earliest
// entry: then the earliest non-empty slot is refined. A slot of more than
// 128 entries is opened into a node one level down, its entries moved into
// the node's slots in insertion order; a smaller one is sorted in place into
// a run (stable, by offset), which is served from its head and takes later
// inserts in order. So only the front of the wheel is refined, and a sparse
// front costs no nodes; the bulk of the entries stay in coarse slots. Each
// node keeps a 64-bit occupancy mask, so finding the earliest slot of a node
// is one TrailingZeros. There is no cursor and no ticking: placement depends
// only on the deadline, which is why a past deadline, a backward clock or a
// jump of hours need no special case.
//
// # Memory layout
//
// A slot's list is a chain of chunks of 8-byte words; chunks double from 4
// up to 1024 words (8 KiB) and are recycled through a small pool. A word is
//
//	63        40 39                0
//	+-----------+-------------------+
//	|  offset   |        ref        |
//	+-----------+-------------------+
//
// where offset is the deadline minus the slot's start (0 bits at level 0, 18
// at level 3) and ref the caller's 40-bit Ref. Entries in a window that is
// not open yet are two words (key, ref). With 10 million entries over two
// hours that is 8 bytes for the word and about 0.1 for chunk headers and
// slack.
//
// # Known gaps
//
// TODO(front-latency): opening a level-3 slot moves all its entries at
// once; with 10 million entries over two hours that is ~360,000 entries,
// a few milliseconds, every 4.4 minutes of deadlines.
//
// TODO(sparse-front): a slot, run or window costs a small fixed amount (a
// chunk of 4 words and its header, 80 bytes; a node, 1.5 KiB) whatever it
// holds. Entries more than 4.4 minutes apart, added in descending order with
// a Next after each (so that every window gets opened as the earliest), cost
// about 110 bytes each; dense loads cost 8.
//
// It owns the timing structure only, and imports no other Hourglass
// package; the engine's driver goroutine owns the one Wheel.
package wheel

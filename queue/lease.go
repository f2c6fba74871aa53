package queue

import (
	"container/heap"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// lease states.
const (
	leased   = iota // held by a consumer until deadline
	settling        // an Ack, Nack or dead-lettering is writing its outcome
)

// lease is a received, not yet acked message. While it exists its offset
// holds the topic's low-water mark down.
type lease struct {
	off      int64
	id       message.ID
	attempt  uint32
	deadline int64 // on Queue.mono, the monotonic clock
	until    int64 // the deadline on the wall clock (UnixNano), as shown to the consumer
	serial   uint64
	state    uint8
	hi       int // index in topic.heap, -1 when not in it
	// ahead: taken out of turn (Take) at or after the cursor, never
	// received: once acked, the reader must skip its record.
	ahead bool
	// key is the message's flow key under a flow policy (Policy.Flow);
	// nil otherwise.
	key *flowKey
	// expireAt is the message's expiry (message.ExpireAtHeader), UTC
	// epoch milliseconds; 0: none.
	expireAt int64
}

// leaseHeap orders leases in the leased state by deadline.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.hi = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.hi = -1
	return l
}

// leaseSet is a topic's leases, leased and settling, by offset and by ID,
// and the leased ones by deadline with the timer that expires them.
// Guarded by topic.mu.
type leaseSet struct {
	byOff   map[int64]*lease
	byID    map[message.ID]*lease
	heap    leaseHeap
	timer   *time.Timer
	timerAt int64 // deadline the timer is set for; 0 if none
}

// add adds the new lease l.
func (s *leaseSet) add(l *lease) {
	s.byOff[l.off] = l
	s.byID[l.id] = l
	heap.Push(&s.heap, l)
}

// forget removes l, out of the heap, from the tables.
func (s *leaseSet) forget(l *lease) {
	delete(s.byOff, l.off)
	if s.byID[l.id] == l {
		delete(s.byID, l.id)
	}
}

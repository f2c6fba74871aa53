package engine

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// State is what became of a scheduled message, as the engine knows it.
type State int

// States answered by Get.
const (
	// StateNotFound: no such message here (never scheduled, or its
	// segment was deleted once every entry in it was done).
	StateNotFound State = iota
	// StatePending: in its schedule segment and not done.
	StatePending
	// StateDelivering: handed to the sink, not confirmed yet.
	StateDelivering
	// StateDelivered: the sink confirmed it.
	StateDelivered
	// StateCancelled: it will never be delivered.
	StateCancelled
	// StateDeadLettered: the sink refused it for good.
	StateDeadLettered
	// StateRescheduled: a Reschedule replaced it (Engine.Moved names the
	// replacement); it will never be delivered under this ID.
	StateRescheduled
)

// String returns the state's name ("pending", "not-found", ...).
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateDelivering:
		return "delivering"
	case StateDelivered:
		return "delivered"
	case StateCancelled:
		return "cancelled"
	case StateDeadLettered:
		return "dead-lettered"
	case StateRescheduled:
		return "rescheduled"
	}
	return "not-found"
}

// Found is a message Get or List read from its schedule segment. Its
// Message owns its bytes.
type Found struct {
	ID      message.ID
	State   State
	Message message.Message
}

// Get looks id up: it reads the message from its schedule segment (found
// from the ID's deliverAt, loaded or not) and asks the driver what became
// of it (fate.go); for a bucket not in memory, the segment's dispatch log
// says. It changes nothing and reads no commitlog. It finds the entry by
// bisecting its segment (schedulelog's IterNear), reading O(log size)
// entries and at most about 64 KiB near it.
func (e *Engine) Get(ctx context.Context, id message.ID) (Found, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return Found{}, ErrClosed
	}
	if id.DeliverAt < 0 || id.Seq > math.MaxInt64 || int64(id.Seq) >= e.log.EndOffset() {
		return Found{ID: id}, nil
	}
	if err := e.reput.WaitRouted(ctx, int64(id.Seq)+1); err != nil {
		return Found{}, err
	}
	removed := e.reput.Removed()
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return Found{ID: id}, nil
	}
	f := Found{ID: id}
	ok, err := readEntry(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)), id.Seq, &f.Message)
	if err != nil || !ok {
		return Found{ID: id}, err
	}
	if f.Message.DeliverAt != id.DeliverAt {
		return Found{ID: id}, nil // the seq names another message
	}
	if e.afterFind != nil {
		e.afterFind()
	}
	var known bool
	if err := e.d.call(ctx, func() { f.State, known = e.d.fateOf(id.Seq, seg.Start) }); err != nil {
		return Found{}, err
	}
	if known {
		return f, nil
	}
	// Its bucket is not in memory: its dispatch log says whether and why
	// it is done.
	r, done, err := e.unloadedDone(seg.Start, id.Seq)
	if err != nil {
		return Found{}, err
	}
	if gone, err := e.entryGone(id, removed); err != nil || gone {
		// Retired while it was read (its dispatch log may be gone, or
		// be a new segment's): as for a bucket retired before, not found.
		return Found{ID: id}, err
	}
	if done {
		f.State = stateOf(r)
	}
	return f, nil
}

// readEntry reads the entry seq of the segment at path into m (which then
// owns its bytes). A missing segment (deleted since it was found) or seq
// not in it is false.
func readEntry(path string, seq uint64, m *message.Message) (bool, error) {
	r, err := schedulelog.OpenReader(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	it := r.IterNear(seq)
	for it.Next() {
		if it.Seq() < seq {
			continue
		}
		if it.Seq() > seq {
			return false, nil
		}
		copyMessage(m, it.Message())
		return true, nil
	}
	return false, it.Err()
}

// copyMessage sets dst to a copy of src that owns its bytes.
func copyMessage(dst, src *message.Message) {
	*dst = message.Message{DeliverAt: src.DeliverAt, Attempt: src.Attempt, Origin: src.Origin,
		Topic: slices.Clone(src.Topic), Body: slices.Clone(src.Body)}
	if src.Body != nil && dst.Body == nil {
		dst.Body = []byte{}
	}
	if len(src.Headers) > 0 {
		dst.Headers = make([]message.Header, len(src.Headers))
		for i, h := range src.Headers {
			dst.Headers[i] = message.Header{Key: slices.Clone(h.Key), Value: slices.Clone(h.Value)}
		}
	}
}

// Limits of ListRequest.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListRequest selects pending messages of one topic.
type ListRequest struct {
	Topic string
	// From (inclusive) and To (exclusive) bound the delivery time, UTC
	// epoch ms; To <= 0 means no end.
	From, To int64
	// After is the last message of the previous page: only messages
	// ordered after it (by deliverAt, then seq) are listed. Zero for the
	// first page.
	After message.ID
	// Limit is the page size, 1 to MaxListLimit; 0 means DefaultListLimit.
	Limit int
}

// maxListRereads bounds how often List reads a segment again because a
// bucket was retired while it read it.
const maxListRereads = 4

// ErrBadList is returned by List for a request it cannot serve; the
// message says what is allowed.
var ErrBadList = errors.New("engine: invalid list request")

// List returns at most req.Limit pending messages of req.Topic, ordered
// by (deliverAt, seq), read from the schedule segments on disk: entries
// whose done-record is in their dispatch log, or that the engine is
// delivering or has cancelled, are left out. It changes nothing. Pages
// are stable under concurrent writes: a page starts after req.After, so
// a message scheduled before it never shifts later pages; a message
// pending through the whole listing is on exactly one page.
//
// Its memory is the page plus the done set of one segment at a time; its
// time is a read of each segment it passes (a page inside one bucket
// reads that bucket's segment once).
func (e *Engine) List(ctx context.Context, req ListRequest) ([]Found, error) {
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	if req.Limit < 1 || req.Limit > MaxListLimit {
		return nil, fmt.Errorf("%w: page size %d: from 1 to %d", ErrBadList, req.Limit, MaxListLimit)
	}
	to := req.To
	if to <= 0 {
		to = math.MaxInt64
	}
	if req.From > to {
		return nil, fmt.Errorf("%w: from (%d ms) is after to (%d ms)", ErrBadList, req.From, to)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	// Every Schedule answered before the call is listed: its record is
	// routed first.
	if err := e.reput.WaitRouted(ctx, e.log.EndOffset()); err != nil {
		return nil, err
	}
	var skip map[uint64]struct{}
	if err := e.d.call(ctx, func() { skip = e.d.notPending() }); err != nil {
		return nil, err
	}
	lo := listKey{at: req.From}
	if !req.After.IsZero() {
		next := listKey{at: req.After.DeliverAt, seq: req.After.Seq + 1}
		if req.After.Seq == math.MaxUint64 {
			next = listKey{at: req.After.DeliverAt + 1}
		}
		lo = laterKey(lo, next)
	}
	var out []Found
	for _, seg := range e.reput.Segments() {
		if len(out) == req.Limit {
			break
		}
		if seg.Start >= to {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Cancels reput routed to the segment's dispatch log must be in
		// the file before it is read.
		if err := e.reput.SyncDispatch(seg.Start); err != nil {
			return nil, err
		}
		sel := listSelect{topic: []byte(req.Topic), lo: lo, to: to, limit: req.Limit - len(out), skip: skip}
		var got []Found
		var err error
		for range maxListRereads {
			// A retirement while the segment and its dispatch log are read
			// may pair the segment with a missing (or a new segment's)
			// dispatch log: read them again.
			removed := e.reput.Removed()
			got, err = sel.segment(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)),
				filepath.Join(e.schedDir, dispatchlog.Name(seg.Start)))
			if err != nil {
				return nil, err
			}
			if e.reput.Removed() == removed {
				break
			}
		}
		out = append(out, got...)
	}
	return out, nil
}

// notPending returns the seqs the driver holds that List must leave out:
// in flight, and claimed by a recorded Cancel or Reschedule (its
// dispatch-log record may not be written yet). It runs on the driver
// goroutine.
func (d *driver) notPending() map[uint64]struct{} {
	skip := make(map[uint64]struct{}, len(d.fates.live))
	for seq, lf := range d.fates.live {
		if lf.state != claimed {
			skip[seq] = struct{}{}
		}
	}
	return skip
}

// listKey orders List's results.
type listKey struct {
	at  int64
	seq uint64
}

func (a listKey) compare(b listKey) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

func laterKey(a, b listKey) listKey {
	if a.compare(b) >= 0 {
		return a
	}
	return b
}

// listSelect picks, from one segment, the limit smallest entries of topic
// with key >= lo and deliverAt < to that are not done and not in skip.
type listSelect struct {
	topic []byte
	lo    listKey
	to    int64
	limit int
	skip  map[uint64]struct{}
}

type listCand struct {
	key listKey
	off int64
}

// candHeap is a max-heap: its top is the largest candidate kept.
type candHeap []listCand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].key.compare(h[j].key) > 0 }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(listCand)) }
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// segment reads the segment at path (and its dispatch log at donePath)
// and returns the selected entries in order. A segment deleted since it
// was listed holds nothing.
func (s *listSelect) segment(path, donePath string) ([]Found, error) {
	r, err := schedulelog.OpenReader(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	end := r.Start() + r.Duration().Milliseconds()
	if end <= s.lo.at || r.Start() >= s.to {
		return nil, nil
	}
	done, _, err := dispatchlog.Load(donePath)
	if err != nil {
		return nil, err
	}
	h := make(candHeap, 0, s.limit)
	it := r.Iter()
	for it.Next() {
		m := it.Message()
		k := listKey{at: m.DeliverAt, seq: it.Seq()}
		if k.compare(s.lo) < 0 || m.DeliverAt >= s.to || string(m.Topic) != string(s.topic) {
			continue
		}
		if len(h) == s.limit && k.compare(h[0].key) >= 0 {
			continue
		}
		if _, ok := s.skip[k.seq]; ok || done.Contains(k.seq) {
			continue
		}
		if len(h) == s.limit {
			h[0] = listCand{key: k, off: it.Offset()}
			heap.Fix(&h, 0)
		} else {
			heap.Push(&h, listCand{key: k, off: it.Offset()})
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(h, func(a, b listCand) int { return a.key.compare(b.key) })
	out := make([]Found, len(h))
	var buf []byte
	for i, c := range h {
		var m message.Message
		if buf == nil {
			buf = make([]byte, 4096)
		}
		if _, err := r.ReadAt(c.off, buf, &m); err != nil {
			return nil, err
		}
		out[i] = Found{ID: message.ID{DeliverAt: c.key.at, Seq: c.key.seq}, State: StatePending}
		copyMessage(&out[i].Message, &m)
	}
	return out, nil
}

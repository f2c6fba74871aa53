package queue

import (
	"sync"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// recentIDs are the IDs of the last records of the queue log when the
// topic was opened (loadRecent). Any goroutine may call drop.
type recentIDs struct {
	mu struct {
		sync.Mutex
		ids map[message.ID]struct{}
	}
}

// drop returns batch without the messages whose IDs are recent, which it
// forgets, and how many it dropped. The engine delivers them again when
// it crashed before recording them done (see loadRecent).
func (r *recentIDs) drop(batch []engine.Delivery) ([]engine.Delivery, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.mu.ids) == 0 {
		return batch, 0
	}
	var out []engine.Delivery
	for i, d := range batch {
		if _, dup := r.mu.ids[d.ID]; dup {
			if out == nil {
				out = append(make([]engine.Delivery, 0, len(batch)), batch[:i]...)
			}
			delete(r.mu.ids, d.ID)
			continue
		}
		if out != nil {
			out = append(out, d)
		}
	}
	if out == nil {
		return batch, 0
	}
	if len(r.mu.ids) == 0 {
		r.mu.ids = nil
	}
	return out, len(batch) - len(out)
}

// dropRedelivered returns batch without the messages the queue log already
// held when the topic was opened (recentIDs.drop).
func (t *topic) dropRedelivered(batch []engine.Delivery) []engine.Delivery {
	out, n := t.recent.drop(batch)
	if n > 0 {
		t.q.opts.Logger.Info("queue: dropped messages delivered again after a restart", "topic", t.name, "dropped", n)
	}
	return out
}

// appendReq is one caller's records waiting to be appended.
type appendReq struct {
	recs [][]byte
	err  error
	done chan struct{}
}

// appender queues the callers of topic.append: the first one appends for
// everyone queued behind it, in one Append and so one fsync, until none
// is left, so that appends are serialised (end and unread count exactly)
// and callers arriving during an fsync share the next one.
type appender struct {
	mu struct {
		sync.Mutex
		appending bool
		queued    []*appendReq
	}
	// The appending caller's scratch, kept from call to call: only the
	// caller enqueue chose uses them, until take returns none (set under
	// mu, read after enqueue chose the next caller under mu).
	crecs []commitlog.Record
	offs  []int64
}

// enqueue queues req and reports whether the caller appends (no one
// else is); otherwise it waits for req.done.
func (a *appender) enqueue(req *appendReq) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.queued = append(a.mu.queued, req)
	if a.mu.appending {
		return false
	}
	a.mu.appending = true
	return true
}

// take returns the requests queued for the caller enqueue chose; when
// none is left it returns none and the append is over, and the caller's
// scratch (crecs, offs) is kept for the next one.
func (a *appender) take(crecs []commitlog.Record, offs []int64) []*appendReq {
	a.mu.Lock()
	defer a.mu.Unlock()
	reqs := a.mu.queued
	a.mu.queued = nil
	a.mu.appending = len(reqs) > 0
	if !a.mu.appending && crecs != nil {
		clear(crecs) // the payloads are the callers'
		a.crecs, a.offs = crecs[:0], offs[:0]
	}
	return reqs
}

// busy reports whether records are being appended or wait to be.
func (a *appender) busy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.appending || len(a.mu.queued) > 0
}

// append appends recs to the queue log and returns once they are durable
// (under SyncAlways and SyncInterval: see openTopic). The first caller
// appends for everyone queued behind it (appender).
func (t *topic) append(recs [][]byte) error {
	req := &appendReq{recs: recs, done: make(chan struct{})}
	if !t.appends.enqueue(req) {
		<-req.done
		return req.err
	}
	crecs, offs := t.appends.crecs, t.appends.offs // ours until take returns none
	for reqs := t.appends.take(nil, nil); len(reqs) > 0; reqs = t.appends.take(crecs, offs) {
		crecs = crecs[:0]
		bytes := int64(0)
		for _, r := range reqs {
			for _, p := range r.recs {
				crecs = append(crecs, commitlog.Record{Type: typeMessage, Payload: p})
				bytes += int64(record.Size(len(p)))
			}
		}
		var err error
		offs, err = t.log.Append(offs[:0], crecs...)
		if err == nil {
			// Receives read only what the log made visible, after its
			// fsync (under SyncNone at once): waking them before would let
			// them find nothing and sleep out their long poll. Waiting
			// here also keeps Deliver from returning (and the engine from
			// recording the messages done) before the queue holds them
			// durably.
			last := len(offs) - 1
			err = t.log.WaitVisible(offs[last] + int64(record.Size(len(crecs[last].Payload))))
		}
		if err == nil {
			last := len(offs) - 1
			t.mu.Lock()
			t.mu.read.end = offs[last] + int64(record.Size(len(crecs[last].Payload)))
			t.mu.read.unread += int64(len(offs))
			t.mu.stats.Delivered += uint64(len(offs))
			t.mu.ck.bytes += bytes
			t.wake()
			t.maybeCheckpointLocked()
			t.mu.Unlock()
		}
		if err != nil {
			t.broke(StageAppend, err)
		} else {
			t.q.ok(t.name, StageAppend)
		}
		for _, r := range reqs {
			r.err = err
			close(r.done)
		}
	}
	return req.err
}

// deliverScratch is the memory a Deliver encodes its records in; the log
// has copied them once append returns. Allocated for each call, a hot
// second's deliveries (megabytes a call) were fresh pages faulted in and
// cleared: a tenth of the server's CPU.
type deliverScratch struct {
	recs [][]byte
	buf  []byte
}

var deliverScratches sync.Pool

// maxPooledDeliver bounds the buffers kept in deliverScratches (the
// engine merges at most engine.MaxSinkBatchBytes into one Deliver).
const maxPooledDeliver = 16 << 20

func getDeliverScratch() *deliverScratch {
	if sc, ok := deliverScratches.Get().(*deliverScratch); ok {
		return sc
	}
	return &deliverScratch{}
}

func putDeliverScratch(sc *deliverScratch) {
	if cap(sc.buf) > maxPooledDeliver {
		return
	}
	clear(sc.recs)
	deliverScratches.Put(sc)
}

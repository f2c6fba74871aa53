package queue

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
)

// Stages of a topic whose failures Health reports.
const (
	StageOpen       = "open"        // opening the topic's logs and recovering its state
	StageAppend     = "append"      // Deliver: appending to the queue log
	StageAck        = "ack"         // appending acks to the ack log
	StageCheckpoint = "checkpoint"  // writing a checkpoint and deleting what it covers
	StageDeadLetter = "dead-letter" // moving a message to <topic>.dlq
)

// DefaultStallAfter is how long a stage of a topic may fail before Health
// reports it.
const DefaultStallAfter = 2 * time.Second

// StallError says that a stage of a topic has failed since Since, Attempts
// times in a row; Err is its latest failure (a full disk, too many open
// files, a failing device). The stage is retried (by the queue, or by its
// callers: the engine retries Deliver) and the error goes away once it
// works again.
type StallError struct {
	Topic    string
	Stage    string
	Since    time.Time
	Attempts int
	Err      error
}

func (e *StallError) Error() string {
	return fmt.Sprintf("queue: topic %q: %s failing since %s (%d attempts): %v",
		e.Topic, e.Stage, e.Since.UTC().Format(time.RFC3339), e.Attempts, e.Err)
}

// Unwrap returns the latest failure.
func (e *StallError) Unwrap() error { return e.Err }

// health records the failing stages of the topics. Any goroutine may call
// its methods; ok costs one atomic load while nothing fails.
type health struct {
	n      atomic.Int32 // len(stalls), read without mu
	mu     sync.Mutex
	stalls map[[2]string]*StallError // by topic, stage; guarded by mu
}

// fail records a failed attempt of stage of topic.
func (q *Queue) fail(topic, stage string, err error) {
	h := &q.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stalls == nil {
		h.stalls = map[[2]string]*StallError{}
	}
	k := [2]string{topic, stage}
	s := h.stalls[k]
	if s == nil {
		s = &StallError{Topic: topic, Stage: stage, Since: q.now()}
		h.stalls[k] = s
		h.n.Add(1)
	}
	s.Attempts++
	s.Err = err
}

// ok records that stage of topic worked.
func (q *Queue) ok(topic, stage string) {
	h := &q.health
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{topic, stage}
	if h.stalls[k] != nil {
		delete(h.stalls, k)
		h.n.Add(-1)
	}
}

// reopened records that topic was opened: its logs are fresh, so every
// failure of its stages is over.
func (q *Queue) reopened(topic string) {
	h := &q.health
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.stalls {
		if k[0] == topic {
			delete(h.stalls, k)
			h.n.Add(-1)
		}
	}
}

// Health returns nil while every stage of every topic works, or has
// failed for less than DefaultStallAfter; otherwise the *StallError of
// the oldest failure, naming the topic, the stage and since when (the
// error says how many others fail too).
func (q *Queue) Health() error {
	h := &q.health
	if h.n.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest *StallError
	n := 0
	for _, s := range h.stalls {
		if q.now().Sub(s.Since) < q.opts.stallAfter {
			continue
		}
		n++
		if oldest == nil || s.Since.Before(oldest.Since) {
			oldest = s
		}
	}
	if oldest == nil {
		return nil
	}
	c := *oldest
	if n > 1 {
		return fmt.Errorf("%w (and %d more topics or stages failing)", &c, n-1)
	}
	return &c
}

// broke reports err, a failure of one of t's logs, and whether it leaves
// the log unusable: a failed write or fsync is sticky (the log returns it
// from then on), so t must be closed and opened again to go on. A full
// disk when claiming space is not: the next append tries again.
func (t *topic) broke(stage string, err error) {
	t.q.fail(t.name, stage, err)
	if errors.Is(err, commitlog.ErrDiskFull) || errors.Is(err, ErrClosed) || errors.Is(err, commitlog.ErrClosed) {
		return
	}
	if t.broken.CompareAndSwap(false, true) {
		t.q.opts.Logger.Error("queue: a log of the topic failed; the topic is opened again when next used (leases it holds end)", "topic", t.name, "stage", stage, "err", err)
		t.q.retryLater(t.name)
	}
}

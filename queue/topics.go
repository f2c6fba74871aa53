package queue

import (
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultIdleTopic is Options.IdleTopic's default: how long an idle topic
// keeps its logs open.
const DefaultIdleTopic = time.Minute

// slot is a topic the queue knows: open, being opened or retired, or
// retired (its logs closed after it sat idle; the next use opens them
// again). Its fields are guarded by Queue.mu, except refs.
type slot struct {
	t      *topic        // the open topic; nil while being opened, retired or retiring
	busy   chan struct{} // non-nil while the topic is being opened or retired; closed when that ends
	err    error         // why the last open failed, for the callers that waited for it
	opened bool          // the topic has been open: Stats lists it
	// refs counts the callers using t, from Queue.topic or Queue.hold to
	// Queue.release. It is raised under Queue.mu only, so the sweeper,
	// holding Queue.mu, sees every holder.
	refs atomic.Int32
	uses uint64 // references ever taken on t
	// seen and idleFrom are the sweeper's: uses when it last looked, and
	// since when t has looked idle (zero: it did not).
	seen     uint64
	idleFrom time.Time
	past     TopicStats // counters of the topic's earlier openings since Open
	// admitted: Admit let the topic in and it was not created yet; the
	// first Deliver creates it, Receive and Stats do not see it.
	admitted bool
	// retrying and backoff are retryLater's: a reopening is scheduled,
	// and its delay.
	retrying bool
	backoff  time.Duration
}

// Admit lets topic in as one the queue will hold: nil if it exists or
// was admitted already, or if fewer than Options.MaxTopics topics are held
// or admitted (dead-letter topics count like any other); otherwise an
// error wrapping ErrTooManyTopics. It creates no file: the first Deliver
// does. The server admits the topics of every Schedule, so that a message
// it accepts is never refused when it comes due.
func (q *Queue) Admit(topic string) error {
	if err := ValidateTopic(topic); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.topics[topic] != nil {
		return nil
	}
	if max := q.opts.MaxTopics; max > 0 && len(q.mu.topics) >= max {
		return fmt.Errorf("%w: topic %q would be a new topic, and %d are held already (dead-letter topics included), the limit", ErrTooManyTopics, topic, len(q.mu.topics))
	}
	q.mu.topics[topic] = &slot{admitted: true}
	return nil
}

// topic returns the topic called name with a reference the caller gives
// back with release, opening its logs first if it is not open (a topic
// retired while idle is opened again). With create it creates a topic
// that does not exist; without, it returns nil for one. The caller is
// inside enter/leave, or a worker Close waits for.
func (q *Queue) topic(name string, create bool) (*topic, error) {
	q.mu.Lock()
	for {
		s := q.mu.topics[name]
		switch {
		case (s == nil || s.admitted && s.busy == nil) && !create:
			q.mu.Unlock()
			return nil, nil
		case s == nil:
			s = &slot{}
			q.mu.topics[name] = s
			return q.open(s, name, true)
		case s.admitted && s.busy == nil:
			return q.open(s, name, true)
		case s.busy != nil:
			busy := s.busy
			q.mu.Unlock()
			<-busy
			q.mu.Lock()
			if s.busy == nil && s.t == nil && s.err != nil {
				// The open this caller waited for failed.
				err, gone := s.err, q.mu.topics[name] != s
				q.mu.Unlock()
				if gone && !create {
					return nil, nil // its creation failed: it does not exist
				}
				return nil, err
			}
		case s.t == nil:
			return q.open(s, name, false)
		default:
			t := s.t
			if t.broken.Load() && s.refs.Load() == 0 {
				// A log of t failed for good: close it and open it again
				// from what is on disk.
				s.past = s.past.plus(t.statsSnapshot())
				s.t, s.busy = nil, make(chan struct{})
				q.mu.Unlock()
				q.closeRetired(s, t)
				q.mu.Lock()
				continue
			}
			s.refs.Add(1)
			s.uses++
			q.mu.Unlock()
			return t, nil
		}
	}
}

// open opens the topic of slot s, which is not open, for the caller of
// topic, who gets a reference; create makes a new topic on disk. q.mu is
// held; open releases it. While it opens, other callers wait on s.busy.
func (q *Queue) open(s *slot, name string, create bool) (*topic, error) {
	busy := make(chan struct{})
	s.busy, s.err = busy, nil
	q.mu.Unlock()
	t, err := q.openTopic(s, name, create)
	q.mu.Lock()
	s.busy = nil
	if err != nil {
		q.fail(name, StageOpen, err)
		s.err = err
		if !create {
			defer q.retryLater(name)
		}
		if create && !s.admitted {
			delete(q.mu.topics, name) // the next caller tries again
		}
	} else {
		defer q.reopened(name)
		s.t, s.opened, s.admitted = t, true, false
		s.refs.Add(1)
		s.uses++
		if create && q.mu.created != nil {
			close(q.mu.created)
			q.mu.created = nil
		}
	}
	q.mu.Unlock()
	close(busy)
	if err == nil {
		q.opening(t)
	}
	return t, err
}

// opening finishes opening t once others can find it: it asks for the
// checkpoint recovery wants, and tells the sweeper a topic is open.
func (q *Queue) opening(t *topic) {
	t.mu.Lock()
	kick := t.mu.ck.queued
	t.mu.Unlock()
	if kick {
		q.ckpts.push(t)
	}
	select {
	case q.opened <- struct{}{}:
	default:
	}
}

// hold takes a reference on t for work that found it by pointer rather
// than by name (a checkpoint it asked for, a dead letter its lease
// expiry started). It reports false if t is no longer open.
func (q *Queue) hold(t *topic) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.slot.t != t {
		return false
	}
	t.slot.refs.Add(1)
	t.slot.uses++
	return true
}

// release gives back a reference topic or hold took; t may be nil.
func (q *Queue) release(t *topic) {
	if t != nil {
		t.slot.refs.Add(-1)
	}
}

// sweeper is the goroutine that retires idle topics (retireIdle). It
// sleeps while no topic is open.
func (q *Queue) sweeper() {
	defer q.wg.Done()
	idle := q.opts.IdleTopic
	tm := time.NewTimer(idle)
	defer tm.Stop()
	armed := true
	for {
		select {
		case <-q.done:
			return
		case <-tm.C:
			armed = false
		case <-q.opened:
			if !armed {
				tm.Reset(idle)
				armed = true
			}
			continue
		}
		if wait := q.retireIdle(); wait > 0 {
			tm.Reset(wait)
			armed = true
		}
	}
}

// retireIdle closes the logs of the topics that have been idle for
// Options.IdleTopic: no reference held (no Deliver, Receive, Ack or Nack
// at work, no Receive waiting) and none taken since, and nothing
// receivable, leased or being written (topic.idle). Each writes a final
// checkpoint first, so that opening it again replays nothing; its
// counters are kept for Stats. It returns when to look again, 0 if no
// topic is open.
func (q *Queue) retireIdle() time.Duration {
	idle := q.opts.IdleTopic
	now := time.Now()
	var next time.Duration
	type retiring struct {
		s *slot
		t *topic
	}
	var rs []retiring
	q.mu.Lock()
	for _, s := range q.mu.topics {
		if s.t == nil || s.busy != nil {
			continue
		}
		wait := idle
		switch {
		case s.refs.Load() > 0 || !s.t.idle():
			s.idleFrom = time.Time{}
		case s.idleFrom.IsZero() || s.uses != s.seen:
			s.idleFrom = now
		case now.Sub(s.idleFrom) >= idle:
			st := s.t.statsSnapshot()
			s.past = s.past.plus(st)
			rs = append(rs, retiring{s, s.t})
			s.t, s.busy, s.idleFrom = nil, make(chan struct{}), time.Time{}
			continue
		default:
			wait = idle - now.Sub(s.idleFrom)
		}
		s.seen = s.uses
		if next == 0 || wait < next {
			next = wait
		}
	}
	q.mu.Unlock()
	for _, r := range rs {
		if q.opts.beforeRetire != nil {
			q.opts.beforeRetire(r.t.name)
		}
		q.closeRetired(r.s, r.t)
	}
	return next
}

// closeRetired closes t, which slot s no longer holds (s.busy is set),
// and lets the callers waiting on s go on: the next use opens it again.
func (q *Queue) closeRetired(s *slot, t *topic) {
	if err := t.close(); err != nil {
		q.opts.Logger.Error("queue: closing a topic failed; it is opened again when next used", "topic", t.name, "err", err)
	}
	q.mu.Lock()
	busy := s.busy
	s.busy = nil
	q.mu.Unlock()
	close(busy)
}

// retryLater opens the topic name again after a backoff (doubling from
// 50 ms to 5 s), until it is open and its logs work: a topic whose log
// failed, or whose opening failed, resumes by itself once the cause (a
// full disk, too many open files) is gone.
func (q *Queue) retryLater(name string) {
	q.mu.Lock()
	s := q.mu.topics[name]
	if s == nil || s.retrying {
		q.mu.Unlock()
		return
	}
	s.retrying = true
	s.backoff = min(max(2*s.backoff, 50*time.Millisecond), 5*time.Second)
	d := s.backoff
	q.mu.Unlock()
	time.AfterFunc(d, func() {
		if q.enter() != nil {
			return
		}
		defer q.leave()
		q.mu.Lock()
		s.retrying = false
		q.mu.Unlock()
		t, err := q.topic(name, false)
		if t != nil {
			q.release(t)
		}
		if err != nil || t != nil && t.broken.Load() {
			q.retryLater(name)
			return
		}
		q.mu.Lock()
		s.backoff = 0
		q.mu.Unlock()
	})
}

// checkpointLater asks for t's checkpoint again after a backoff, if t is
// still open then.
func (q *Queue) checkpointLater(t *topic) {
	time.AfterFunc(time.Second, func() {
		if q.enter() != nil {
			return
		}
		defer q.leave()
		if !q.hold(t) {
			return // closed: closing wrote one, or its reopening asks
		}
		defer q.release(t)
		t.mu.Lock()
		kick := !t.mu.ck.queued && !t.mu.closed
		t.mu.ck.queued = t.mu.ck.queued || kick
		t.mu.Unlock()
		if kick {
			q.ckpts.push(t)
		}
	})
}

// idle reports whether closing t's logs loses nothing and keeps no one
// waiting: nothing leased (a lease lives in memory only) or being
// appended. Messages waiting to be received, for the first time or again,
// are held by the checkpoint the topic writes as it closes, and received
// when it is opened again. Receives waiting for messages hold a
// reference, which the caller checks.
func (t *topic) idle() bool {
	if t.appends.busy() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.mu.closed && len(t.mu.leases.byOff) == 0
}

// plus returns the counters of s and o added, with o's gauges (the
// counters of a topic's earlier openings plus those of its current one).
func (s TopicStats) plus(o TopicStats) TopicStats {
	o.Delivered += s.Delivered
	o.Acked += s.Acked
	o.Nacked += s.Nacked
	o.Expired += s.Expired
	o.Redelivered += s.Redelivered
	o.DeadLettered += s.DeadLettered
	return o
}

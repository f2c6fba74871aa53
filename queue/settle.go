package queue

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// finder picks the lease an Ack or Nack names. t.mu is held.
type finder func(t *topic) *lease

func byID(id message.ID) finder {
	return func(t *topic) *lease { return t.mu.leases.byID[id] }
}

func byReceipt(id message.ID, serial uint64) finder {
	return func(t *topic) *lease {
		if l := t.mu.leases.byID[id]; l != nil && l.serial == serial {
			return l
		}
		return nil
	}
}

// NackOptions say what a Nack does with the message it gives back.
type NackOptions struct {
	// Delay before it is receivable again. With 0 the topic's Backoff
	// applies (Policy); with no backoff it is receivable again at once.
	Delay time.Duration
	// Reason is the error the consumer met, kept with the message while
	// it is outstanding (and across a delayed retry) and shown if it is
	// dead-lettered. At most MaxReason bytes (longer ones are cut).
	Reason string
	// DeadLetter sends it to the dead-letter topic now, whatever attempts
	// remain; Delay is then ignored.
	DeadLetter bool
	// Release gives it back unhandled: receivable again at once, its
	// attempt not raised, no backoff (a consumer that stops). The other
	// fields are ignored.
	Release bool
}

// MaxReason bounds NackOptions.Reason in bytes.
const MaxReason = 1000

// Dead-letter reasons (DeadLetterReasonHeader).
const (
	ReasonMaxAttempts = "max-attempts" // nacked or expired past the topic's max attempts
	ReasonNacked      = "nacked"       // a consumer dead-lettered it (NackOptions.DeadLetter)
	ReasonExpired     = "expired"      // past its expiry (message.ExpireAtHeader) before it was received, or acked under Expiry.Unacked
)

// Headers a dead-lettered message carries in the dead-letter topic, and
// the header a delayed retry carries its last error in.
const (
	DeadLetterOriginHeader = "hourglass-dead-letter-origin" // the topic it died on
	DeadLetterReasonHeader = "hourglass-dead-letter-reason" // ReasonMaxAttempts, ReasonNacked, ...
	DeadLetterErrorHeader  = "hourglass-dead-letter-error"  // the last error a consumer gave, or "lease expired"
	DeadLetterAtHeader     = "hourglass-dead-lettered-at"   // UTC epoch milliseconds, decimal
	LastErrorHeader        = "hourglass-last-error"         // on a retry: the error of the attempt before
)

// errExpired is the last error of a message whose lease ran out.
const errExpired = "lease expired"

// settle acks (nack nil) or nacks the lease find picks.
func (q *Queue) settle(ctx context.Context, name string, find finder, nack *NackOptions) error {
	if err := ValidateTopic(name); err != nil {
		return err
	}
	if err := q.enter(); err != nil {
		return err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		return ErrNotLeased
	}
	defer q.release(t)
	t.mu.Lock()
	l := find(t)
	if l == nil || l.state != leased || t.mu.closed {
		t.mu.Unlock()
		return ErrNotLeased
	}
	if q.mono() >= l.deadline {
		// Over, though the timer has not run yet: it will.
		t.mu.Unlock()
		return ErrNotLeased
	}
	heap.Remove(&t.mu.leases.heap, l.hi)
	if t.expiredLocked(l, q.now().UnixMilli()) {
		// Not acked by its expiry (Expiry.Unacked): whatever the call,
		// it ends as expired; an Ack is refused, a Nack is done.
		l.state = settling
		t.mu.Unlock()
		what, err := t.settleExpired(l)
		switch {
		case err != nil:
			t.mu.Lock()
			t.restoreLocked(l)
			t.mu.Unlock()
			return err
		case nack == nil:
			return t.expiredError(l, what)
		}
		return nil
	}
	if nack != nil && nack.Release {
		t.giveBackLocked(l)
		t.mu.Unlock()
		return nil
	}
	var delay time.Duration
	if nack != nil {
		t.noteErrLocked(l.off, nack.Reason)
		delay = nack.Delay
		if delay <= 0 && !nack.DeadLetter && !t.exhausted(l) {
			delay = q.backoffDelay(t.name, l.attempt+1)
		}
	}
	switch {
	case nack == nil:
		l.state = settling
		t.mu.Unlock()
		err = t.ack(l, &t.mu.stats.Acked)
	case nack.DeadLetter && !t.dlq:
		l.state = settling
		t.mu.Unlock()
		err = t.deadLetter(l, &t.mu.stats.Nacked, ReasonNacked)
	case delay <= 0:
		if !t.failLocked(l) {
			t.mu.stats.Nacked++
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
		err = t.deadLetter(l, &t.mu.stats.Nacked, ReasonMaxAttempts)
	case t.exhausted(l):
		l.state = settling
		t.mu.Unlock()
		err = t.deadLetter(l, &t.mu.stats.Nacked, ReasonMaxAttempts)
	case t.orderedLocked(l):
		// An ordered key's retry waits in place, at the key's head: the
		// key's later messages wait for it to be settled.
		t.retryInPlaceLocked(l, delay)
		t.mu.stats.Nacked++
		t.mu.Unlock()
		return nil
	default:
		l.state = settling
		t.mu.Unlock()
		if err = t.reschedule(ctx, l, delay); err == nil {
			// A crash before the ack is durable leaves both the original
			// and the retry (at least once).
			err = t.ack(l, &t.mu.stats.Nacked)
		}
	}
	if err != nil {
		t.mu.Lock()
		t.restoreLocked(l)
		t.mu.Unlock()
	}
	return err
}

// noteErrLocked keeps reason as the last error of the message at off (a
// reason "" keeps the one before). t.mu is held.
func (t *topic) noteErrLocked(off int64, reason string) {
	if reason == "" {
		return
	}
	if len(reason) > MaxReason {
		reason = strings.ToValidUTF8(reason[:MaxReason], "")
	}
	if t.mu.lastErr == nil {
		t.mu.lastErr = map[int64]string{}
	}
	t.mu.lastErr[off] = reason
}

// exhausted reports whether a failure of lease l sends its message to
// the dead-letter topic. t.mu is held.
func (t *topic) exhausted(l *lease) bool {
	return int64(l.attempt)+1 >= int64(t.q.maxAttempts(t.name)) && !t.dlq
}

// reschedule schedules the retry of settling lease l through the engine.
func (t *topic) reschedule(ctx context.Context, l *lease, delay time.Duration) error {
	fn := t.q.reschedule.Load()
	if fn == nil {
		return ErrNoReschedule
	}
	var id message.ID
	var m message.Message
	if err := t.copyAt(l.off, &id, &m); err != nil {
		return err
	}
	origin := m.Origin
	if origin.IsZero() {
		origin = id
	}
	t.mu.Lock()
	last := t.mu.lastErr[l.off]
	t.mu.Unlock()
	_, err := (*fn)(ctx, engine.Request{
		Topic: t.name, Headers: withHeader(m.Headers, LastErrorHeader, last), Body: m.Body, Delay: delay, Attempt: l.attempt + 1, Origin: origin,
	})
	if err != nil {
		return fmt.Errorf("queue: reschedule %s: %w", id, err)
	}
	return nil
}

// copyAt reads the message at off into id and m with bytes of its own.
func (t *topic) copyAt(off int64, id *message.ID, m *message.Message) error {
	var tmp message.Message
	if err := t.readAt(off, id, &tmp); err != nil {
		return err
	}
	*m = tmp
	m.Topic = append([]byte(nil), tmp.Topic...)
	m.Body = append([]byte(nil), tmp.Body...)
	m.Headers = make([]message.Header, len(tmp.Headers))
	for i, h := range tmp.Headers {
		m.Headers[i] = message.Header{Key: append([]byte(nil), h.Key...), Value: append([]byte(nil), h.Value...)}
	}
	return nil
}

// ack appends the ack record of settling lease l and, once it is durable,
// forgets l and counts it in counter (a field of t.mu.stats). On error l is
// left settling for the caller to restore or requeue.
func (t *topic) ack(l *lease, counter *uint64) error {
	return t.ackAll([]*lease{l}, counter)
}

// ackAll is ack for several settling leases: one ack record naming them
// all, counted in counter. On error they are left settling for the caller
// to restore.
func (t *topic) ackAll(ls []*lease, counter *uint64) error {
	offs := make([]int64, len(ls))
	for i, l := range ls {
		offs[i] = l.off
	}
	t.ackMu.RLock()
	defer t.ackMu.RUnlock()
	_, err := t.acks.Append(nil, commitlog.Record{Type: typeAck, Payload: appendAck(make([]byte, 0, 1+8*len(offs)), offs...)})
	// Reported before t.mu is taken: broke takes Queue.mu.
	if err != nil {
		t.broke(StageAck, err)
	} else {
		t.q.ok(t.name, StageAck)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("queue: topic %q: ack: %w", t.name, err)
	}
	for _, l := range ls {
		t.mu.read.settledAhead(l)
		t.forgetLocked(l)
		delete(t.mu.lastErr, l.off)
	}
	*counter += uint64(len(ls))
	t.mu.ck.acks += len(ls)
	t.maybeCheckpointLocked()
	return nil
}

// deadLetter moves the message of settling lease l to the dead-letter
// topic, then acks it here, counting it in counter too, and logs it with
// reason (why its last attempt failed). A crash in between leaves it in
// both (at least once). On error l is left settling.
func (t *topic) deadLetter(l *lease, counter *uint64, reason string) error {
	var id message.ID
	var m message.Message
	err := t.copyAt(l.off, &id, &m)
	var d *topic
	if err == nil {
		d, err = t.q.topic(t.name+DLQSuffix, true)
	}
	if err == nil {
		m.Attempt = max(m.Attempt, l.attempt+1)
		t.mu.Lock()
		last := t.mu.lastErr[l.off]
		t.mu.Unlock()
		if last == "" {
			last = message.HeaderValue(m.Headers, LastErrorHeader)
		}
		hs := withHeader(m.Headers, DeadLetterOriginHeader, t.name)
		hs = withHeader(hs, DeadLetterReasonHeader, reason)
		hs = withHeader(hs, DeadLetterErrorHeader, last)
		m.Headers = withHeader(hs, DeadLetterAtHeader, strconv.FormatInt(t.q.now().UnixMilli(), 10))
		err = d.append([][]byte{appendMessage(nil, id, &m)})
		t.q.release(d)
	}
	if err != nil {
		t.q.fail(t.name, StageDeadLetter, err)
		return fmt.Errorf("queue: dead-letter %s to %s: %w", id, t.name+DLQSuffix, err)
	}
	t.q.ok(t.name, StageDeadLetter)
	if err := t.ack(l, counter); err != nil {
		return err
	}
	t.mu.Lock()
	t.mu.stats.DeadLettered++
	t.mu.Unlock()
	t.q.opts.Logger.Warn("queue: message dead-lettered", "topic", t.name, "to", t.name+DLQSuffix, "id", id,
		"attempts", m.Attempt, "reason", reason, "last_error", message.HeaderValue(m.Headers, DeadLetterErrorHeader))
	return nil
}

// deadLetterExpired dead-letters a message whose last lease ran out. On
// failure the message is made receivable again without raising its
// attempt, so that its next failure tries again; nothing waits for it.
func (t *topic) deadLetterExpired(l *lease) {
	var n uint64
	if err := t.deadLetter(l, &n, ReasonMaxAttempts); err != nil {
		t.q.opts.Logger.Error("queue: dead-lettering failed; the message stays receivable", "topic", t.name, "id", l.id, "err", err)
		t.mu.Lock()
		t.forgetLocked(l)
		t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: l.attempt})
		t.wake()
		t.mu.Unlock()
	}
}

// HandlesExpiry makes the queue an engine.ExpiryHandler: the engine
// hands it messages past their expiry, and Receive ends them as expired
// (dead-lettered with ReasonExpired, or dropped: Expiry) instead of
// handing them out.
func (q *Queue) HandlesExpiry() bool { return true }

// Ack completes the leased message id of topic: once Ack returns nil the
// message is never handed out again, even after a crash (under the always
// fsync policy; concurrent Acks share fsyncs). It returns ErrNotLeased
// for a message that is not leased now, and ErrExpired for one past its
// expiry in a topic that expires messages not acked by then
// (Expiry.Unacked), which it ends as expired. Any holder of the ID may ack it,
// including one whose lease ran out after another Receive got it; use
// AckReceipt to act only on one's own lease.
func (q *Queue) Ack(ctx context.Context, topic string, id message.ID) error {
	return q.settle(ctx, topic, byID(id), nil)
}

// AckReceipt is Ack for the lease named by a Message's Receipt: it fails
// with ErrNotLeased once the message was handed out again.
func (q *Queue) AckReceipt(ctx context.Context, topic, receipt string) error {
	id, serial, err := parseReceipt(receipt)
	if err != nil {
		return err
	}
	return q.settle(ctx, topic, byReceipt(id, serial), nil)
}

// AckBatch acks the leases the receipts name (as AckReceipt does each)
// with one ack record, so one fsync. It returns one error per receipt:
// nil once acked durably, ErrNotLeased, ErrExpired, or the receipt's parse error. A
// non-nil err means the ack record failed to append and none was acked.
func (q *Queue) AckBatch(ctx context.Context, topic string, receipts []string) (res []error, err error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	if len(receipts) > MaxAckBatch {
		return nil, fmt.Errorf("%w: %d receipts; at most %d per AckBatch", ErrInvalid, len(receipts), MaxAckBatch)
	}
	if err := q.enter(); err != nil {
		return nil, err
	}
	defer q.leave()
	res = make([]error, len(receipts))
	t, err := q.topic(topic, false)
	if err != nil || t == nil {
		for i := range res {
			res[i] = ErrNotLeased
		}
		return res, nil
	}
	defer q.release(t)
	ls := make([]*lease, 0, len(receipts))
	var past []*lease
	var pastAt []int
	now, nowMs := q.mono(), q.now().UnixMilli()
	t.mu.Lock()
	for i, r := range receipts {
		id, serial, perr := parseReceipt(r)
		if perr != nil {
			res[i] = perr
			continue
		}
		l := byReceipt(id, serial)(t)
		if l == nil || l.state != leased || t.mu.closed || now >= l.deadline {
			res[i] = ErrNotLeased
			continue
		}
		heap.Remove(&t.mu.leases.heap, l.hi)
		l.state = settling
		if t.expiredLocked(l, nowMs) {
			past, pastAt = append(past, l), append(pastAt, i)
			continue
		}
		ls = append(ls, l)
	}
	t.mu.Unlock()
	// Not acked by their expiry (Expiry.Unacked): refused, and ended as
	// expired (by the next Receive if that fails).
	for j, l := range past {
		what, err := t.settleExpired(l)
		if err != nil {
			what = "left to the next Receive to end as expired"
			t.mu.Lock()
			t.giveBackLocked(l)
			t.mu.Unlock()
		}
		res[pastAt[j]] = t.expiredError(l, what)
	}
	if len(ls) == 0 {
		return res, nil
	}
	if err := t.ackAll(ls, &t.mu.stats.Acked); err != nil {
		t.mu.Lock()
		for _, l := range ls {
			t.restoreLocked(l)
		}
		t.mu.Unlock()
		return nil, err
	}
	return res, nil
}

// Nack gives up the lease on message id of topic with a failed attempt.
// Without a delay (o.Delay 0 and no Backoff in the topic's Policy) the
// message is receivable again at once, its attempt raised. With a delay
// it is rescheduled through the engine (the retry is a new message with
// Attempt+1 and Origin the first attempt's ID) and the original acked.
// When the raised attempt reaches the topic's max attempts, or with
// o.DeadLetter, the message goes to <topic>.dlq instead (a topic ending
// in .dlq keeps it), with headers that say why (DeadLetterReasonHeader and
// the others). It returns ErrNotLeased for a message not leased now; on
// any error the lease is kept as it was.
func (q *Queue) Nack(ctx context.Context, topic string, id message.ID, o NackOptions) error {
	return q.settle(ctx, topic, byID(id), &o)
}

// NackReceipt is Nack for the lease named by a Message's Receipt.
func (q *Queue) NackReceipt(ctx context.Context, topic, receipt string, o NackOptions) error {
	id, serial, err := parseReceipt(receipt)
	if err != nil {
		return err
	}
	return q.settle(ctx, topic, byReceipt(id, serial), &o)
}

// Extend makes the lease on message id of topic end lease from now,
// and returns when that is on the wall clock. It returns ErrNotLeased for
// a message not leased now.
func (q *Queue) Extend(ctx context.Context, topic string, id message.ID, lease time.Duration) (time.Time, error) {
	return q.extend(topic, byID(id), lease)
}

// ExtendReceipt is Extend for the lease named by a Message's Receipt.
func (q *Queue) ExtendReceipt(ctx context.Context, topic, receipt string, lease time.Duration) (time.Time, error) {
	id, serial, err := parseReceipt(receipt)
	if err != nil {
		return time.Time{}, err
	}
	return q.extend(topic, byReceipt(id, serial), lease)
}

func (q *Queue) extend(name string, find finder, d time.Duration) (time.Time, error) {
	if err := ValidateTopic(name); err != nil {
		return time.Time{}, err
	}
	if d <= 0 || d > q.opts.maxLease {
		return time.Time{}, fmt.Errorf("%w: lease %v; from 1ns to %v", ErrInvalid, d, q.opts.maxLease)
	}
	if err := q.enter(); err != nil {
		return time.Time{}, err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		return time.Time{}, ErrNotLeased
	}
	defer q.release(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	l := find(t)
	now := q.mono()
	if l == nil || l.state != leased || t.mu.closed || now >= l.deadline {
		return time.Time{}, ErrNotLeased
	}
	until := q.now().Add(d)
	l.deadline, l.until = now+int64(d), until.UnixNano()
	heap.Fix(&t.mu.leases.heap, l.hi)
	t.mu.leases.timerAt = 0 // the earliest deadline may be later now: set again
	t.armLocked()
	return until, nil
}

// withHeader returns hs with key set to value (replacing an earlier one);
// a value "" removes the key.
func withHeader(hs []message.Header, key, value string) []message.Header {
	out := make([]message.Header, 0, len(hs)+1)
	for _, h := range hs {
		if string(h.Key) != key {
			out = append(out, h)
		}
	}
	if value != "" {
		out = append(out, message.Header{Key: []byte(key), Value: []byte(value)})
	}
	return out
}

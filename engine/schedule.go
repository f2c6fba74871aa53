package engine

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// ceilMs converts t to epoch milliseconds, rounding up so that a message
// is never due before the instant it asked for.
func ceilMs(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 > 0 {
		ms++
	}
	return ms
}

// Schedule schedules one message and returns its ID once it is durable
// under the fsync policy.
func (e *Engine) Schedule(ctx context.Context, req Request) (message.ID, error) {
	ids, err := e.ScheduleBatch(ctx, []Request{req})
	if err != nil {
		return message.ID{}, err
	}
	return ids[0], nil
}

// ScheduleBatch schedules reqs atomically: either all are accepted (and
// durable under the fsync policy) or none is. A request whose
// IdempotencyKey was used on its topic within Options.IdempotencyWindow
// is not scheduled again: its ID is the first message's.
func (e *Engine) ScheduleBatch(ctx context.Context, reqs []Request) (_ []message.ID, err error) {
	return e.ScheduleWith(ctx, reqs, nil)
}

// ScheduleWith is ScheduleBatch with control records (durable settings,
// Control) appended after the messages in the same commitlog append: all
// of them are durable, or none is. Recurring schedules arm an occurrence
// and record it in one such call.
func (e *Engine) ScheduleWith(ctx context.Context, reqs []Request, ctls []message.Control) (_ []message.ID, err error) {
	if len(reqs) == 0 && len(ctls) == 0 {
		return nil, nil
	}
	now := e.opts.Now()
	nowNs, nowMs := now.UnixNano(), ceilMs(now)
	sc := getScratch(len(reqs))
	defer putScratch(sc)
	msgs := sc.msgs
	keyed, expiring := false, false
	for i := range reqs {
		r := &reqs[i]
		if err := validate(r); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		var ms int64
		if r.At.IsZero() {
			// now.Add(r.Delay), compared with now.Add(MaxDelay) and
			// rounded up to the millisecond, in integers.
			if r.Delay > e.opts.MaxDelay {
				return nil, e.tooFar(i, now, now.Add(r.Delay))
			}
			ms = addCeilMs(nowNs, r.Delay)
		} else {
			if r.At.After(now.Add(e.opts.MaxDelay)) {
				return nil, e.tooFar(i, now, r.At)
			}
			ms = ceilMs(r.At)
		}
		ms = max(ms, nowMs) // a past time is due at once
		// The topic's bytes are only copied by AppendSchedule below.
		msgs[i] = message.Message{DeliverAt: ms, Attempt: r.Attempt, Topic: unsafe.Slice(unsafe.StringData(r.Topic), len(r.Topic)),
			Headers: r.Headers, Body: r.Body, Origin: r.Origin}
		if r.IdempotencyKey != "" {
			keyed = true
		}
		if !r.ExpireAt.IsZero() || r.TTL != 0 {
			expiring = true
		}
	}
	var iks []string
	if keyed {
		iks = keyHeaders(reqs, msgs, now)
	}
	flowHeaders(reqs, msgs)
	if expiring {
		if err := ExpiryHeaders(reqs, msgs); err != nil {
			return nil, err
		}
	}
	ids := make([]message.ID, len(reqs))
	// skip[i]: not appended; its ID is a stored one, or that of an
	// earlier request of the batch with the same key (sameAs).
	var skip []bool
	var sameAs map[int]int
	if keyed && e.keys != nil {
		kr := keyResults{skip: make([]bool, len(reqs)), sameAs: map[int]int{}}
		b, cerr := e.keys.claimBatch(ctx, iks, ids, &kr)
		defer func() { e.keys.settleBatch(b, ids, err == nil) }()
		if cerr != nil {
			return nil, cerr
		}
		skip, sameAs = kr.skip, kr.sameAs
	}
	size, n := 0, 0
	for i := range msgs {
		if skip == nil || !skip[i] {
			size += message.ScheduleSize(&msgs[i])
			n++
		}
	}
	if n > 0 || len(ctls) > 0 {
		// One buffer for every payload of the batch: Append copies the
		// records before it returns.
		if cap(sc.buf) < size {
			sc.buf = make([]byte, 0, size)
		}
		buf := sc.buf[:0]
		recs := sc.recs[:0]
		for i := range msgs {
			if skip != nil && skip[i] {
				continue
			}
			start := len(buf)
			buf = message.AppendSchedule(buf, &msgs[i])
			recs = append(recs, commitlog.Record{Type: message.TypeSchedule, Payload: buf[start:len(buf):len(buf)]})
		}
		for _, c := range ctls {
			recs = append(recs, commitlog.Record{Type: message.TypeControl, Payload: message.AppendControl(nil, c)})
		}
		e.mu.RLock()
		defer e.mu.RUnlock()
		if e.mu.closed {
			return nil, ErrClosed
		}
		if err := e.health.check(true); err != nil {
			// What is scheduled now could not be delivered: say why and
			// let the producer retry.
			return nil, err
		}
		offs, err := e.log.Append(sc.offs[:0], recs...)
		if err != nil {
			return nil, err
		}
		k := 0
		counting := e.CountsPending()
		var run Pending // counted for runTopic, added when the topic changes
		var runTopic string
		for i := range reqs {
			if skip != nil && skip[i] {
				continue
			}
			ids[i] = message.ID{DeliverAt: msgs[i].DeliverAt, Seq: uint64(offs[k])}
			if counting {
				if run.Messages > 0 && reqs[i].Topic != runTopic {
					e.pending.add(runTopic, run.Messages, run.Bytes)
					run = Pending{}
				}
				runTopic = reqs[i].Topic
				run.Messages++
				run.Bytes += int64(len(recs[k].Payload))
			}
			k++
		}
		if run.Messages > 0 {
			e.pending.add(runTopic, run.Messages, run.Bytes)
		}
		e.calls.scheduled.Add(int64(k))
	}
	for i, j := range sameAs {
		ids[i] = ids[j]
	}
	return ids, nil
}

// The stored headers of a key: their names, shared by every message.
var (
	idempotencyName     = []byte(IdempotencyHeader)
	idempotencyTimeName = []byte(IdempotencyTimeHeader)
)

// keyHeaders adds the idempotency headers to the messages of the requests
// that carry a key (their time: now), and returns each request's index
// key ("" for none). The headers of all messages share one allocation,
// the keys another; a header's value points into its request.
func keyHeaders(reqs []Request, msgs []message.Message, now time.Time) []string {
	at := strconv.AppendInt(nil, now.UnixMilli(), 10) // one value for the batch
	nh, nk := 0, 0
	for i := range reqs {
		if r := &reqs[i]; r.IdempotencyKey != "" {
			nh += len(r.Headers) + 2
			nk += len(r.Topic) + 1 + len(r.IdempotencyKey)
		}
	}
	hs := make([]message.Header, 0, nh)
	text := make([]byte, 0, nk)
	iks := make([]string, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		if r.IdempotencyKey == "" {
			continue
		}
		key := unsafe.Slice(unsafe.StringData(r.IdempotencyKey), len(r.IdempotencyKey)) // read only
		start := len(hs)
		hs = append(append(hs, r.Headers...), message.Header{Key: idempotencyName, Value: key},
			message.Header{Key: idempotencyTimeName, Value: at})
		msgs[i].Headers = hs[start:len(hs):len(hs)]
		start = len(text)
		text = append(append(append(text, r.Topic...), 0), r.IdempotencyKey...) // indexKey's form; within capacity
		iks[i] = unsafe.String(&text[start], len(text)-start)
	}
	return iks
}

var flowKeyName = []byte(message.FlowKeyHeader)

// flowHeaders adds the flow-key header to the messages of the requests
// that carry a flow key; a header's value points into its request.
func flowHeaders(reqs []Request, msgs []message.Message) {
	for i := range reqs {
		r := &reqs[i]
		if r.FlowKey == "" {
			continue
		}
		hs := msgs[i].Headers
		out := make([]message.Header, len(hs), len(hs)+1)
		copy(out, hs)
		key := unsafe.Slice(unsafe.StringData(r.FlowKey), len(r.FlowKey)) // read only
		msgs[i].Headers = append(out, message.Header{Key: flowKeyName, Value: key})
	}
}

// ExpiryHeaders adds the expiry header to the messages of the requests
// that set ExpireAt or TTL, after their other headers, and refuses an
// expiry not after the message's delivery time (ErrInvalid). msgs[i] is
// reqs[i]'s message with its delivery time; a cluster node stores the
// header as ScheduleBatch does.
func ExpiryHeaders(reqs []Request, msgs []message.Message) error {
	for i := range reqs {
		r := &reqs[i]
		if r.ExpireAt.IsZero() && r.TTL == 0 {
			continue
		}
		exp := msgs[i].DeliverAt + r.TTL.Milliseconds() // TTL in whole ms, never longer than asked
		if !r.ExpireAt.IsZero() {
			exp = r.ExpireAt.UnixMilli()
		}
		if exp <= msgs[i].DeliverAt {
			return fmt.Errorf("message %d: %w: it expires at %s, not after its delivery time %s: it could never be delivered",
				i, ErrInvalid, time.UnixMilli(exp).UTC().Format(time.RFC3339Nano), time.UnixMilli(msgs[i].DeliverAt).UTC().Format(time.RFC3339Nano))
		}
		hs := make([]message.Header, 0, len(msgs[i].Headers)+1)
		msgs[i].Headers = append(append(hs, msgs[i].Headers...),
			message.Header{Key: expireAtName, Value: strconv.AppendInt(nil, exp, 10)})
	}
	return nil
}

var expireAtName = []byte(message.ExpireAtHeader)

// tooFar is ScheduleBatch's error for message i, due at at.
func (e *Engine) tooFar(i int, now, at time.Time) error {
	return fmt.Errorf("message %d: %w: deliverAt %s is %s ahead; the maximum delay is %s",
		i, ErrTooFar, at.UTC().Format(time.RFC3339Nano), fmtDur(at.Sub(now)), fmtDur(e.opts.MaxDelay))
}

// addCeilMs is ceilMs(time.Unix(0, nowNs).Add(d)) without the time
// arithmetic, and without overflowing where nowNs+d would.
func addCeilMs(nowNs int64, d time.Duration) int64 {
	ms := nowNs/1e6 + int64(d)/1e6
	// The remainders: nowNs%1e6 in [0, 1e6) for a time after 1970, d's
	// in (-1e6, 1e6); their sum rounds up to 0, 1 or 2 ms.
	if rem := nowNs%1e6 + int64(d)%1e6; rem > 0 {
		ms += (rem + 1e6 - 1) / 1e6
	} else if rem <= -1e6 {
		ms-- // before 1970 only
	}
	return ms
}

func getScratch(n int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.msgs) < n {
		sc.msgs = make([]message.Message, n)
		sc.recs = make([]commitlog.Record, 0, n)
		sc.offs = make([]int64, 0, n)
	}
	sc.msgs = sc.msgs[:n]
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.buf) > maxPooledBuf {
		return
	}
	// Drop the references to the callers' bodies and topics.
	clear(sc.msgs)
	clear(sc.recs[:cap(sc.recs)])
	scratchPool.Put(sc)
}

func validate(r *Request) error {
	if r.Topic == "" {
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	}
	if len(r.Topic) > message.MaxTopicLen {
		return fmt.Errorf("%w: topic is %d bytes; at most %d", ErrInvalid, len(r.Topic), message.MaxTopicLen)
	}
	user := len(r.Headers)
	if user > message.MaxHeaders-2 { // a trace context's headers count against no limit
		user = message.UserHeaders(r.Headers)
	}
	if user > message.MaxHeaders || len(r.Headers) > user+2 {
		return fmt.Errorf("%w: %d headers; at most %d", ErrInvalid, user, message.MaxHeaders)
	}
	if len(r.IdempotencyKey) > MaxIdempotencyKey {
		return fmt.Errorf("%w: idempotency key of %d bytes; at most %d", ErrInvalid, len(r.IdempotencyKey), MaxIdempotencyKey)
	}
	if !r.ExpireAt.IsZero() && r.TTL != 0 {
		return fmt.Errorf("%w: both an expiry time and a TTL; give one of them", ErrInvalid)
	}
	if r.TTL < 0 {
		return fmt.Errorf("%w: TTL %v is negative; it counts from the delivery time", ErrInvalid, r.TTL)
	}
	if len(r.FlowKey) > message.MaxFlowKey {
		return fmt.Errorf("%w: flow key of %d bytes; at most %d", ErrInvalid, len(r.FlowKey), message.MaxFlowKey)
	}
	if n := r.AddedHeaders(); n > 0 && user+n > message.MaxHeaders {
		return fmt.Errorf("%w: %d headers; at most %d of one's own with these fields (an idempotency key is stored as two headers, a flow key and an expiry as one each)",
			ErrInvalid, user, message.MaxHeaders-n)
	}
	return nil
}

// fmtDur prints a duration the way people say it: 12y, 3d4h, 90ms.
func fmtDur(d time.Duration) string {
	const day = 24 * time.Hour
	const year = 365 * day
	switch {
	case d >= year:
		return fmt.Sprintf("%.4gy", float64(d)/float64(year))
	case d >= day:
		return fmt.Sprintf("%.4gd", float64(d)/float64(day))
	}
	return d.Round(time.Millisecond).String()
}

// AddedHeaders is how many headers the engine stores beside r's own: two
// for an idempotency key, one for a flow key, one for an expiry.
func (r *Request) AddedHeaders() int {
	n := 0
	if r.IdempotencyKey != "" {
		n += 2
	}
	if r.FlowKey != "" {
		n++
	}
	if !r.ExpireAt.IsZero() || r.TTL != 0 {
		n++
	}
	return n
}

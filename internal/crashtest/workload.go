package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/queue"
)

// DelayLevels are the --delay-levels the harness starts the server with,
// so that it knows what each level means without asking.
var DelayLevels = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}

const delayLevelsFlag = "1s 2s 3s 5s"

// MaxAttempts is the server's --max-attempts in the harness: the fourth
// failed delivery of a message (a Nack, or a lease that ran out) sends it
// to "<topic>.dlq". Poison messages (Config.PoisonPercent) are failed on
// every delivery, so each must end there. Other messages fail on purpose
// at most maxFailures times, one short of dead-lettering; a lease that runs
// out for another reason (an Ack that came too late, a Receive whose answer
// was lost) can still take one there, which the checker accepts and counts.
const (
	MaxAttempts = 4
	maxFailures = MaxAttempts - 2
)

// PoisonHeader marks a poison message (value "1"). Consumers decide by the
// header the server hands back, not by the harness's records, so a server
// that lost headers on a retry or a dead letter would have the message
// acked on its topic instead, which the checker reports.
const PoisonHeader = "crashtest-poison"

// dlqTopic is the dead-letter topic of topic.
func dlqTopic(topic string) string { return topic + queue.DLQSuffix }

// isDLQ reports whether topic is a dead-letter topic.
func isDLQ(topic string) bool { return strings.HasSuffix(topic, queue.DLQSuffix) }

// workload is the producers and consumers of one run; one server address
// at a time (set per cycle).
type workload struct {
	cfg    *Config
	hist   *History
	topics []string // the producers' topics
	hc     *http.Client
	// operating says which calls operating what the server holds the
	// workload makes: all of them on one node, clusterOperations in
	// cluster mode.
	operating operations
	// consumed are the topics consumers receive from: the producers',
	// the recurring schedules' (SchedTopic), and their dead-letter topics.
	consumed []string

	ops opCounts // calls by operation and protocol

	mu       sync.Mutex
	failures map[string]int  // deliberate failures (nack, lease left to expire) per key; guarded by mu
	edits    map[string]int  // Edits sent per key (the last content version given); guarded by mu
	paused   map[string]bool // topics a pause may hold (not yet resumed OK); guarded by mu
	recur    *recurPlan      // the recurring schedules' calls (recurwork.go)
	calReady atomic.Bool     // CalendarName exists: producers send in its working time (calendarwork.go)
	// flow is the flow-keyed topics' workload (flowwork.go); nil in
	// cluster mode, which refuses flow policies, and under damage.
	flow *flowWork
	// expiry is the expiring messages' workload (expirywork.go); nil in
	// cluster mode.
	expiry *expiryWork
}

func newWorkload(cfg *Config, hist *History) *workload {
	w := &workload{cfg: cfg, hist: hist, failures: map[string]int{}, edits: map[string]int{}, paused: map[string]bool{}, operating: allOperations,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if cfg.Cluster {
		w.operating = clusterOperations
	}
	if !cfg.Cluster && !cfg.Damage && !cfg.CorruptTail {
		// Not under damage: the flow checker knows nothing of what a
		// repair or a cut may take, and would call it lost.
		w.flow = newFlowWork()
	} else {
		// Nor the freeze checker (a cut may take a freeze's record).
		w.operating.freeze = false
	}
	if !cfg.Cluster {
		w.expiry = &expiryWork{}
	}
	for i := range cfg.Topics {
		w.topics = append(w.topics, fmt.Sprintf("ct%d", i))
	}
	w.consumed = slices.Clone(w.topics)
	if w.operating.recurring {
		w.consumed = append(w.consumed, SchedTopic)
		w.recur = newRecurPlan(cfg.Cycles)
	}
	for _, t := range slices.Clone(w.consumed) {
		w.consumed = append(w.consumed, dlqTopic(t))
	}
	return w
}

// client is a Connect client of addr over HTTP/1.1.
func (w *workload) client(addr string) hourglassv1connect.HourglassServiceClient {
	return hourglassv1connect.NewHourglassServiceClient(w.hc, addr)
}

// count adds one call of op over proto to Summary.Ops.
func (w *workload) count(op, proto string) { w.ops.add(op+"/"+proto, 1) }

// fail reports whether key may fail once more on purpose, and counts it.
func (w *workload) fail(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failures[key] >= maxFailures {
		return false
	}
	w.failures[key]++
	return true
}

// maxLoopOps bounds the operations of one producer or consumer loop in one
// cycle (or the drain); the cycle's context bounds their time. It is a
// backstop far above what a cycle does at the highest --rate.
const maxLoopOps = 1_000_000

// produce schedules, reschedules and cancels until ctx ends, choosing per
// operation (with rng) what to send and how: a Reschedule (with
// operating.reschedule), a Cancel (by ID, or by topic and key), a
// ScheduleBatch of 2 to 8 or a single Schedule, each unary over Connect or
// gRPC, or a burst on one ScheduleStream (streamBurst).
func (w *workload) produce(ctx context.Context, l lanes, cycle, id int, rng *rand.Rand) {
	seg := w.cfg.SegmentDuration
	n := 0
	pause := time.Second / time.Duration(max(1, w.cfg.OpsPerSecond))
	for op := 0; op < maxLoopOps && ctx.Err() == nil; op++ {
		switch r := rng.IntN(100); {
		case r < 4 && w.operating.reschedule:
			w.reschedule(ctx, l, cycle, rng)
		case r >= 96 && w.operating.edit:
			w.edit(ctx, l, cycle, rng)
		case r < 12:
			w.cancel(ctx, l, cycle, rng)
		case r < 26 && l.streams != nil:
			w.streamBurst(ctx, l, cycle, id, &n, rng)
		case r < 39:
			size := 2 + rng.IntN(7)
			var reqs []*hourglassv1.ScheduleRequest
			var recs []Schedule
			sent := time.Now()
			for range size {
				req, s := w.message(cycle, id, &n, sent, seg, rng)
				reqs, recs = append(reqs, req), append(recs, s)
			}
			w.scheduleBatch(ctx, l.choose(rng), &hourglassv1.ScheduleBatchRequest{Messages: reqs}, recs, sent, notTried)
		default:
			sent := time.Now()
			req, s := w.message(cycle, id, &n, sent, seg, rng)
			w.scheduleOne(ctx, l.choose(rng), req, s, sent, notTried)
		}
		sleep(ctx, time.Duration(rng.Int64N(int64(2*pause))))
	}
}

// notTried is the first outcome of a call not tried yet.
const notTried Outcome = -1

// scheduleOne records s, sent at sent as req. With first notTried it sends req
// as a unary Schedule through ln; otherwise first is the outcome of an
// earlier attempt (a ScheduleStream request) and a unary Schedule is tried
// only while that is in doubt. Either way it is retried while in doubt
// (retryInDoubt).
func (w *workload) scheduleOne(ctx context.Context, ln lane, req *hourglassv1.ScheduleRequest, s Schedule, sent time.Time, first Outcome) {
	var res *hourglassv1.ScheduleResponse
	try := func() Outcome {
		w.count("schedule", ln.proto)
		r, err := call(ctx, ln.Schedule, req)
		res = r
		return classify(err)
	}
	if first == notTried {
		first = try()
	}
	s.Outcome = w.retryInDoubt(ctx, first, try)
	s.Sent, s.Answered = sent, time.Now()
	if s.Outcome == OK {
		s.ID = res.Id
	}
	w.hist.AddSchedule(s)
}

// scheduleBatch is scheduleOne for a ScheduleBatch of recs.
func (w *workload) scheduleBatch(ctx context.Context, ln lane, req *hourglassv1.ScheduleBatchRequest, recs []Schedule, sent time.Time, first Outcome) {
	var res *hourglassv1.ScheduleBatchResponse
	try := func() Outcome {
		w.count("batch", ln.proto)
		r, err := call(ctx, ln.ScheduleBatch, req)
		o := classify(err)
		if o == OK && len(r.Results) != len(recs) {
			o = InDoubt // not what the API promises; take nothing for granted
		}
		res = r
		return o
	}
	if first == notTried {
		first = try()
	}
	out := w.retryInDoubt(ctx, first, try)
	answered := time.Now()
	for i := range recs {
		recs[i].Sent, recs[i].Answered, recs[i].Outcome = sent, answered, out
		if out == OK {
			recs[i].ID = res.Results[i].Id
		}
		w.hist.AddSchedule(recs[i])
	}
}

// retryInDoubt calls try while out, the outcome that stands, is in doubt,
// until ctx ends, and returns the outcome that stands then: a call that
// failed with the server may have been stored, and a retry with the same
// idempotency keys must then be answered with the same IDs (the checker
// sees a second message as a delivery under another ID). A retry refused
// while the server is down leaves the first attempt in doubt. Attempts
// are 100 ms apart.
func (w *workload) retryInDoubt(ctx context.Context, out Outcome, try func() Outcome) Outcome {
	for out == InDoubt && ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			break
		}
		if next := try(); next != Rejected {
			out = next
		}
	}
	return out
}

// message makes the n-th message of producer id in cycle, sent at sent,
// with a delivery time drawn to hit the interesting cases.
func (w *workload) message(cycle, id int, n *int, sent time.Time, seg time.Duration, rng *rand.Rand) (*hourglassv1.ScheduleRequest, Schedule) {
	*n++
	key := fmt.Sprintf("s%d-c%d-p%d-%d", w.cfg.Seed, cycle, id, *n)
	topic := w.topics[rng.IntN(len(w.topics))]
	// The key doubles as the idempotency key: a Schedule in doubt is
	// retried until answered, and must not make a second message.
	req := &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(key), IdempotencyKey: key}
	s := Schedule{Key: key, Topic: topic, Cycle: cycle}
	if w.cfg.PoisonPercent > 0 && rng.IntN(100) < w.cfg.PoisonPercent {
		s.Poison = true
		req.Headers = []*hourglassv1.Header{{Key: PoisonHeader, Value: "1"}}
	}
	segMs := seg.Milliseconds()
	at := func(ms int64) {
		req.When = &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.UnixMilli(ms))}
		s.Kind, s.NotBefore = "at", time.UnixMilli(ms)
	}
	delay := func(d time.Duration) {
		req.When = &hourglassv1.ScheduleRequest_DelayMs{DelayMs: d.Milliseconds()}
		s.Kind, s.NotBefore = "delay", sent.Add(d.Truncate(time.Millisecond))
	}
	nowMs := sent.UnixMilli()
	edge := (nowMs/segMs + 1) * segMs // next bucket boundary
	switch r := rng.IntN(100); {
	case r < 10:
		delay(0)
	case r < 35:
		delay(time.Duration(rng.Int64N(int64(3 * seg))))
	case r < 50:
		at(nowMs - rng.Int64N(2*segMs)) // past: due at once
	case r < 62:
		at(edge + int64(rng.IntN(3))*segMs) // exactly on a bucket boundary
	case r < 70:
		at(edge + int64(rng.IntN(3))*segMs + int64(rng.IntN(3)) - 1) // a millisecond either side
	case r < 80:
		delay(4*seg + time.Duration(rng.Int64N(int64(2*seg)))) // far buckets
	case r < 86 && w.calReady.Load():
		workingMessage(req, &s, sent, time.Duration(rng.Int64N(int64(3*seg))))
	default:
		lvl := 1 + rng.IntN(len(DelayLevels))
		req.When = &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: int32(lvl)}
		s.Kind, s.NotBefore = "level", sent.Add(DelayLevels[lvl-1])
	}
	return req, s
}

// cancel cancels a recently acknowledged message, over Connect or gRPC,
// by its current ID or (with operating.cancelByKey) by its topic and key.
func (w *workload) cancel(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	u := l.choose(rng)
	byKey := rng.IntN(5) < 2 && w.operating.cancelByKey
	key, topic, id, ok := w.hist.OKSchedule(rng.IntN)
	if !ok {
		return
	}
	x := Cancel{Key: key, ID: id, Cycle: cycle, Sent: time.Now()}
	req := &hourglassv1.CancelRequest{Id: id}
	if byKey {
		w.count("cancel-key", u.proto)
		x.ID, x.ByKey, x.Topic = "", true, topic
		req = &hourglassv1.CancelRequest{Topic: topic, Key: key}
	} else {
		w.count("cancel", u.proto)
	}
	res, err := call(ctx, u.Cancel, req)
	x.Answered, x.Outcome = time.Now(), classify(err)
	if x.Outcome == OK {
		switch res.Result {
		case hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED, hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED:
			// Either way it must never be delivered (I7).
			x.Answer = CancelCancelled
		case hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED:
			x.Answer = CancelAlreadyDelivered
		default:
			x.Answer = CancelUnknown
		}
	}
	w.hist.AddCancel(x)
}

// turn is one consumer's visit to one topic.
type turn struct {
	topic string
	cycle int
	dead  bool          // a dead-letter topic
	drain bool          // the final drain: ack everything but poison
	short bool          // a short lease, which the consumer may let run out
	lease time.Duration // the lease asked for
}

// consume receives from every topic and every dead-letter topic in turn
// until ctx ends, choosing per turn (with rng) a unary Receive over
// Connect or gRPC, or a Consume stream (consumeStream; not without gRPC
// lanes), and per Ack or Nack of a unary turn Connect or gRPC. With drain
// set it acks everything it gets under a long lease, except poison
// messages outside a dead-letter topic, which it still nacks.
func (w *workload) consume(ctx context.Context, l lanes, cycle, id int, rng *rand.Rand, drain bool) {
	const longLease = 5 * time.Second
	topics := w.consumed
	for i := id; i < id+maxLoopOps && ctx.Err() == nil; i++ {
		t := turn{topic: topics[i%len(topics)], cycle: cycle, drain: drain, lease: longLease}
		t.dead = isDLQ(t.topic)
		t.short = !drain && !t.dead && rng.IntN(100) < 15
		if t.dead && !drain && w.operating.redrive && rng.IntN(2) == 0 {
			// Dead letters wait longer between consumers' visits, so
			// that the redriver finds some.
			continue
		}
		if t.short {
			t.lease = time.Duration(300+rng.IntN(500)) * time.Millisecond
		}
		leaseMs := t.lease.Milliseconds()
		if w.cfg.Cluster {
			// One lease per topic (the consumer's AckWait): lease_ms
			// must be 0 or that; a short turn lets it run out as well.
			t.lease, leaseMs = ClusterLease, 0
		}
		if l.streams != nil && rng.IntN(100) < 35 {
			w.consumeStream(ctx, l, t, rng)
			continue
		}
		wait := int64(200)
		if t.dead {
			wait = 0 // mostly empty: do not hold up the other topics
		}
		u := l.pick("receive", rng)
		issued := time.Now()
		res, err := call(ctx, u.Receive, &hourglassv1.ReceiveRequest{
			Topic: t.topic, MaxMessages: int32(1 + rng.IntN(16)), WaitMs: wait, LeaseMs: leaseMs,
		})
		received := time.Now()
		if err != nil {
			if classify(err) == InDoubt {
				w.hist.AddReceiveFail(ReceiveFail{Topic: t.topic, Cycle: cycle, Issued: issued, Failed: received})
			}
			sleep(ctx, 20*time.Millisecond) // the server is down or restarting
			continue
		}
		for _, m := range res.Messages {
			w.hist.AddDelivery(w.delivery(m, cycle, issued, received))
		}
		for _, m := range res.Messages {
			if kind, delay, ok := w.decide(t, m, rng); ok {
				w.settle(ctx, l, cycle, m, kind, delay, rng)
			}
		}
	}
}

// delivery is the record of m, handed out by a call issued at issued (or
// on a stream, after the credit that allowed it was sent then) and
// received at received.
func (w *workload) delivery(m *hourglassv1.Message, cycle int, issued, received time.Time) Delivery {
	key, ver := splitEdit(string(m.Body))
	d := Delivery{Key: key, Edit: ver, EditHeader: header(m, EditHeader), ID: m.Id, OriginID: m.OriginId, Topic: m.Topic, Attempt: m.Attempt,
		Receipt: m.Receipt, Cycle: cycle, Issued: issued, Received: received}
	if w.cfg.Cluster {
		// Which copy in the delivery stream, and the server's own
		// delivery time (a not-before too).
		d.StreamSeq, d.DeliverAt = receiptSeq(m.Receipt), m.DeliverAt.AsTime()
	}
	if k, ok := strings.CutPrefix(header(m, idempotencyHeader), redriveKeyPrefix); ok {
		d.RedriveOf = k
	}
	d.Schedule, d.Occurrence = header(m, scheduleHeader), header(m, occurrenceHeader)
	return d
}

// Headers the server sets that the harness reads (engine.IdempotencyHeader,
// server.RedriveKeyPrefix, recur.ScheduleHeader and recur.OccurrenceHeader;
// spelt out here: the harness believes the wire, not the server's code).
const (
	idempotencyHeader = "hourglass-idempotency-key"
	redriveKeyPrefix  = "redrive:"
	scheduleHeader    = "hourglass-schedule"
	occurrenceHeader  = "hourglass-occurrence"
)

// header returns the value of m's header key, "" if none.
func header(m *hourglassv1.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// decide says what the consumer does with m, received in turn t: settle
// it (ok) with an Ack, or with a Nack after delay, or not (ok false: its
// lease is left to run out). Poison messages fail every time, one of three
// ways, each raising the attempt count until they are dead-lettered;
// others fail on purpose at most maxFailures times.
func (w *workload) decide(t turn, m *hourglassv1.Message, rng *rand.Rand) (kind SettleKind, delay time.Duration, ok bool) {
	key, _ := splitEdit(string(m.Body))
	r := rng.IntN(100)
	switch {
	case t.dead, header(m, scheduleHeader) != "":
		// Dead letters, and a recurring schedule's occurrences (each is
		// to be delivered once, and acked at once), are acked.
		return Ack, 0, true
	case poisoned(m):
		switch {
		case !t.drain && (t.short || r < 10) && r < 50:
			// let the lease run out (a long one only outside the drain,
			// whose deadline would not wait for it)
			return Ack, 0, false
		case r%2 == 0:
			return Nack, time.Duration(50+rng.IntN(250)) * time.Millisecond, true
		default:
			return Nack, 0, true
		}
	case t.drain:
		return Ack, 0, true
	case t.short && r < 50 && w.fail(key):
		return Ack, 0, false // let the lease run out
	case !t.short && r < 6 && w.fail(key):
		return Nack, time.Duration(100+rng.Int64N(w.cfg.SegmentDuration.Milliseconds())) * time.Millisecond, true
	case !t.short && r < 9 && w.fail(key):
		return Nack, 0, true
	}
	return Ack, 0, true
}

// poisoned reports whether m carries PoisonHeader.
func poisoned(m *hourglassv1.Message) bool {
	for _, h := range m.Headers {
		if h.Key == PoisonHeader && h.Value == "1" {
			return true
		}
	}
	return false
}

// settle acks or nacks m by its receipt (by its ID without one) with a
// unary call over Connect or gRPC, and records it.
func (w *workload) settle(ctx context.Context, l lanes, cycle int, m *hourglassv1.Message, kind SettleKind, delay time.Duration, rng *rand.Rand) {
	x := w.settleOf(m, kind, delay, cycle)
	var err error
	if kind == Ack {
		u := l.pick("ack", rng)
		x.Sent = time.Now()
		req := &hourglassv1.AckRequest{Topic: m.Topic, Receipt: m.Receipt}
		if m.Receipt == "" {
			req.Id = m.Id // pushed on a Consume stream by one node
		}
		_, err = call(ctx, u.Ack, req)
	} else {
		u := l.pick("nack", rng)
		x.Sent = time.Now()
		req := &hourglassv1.NackRequest{Topic: m.Topic, Receipt: m.Receipt, DelayMs: delay.Milliseconds()}
		if m.Receipt == "" {
			req.Id = m.Id // pushed on a Consume stream by one node
		}
		_, err = call(ctx, u.Nack, req)
	}
	x.Answered, x.Outcome = time.Now(), classify(err)
	w.hist.AddSettle(x)
}

// settleOf is the record of an Ack or Nack of m, not sent yet.
func (w *workload) settleOf(m *hourglassv1.Message, kind SettleKind, delay time.Duration, cycle int) Settle {
	key, _ := splitEdit(string(m.Body))
	x := Settle{Key: key, ID: m.Id, Topic: m.Topic, Kind: kind, NackDelay: delay, Cycle: cycle, Sched: header(m, scheduleHeader)}
	if w.cfg.Cluster {
		x.StreamSeq = receiptSeq(m.Receipt)
	}
	return x
}

// sleep waits d or until ctx ends. The harness paces its load with it; it
// is a program, not a test.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

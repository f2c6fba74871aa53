package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
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

// classify turns an RPC error into an outcome: nil is OK; an error the
// server answered (a connect code other than Unavailable/Unknown/Canceled/
// DeadlineExceeded/Internal) or a refused connection is Rejected; anything
// else (a broken connection, a timeout) is InDoubt.
func classify(err error) Outcome {
	if err == nil {
		return OK
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Rejected
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeNotFound,
		connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted:
		return Rejected
	}
	return InDoubt
}

// workload is the producers and consumers of one run; one server address
// at a time (set per cycle).
type workload struct {
	cfg    *Config
	hist   *History
	topics []string
	hc     *http.Client

	mu       sync.Mutex
	failures map[string]int // deliberate failures (nack, lease left to expire) per key; guarded by mu
}

func newWorkload(cfg *Config, hist *History) *workload {
	w := &workload{cfg: cfg, hist: hist, failures: map[string]int{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for i := range cfg.Topics {
		w.topics = append(w.topics, fmt.Sprintf("ct%d", i))
	}
	return w
}

func (w *workload) client(addr string) hourglassv1connect.HourglassServiceClient {
	return hourglassv1connect.NewHourglassServiceClient(w.hc, addr)
}

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

// produce schedules and cancels until ctx ends. pc, if not nil, is a
// client that pipelines its calls over one connection (shared by the
// producers): some bursts go through it as concurrent single Schedules, so
// that the server has several calls of one connection in flight when it
// is killed.
func (w *workload) produce(ctx context.Context, c, pc hourglassv1connect.HourglassServiceClient, cycle, id int, rng *rand.Rand) {
	seg := w.cfg.SegmentDuration
	n := 0
	pause := time.Second / time.Duration(max(1, w.cfg.OpsPerSecond))
	for ctx.Err() == nil {
		switch r := rng.IntN(100); {
		case r < 8:
			w.cancel(ctx, c, cycle, rng)
		case r < 20 && pc != nil:
			w.pipelinedBurst(ctx, pc, cycle, id, &n, seg, rng)
		case r < 33:
			size := 2 + rng.IntN(7)
			var reqs []*hourglassv1.ScheduleRequest
			var recs []Schedule
			sent := time.Now()
			for range size {
				req, s := w.message(cycle, id, &n, sent, seg, rng)
				reqs, recs = append(reqs, req), append(recs, s)
			}
			var res *connect.Response[hourglassv1.ScheduleBatchResponse]
			out := w.retryInDoubt(ctx, func() Outcome {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := c.ScheduleBatch(cctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: reqs}))
				cancel()
				o := classify(err)
				if o == OK && len(r.Msg.Results) != len(recs) {
					o = InDoubt // not what the API promises; take nothing for granted
				}
				res = r
				return o
			})
			answered := time.Now()
			for i := range recs {
				recs[i].Sent, recs[i].Answered, recs[i].Outcome = sent, answered, out
				if out == OK {
					recs[i].ID = res.Msg.Results[i].Id
				}
				w.hist.AddSchedule(recs[i])
			}
		default:
			sent := time.Now()
			req, s := w.message(cycle, id, &n, sent, seg, rng)
			w.scheduleOne(ctx, c, req, s, sent)
		}
		sleep(ctx, time.Duration(rng.Int64N(int64(2*pause))))
	}
}

// scheduleOne sends req as a single Schedule through c, retrying while in
// doubt, and records it as s, sent at sent.
func (w *workload) scheduleOne(ctx context.Context, c hourglassv1connect.HourglassServiceClient, req *hourglassv1.ScheduleRequest, s Schedule, sent time.Time) {
	var res *connect.Response[hourglassv1.ScheduleResponse]
	s.Outcome = w.retryInDoubt(ctx, func() Outcome {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := c.Schedule(cctx, connect.NewRequest(req))
		cancel()
		res = r
		return classify(err)
	})
	s.Sent, s.Answered = sent, time.Now()
	if s.Outcome == OK {
		s.ID = res.Msg.Id
	}
	w.hist.AddSchedule(s)
}

// pipelinedBurst schedules 2 to 8 messages as concurrent single Schedule
// calls through pc, each recorded on its own.
func (w *workload) pipelinedBurst(ctx context.Context, pc hourglassv1connect.HourglassServiceClient, cycle, id int, n *int, seg time.Duration, rng *rand.Rand) {
	size := 2 + rng.IntN(7)
	sent := time.Now()
	var wg sync.WaitGroup
	for range size {
		req, s := w.message(cycle, id, n, sent, seg, rng)
		wg.Go(func() { w.scheduleOne(ctx, pc, req, s, sent) })
	}
	wg.Wait()
}

// retryInDoubt calls try until its outcome is not in doubt, or ctx ends,
// and returns the outcome that stands: a call that failed with the server
// may have been stored, and a retry with the same idempotency keys must
// then be answered with the same IDs (the checker sees a second message
// as a delivery under another ID). A retry refused while the server is
// down leaves the first attempt in doubt. Attempts are 100 ms apart.
func (w *workload) retryInDoubt(ctx context.Context, try func() Outcome) Outcome {
	out := try()
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
	if !w.cfg.Cluster && w.cfg.PoisonPercent > 0 && rng.IntN(100) < w.cfg.PoisonPercent {
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
	default:
		lvl := 1 + rng.IntN(len(DelayLevels))
		req.When = &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: int32(lvl)}
		s.Kind, s.NotBefore = "level", sent.Add(DelayLevels[lvl-1])
	}
	return req, s
}

// cancel cancels a recently acknowledged message.
func (w *workload) cancel(ctx context.Context, c hourglassv1connect.HourglassServiceClient, cycle int, rng *rand.Rand) {
	key, id, ok := w.hist.OKSchedule(rng.IntN)
	if !ok {
		return
	}
	x := Cancel{Key: key, ID: id, Cycle: cycle, Sent: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := c.Cancel(cctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: id}))
	cancel()
	x.Answered, x.Outcome = time.Now(), classify(err)
	if x.Outcome == OK {
		switch res.Msg.Result {
		case hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED:
			x.Answer = CancelCancelled
		case hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED:
			x.Answer = CancelAlreadyDelivered
		default:
			x.Answer = CancelUnknown
		}
	}
	w.hist.AddCancel(x)
}

// consume receives from every topic and every dead-letter topic in turn
// until ctx ends. With drain set it acks everything it gets under a long
// lease, except poison messages outside a dead-letter topic, which it
// still nacks.
func (w *workload) consume(ctx context.Context, c hourglassv1connect.HourglassServiceClient, cycle, id int, rng *rand.Rand, drain bool) {
	const longLease = 5 * time.Second
	topics := slices.Clone(w.topics)
	for _, t := range w.topics {
		topics = append(topics, dlqTopic(t))
	}
	for i := id; ctx.Err() == nil; i++ {
		topic := topics[i%len(topics)]
		dead := isDLQ(topic)
		short := !drain && !dead && rng.IntN(100) < 15
		lease := longLease
		if short {
			lease = time.Duration(300+rng.IntN(500)) * time.Millisecond
		}
		wait := int64(200)
		if dead {
			wait = 0 // mostly empty: do not hold up the other topics
		}
		issued := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := c.Receive(cctx, connect.NewRequest(&hourglassv1.ReceiveRequest{
			Topic: topic, MaxMessages: int32(1 + rng.IntN(16)), WaitMs: wait, LeaseMs: lease.Milliseconds(),
		}))
		cancel()
		received := time.Now()
		if err != nil {
			if classify(err) == InDoubt {
				w.hist.AddReceiveFail(ReceiveFail{Topic: topic, Cycle: cycle, Issued: issued, Failed: received})
			}
			sleep(ctx, 20*time.Millisecond) // the server is down or restarting
			continue
		}
		for _, m := range res.Msg.Messages {
			d := Delivery{Key: string(m.Body), ID: m.Id, OriginID: m.OriginId, Topic: m.Topic, Attempt: m.Attempt,
				Receipt: m.Receipt, Cycle: cycle, Issued: issued, Received: received}
			w.hist.AddDelivery(d)
		}
		for _, m := range res.Msg.Messages {
			key := string(m.Body)
			r := rng.IntN(100)
			switch {
			case dead:
				w.settle(ctx, c, cycle, m, Ack, 0)
			case poisoned(m):
				// Fail it, one of three ways: each failure raises its
				// attempt count until it is dead-lettered.
				switch {
				case !drain && (short || r < 10) && r < 50:
					// let the lease run out (a long one only outside the
					// drain, whose deadline would not wait for it)
				case r%2 == 0:
					w.settle(ctx, c, cycle, m, Nack, time.Duration(50+rng.IntN(250))*time.Millisecond)
				default:
					w.settle(ctx, c, cycle, m, Nack, 0)
				}
			case drain:
				w.settle(ctx, c, cycle, m, Ack, 0)
			case short && r < 50 && w.fail(key):
				// let the lease run out
			case !short && r < 6 && w.fail(key):
				w.settle(ctx, c, cycle, m, Nack, time.Duration(100+rng.Int64N(w.cfg.SegmentDuration.Milliseconds()))*time.Millisecond)
			case !short && r < 9 && w.fail(key):
				w.settle(ctx, c, cycle, m, Nack, 0)
			default:
				w.settle(ctx, c, cycle, m, Ack, 0)
			}
		}
	}
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

func (w *workload) settle(ctx context.Context, c hourglassv1connect.HourglassServiceClient, cycle int, m *hourglassv1.Message, kind SettleKind, delay time.Duration) {
	x := Settle{Key: string(m.Body), ID: m.Id, Topic: m.Topic, Kind: kind, NackDelay: delay, Cycle: cycle, Sent: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var err error
	if kind == Ack {
		_, err = c.Ack(cctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: m.Topic, Receipt: m.Receipt}))
	} else {
		_, err = c.Nack(cctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: m.Topic, Receipt: m.Receipt, DelayMs: delay.Milliseconds()}))
	}
	cancel()
	x.Answered, x.Outcome = time.Now(), classify(err)
	w.hist.AddSettle(x)
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

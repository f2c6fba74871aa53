package serverbench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/deliverycheck"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/enginebench"
)

// Report is enginebench.Report (the same JSON keys, 0 where one does not
// apply) and what only a network run has.
type Report struct {
	enginebench.Report
	Addr        string  `json:"addr"`
	Protocol    string  `json:"protocol"` // grpc, connect or stream (Config.Protocol)
	Topic       string  `json:"topic"`
	Clients     int     `json:"clients"`
	Consumers   int     `json:"consumers"`
	Credits     int     `json:"credits"`       // Config.Credits
	ClockSkewMs float64 `json:"clock_skew_ms"` // server clock - client clock, measured with Time
	ClockRTTMs  float64 `json:"clock_rtt_ms"`  // round trip of the Time call the skew came from
	Errors      int64   `json:"errors"`        // failed calls (the run stops at the first failed Schedule)
	MaxCalls    int     `json:"max_calls"`     // Config.MaxCalls
	// DueFrom (RFC 3339, server clock) and Spread: a backlog's due range;
	// Expected: the messages of it a drain waits for.
	DueFrom  string `json:"due_from"`
	Spread   string `json:"spread"`
	Expected int64  `json:"expected"`
	Keys     bool   `json:"keys"` // backlog: idempotency keys sent
	// Rate (get): the Schedules a second asked for; Gets, GetP50Ms...:
	// the Gets of pending messages timed meanwhile.
	Rate     int     `json:"rate"`
	Gets     int64   `json:"gets"`
	GetP50Ms float64 `json:"get_p50_ms"`
	GetP99Ms float64 `json:"get_p99_ms"`
	GetMaxMs float64 `json:"get_max_ms"`
	// Calls counts the requests the messages went in: unary calls
	// (Schedule, ScheduleBatch) or ScheduleStream requests. Merged counts
	// the messages the Go client merged into ScheduleBatch calls (with
	// MaxCalls).
	Calls  int64 `json:"calls"`
	Merged int64 `json:"merged"`
}

// Run runs one scenario against the server at cfg.Addr. A non-nil report
// comes back whenever something was measured, with an error if the run
// did not complete.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		var b [4]byte
		rand.Read(b[:])
		cfg.Topic = fmt.Sprintf("bench-%s-%s-%s", cfg.Scenario, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b[:]))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	p, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	defer p.close()

	r := &Report{Addr: cfg.Addr, Protocol: cfg.Protocol, Topic: cfg.Topic, Clients: cfg.Clients, MaxCalls: cfg.MaxCalls}
	r.Scenario, r.Messages, r.BodySize, r.Batch, r.Producers = cfg.Scenario, cfg.Messages, cfg.BodySize, cfg.Batch, cfg.Clients
	r.Keys = cfg.Keys
	r.GOMAXPROCS = runtime.GOMAXPROCS(0)
	r.Fsync = "server"
	if cfg.Scenario == Single {
		r.Batch = 1
	}

	skew, rtt, err := measureSkew(ctx, p.polls[0])
	if err != nil {
		return nil, fmt.Errorf("asking the server at %s for its time: %w", cfg.Addrs()[0], err)
	}
	r.ClockSkewMs, r.ClockRTTMs = round3(ms(skew)), round3(ms(rtt))
	if cfg.Protocol == ProtocolStream {
		if err := p.openStreams(ctx, cfg); err != nil {
			return nil, err
		}
	}

	switch cfg.Scenario {
	case Batch, Single:
		err = runSchedule(ctx, p, cfg, r)
		r.DueFromSeconds, r.DueToSeconds = FarAhead.Seconds(), FarAhead.Seconds()+r.ScheduleSeconds
		r.Note = fmt.Sprintf("the %d messages stay pending on topic %s, due about %v after the run", r.Scheduled, cfg.Topic, FarAhead)
	case Lateness:
		r.Consumers, r.Credits = cfg.Consumers, cfg.Credits
		err = runLateness(ctx, p, cfg, r, skew, rtt)
	case Backlog:
		err = runBacklog(ctx, p, cfg, r, skew)
	case Drain:
		r.Consumers, r.Credits = cfg.Consumers, cfg.Credits
		err = runDrain(ctx, p, cfg, r, skew, rtt)
	case Get:
		err = runGet(ctx, p, cfg, r)
		r.Note = fmt.Sprintf("the %d messages stay pending on topic %s, due about %v after the run", r.Scheduled, cfg.Topic, FarAhead)
	}
	if r.End == "" {
		r.End = "complete"
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			r.End = "timeout"
		case ctx.Err() != nil:
			r.End = "interrupted"
		case err != nil:
			r.End = "error" // a Schedule failed, or a consumer for good
		}
	}
	return r, err
}

// measureSkew calls Time a few times and keeps the call with the
// shortest round trip: skew = server clock - client clock at its middle.
func measureSkew(ctx context.Context, p poller) (skew, rtt time.Duration, err error) {
	rtt = -1
	for range 5 {
		t0 := time.Now()
		now, err := p.time(ctx)
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		d := t1.Sub(t0)
		if rtt < 0 || d < rtt {
			rtt = d
			skew = now.Sub(t0.Add(d / 2))
		}
	}
	return skew, rtt, nil
}

// schedule sends messages [0, N) from cfg.Clients goroutines, goroutine c
// through scheds[c%len(scheds)]: one message a request with single, else
// cfg.Batch a request; when sets each message's time. It records the
// messages scheduled, their rate and the requests they went in in r.
// acked, if not nil, is told each range of indexes [from, to) the server
// answered OK.
func schedule(ctx context.Context, scheds []scheduler, cfg Config, r *Report, single bool, when func(i int, m *hourglassv1.ScheduleRequest), acked func(from, to int)) error {
	step := cfg.Batch
	if single {
		step = 1
	}
	var next, scheduled, calls, errs atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	b := enginebench.NewBar(cfg.Progress, cfg.Messages, "scheduling")
	defer b.Done()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		sched := scheds[c%len(scheds)]
		wg.Go(func() {
			// Each goroutine reuses its messages and bodies from call to
			// call (a call is done with them when it returns), so that the
			// load generator spends its share of the machine on calls,
			// not on garbage.
			reqs := make([]hourglassv1.ScheduleRequest, step)
			bodies := make([]byte, step*cfg.BodySize)
			msgs := make([]*hourglassv1.ScheduleRequest, 0, step)
			for ctx.Err() == nil {
				from := int(next.Add(int64(step))) - step
				if from >= cfg.Messages {
					return
				}
				to := min(from+step, cfg.Messages)
				msgs = msgs[:0]
				for i := from; i < to; i++ {
					k := i - from
					m := &reqs[k]
					m.Topic, m.Body = cfg.Topic, bodies[k*cfg.BodySize:(k+1)*cfg.BodySize]
					binary.BigEndian.PutUint64(m.Body, uint64(i)) // the index; the rest stays zero
					when(i, m)
					msgs = append(msgs, m)
				}
				var err error
				if single {
					err = sched.schedule(ctx, msgs[0])
				} else {
					err = sched.scheduleBatch(ctx, msgs)
				}
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						once.Do(func() { firstErr = err; stop() })
					}
					return
				}
				calls.Add(1)
				scheduled.Add(int64(len(msgs)))
				if acked != nil {
					acked(from, to)
				}
				b.Add(len(msgs))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	r.Scheduled = int(scheduled.Load())
	r.Calls += calls.Load()
	r.Errors += errs.Load()
	r.ScheduleSeconds = round3(el.Seconds())
	if el > 0 {
		r.SchedulePerSec = round1(float64(r.Scheduled) / el.Seconds())
	}
	if firstErr != nil {
		return fmt.Errorf("scheduling: %w", firstErr)
	}
	return nil
}

func runSchedule(ctx context.Context, p *peers, cfg Config, r *Report) error {
	delay := &hourglassv1.ScheduleRequest_DelayMs{DelayMs: FarAhead.Milliseconds()}
	err := schedule(ctx, p.scheds, cfg, r, cfg.Scenario == Single, func(_ int, m *hourglassv1.ScheduleRequest) { m.When = delay }, nil)
	if p.counter != nil {
		// The Go client merged the Schedules: count what it sent.
		r.Calls, r.Merged = p.counter.calls.Load(), p.counter.merged.Load()
	}
	return err
}

// Lateness consumers.
const (
	// lease is the lease of each message received: far longer than a run
	// holds one.
	lease = time.Minute
	// ackers bounds the AckBatch calls in flight per unary consumer.
	ackers = 16
)

// tally counts the deliveries of a lateness run: lost, duplicates and
// early are deliverycheck's (the definitions every benchmark and the crash
// harness share). record may be called from any goroutine.
type tally struct {
	counts *deliverycheck.Counter // per slot (message index, unless slot says)
	// slot, if set, maps a message index to its place in counts; count
	// false for a message of the run that is not counted, known false for
	// one of no message of the run. Unset, the index is the place.
	slot         func(i uint64) (k uint64, count, known bool)
	anomalies    atomic.Int64
	errs         atomic.Int64
	lastProgress atomic.Int64 // unix nanos of the last new delivery
}

// newTally counts n messages. slack is how far the skew may be off: half
// the Time round trip. A message counts as early only if it came more
// than that before its deliverAt (on one machine the clocks are one, and a
// skew measured at -0.1 ms made deliveries right on time look early).
func newTally(n int, slack time.Duration, slot func(i uint64) (k uint64, count, known bool)) *tally {
	return &tally{counts: deliverycheck.New(n, slack), slot: slot}
}

// sample is what one consumer saw; only that consumer's goroutine
// touches it until the consumers are done.
type sample struct {
	late        []float64 // ms
	first, last time.Time
}

// record counts one delivery of a message with this body and deliverAt,
// received at now (client clock); skew moves now to the server's clock.
func (t *tally) record(s *sample, now time.Time, skew time.Duration, body []byte, deliverAt time.Time) {
	if len(body) < 8 {
		t.anomalies.Add(1)
		return
	}
	i := binary.BigEndian.Uint64(body)
	late := now.Add(skew).Sub(deliverAt)
	count, known := i < uint64(t.counts.Len()), i < uint64(t.counts.Len())
	if t.slot != nil {
		i, count, known = t.slot(i)
	}
	if !known {
		t.anomalies.Add(1)
		return
	}
	if !count || !t.counts.Delivered(i, deliverAt, now.Add(skew)) {
		return
	}
	s.late = append(s.late, ms(late))
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	t.lastProgress.Store(now.UnixNano())
}

// runLateness schedules N messages due evenly over cfg.Window (on the
// server's clock), starting once scheduling should be over, while
// cfg.Consumers receive and ack them: long polls of Receive and AckBatch
// calls (grpc, connect) or Consume streams (stream). Lateness is the
// client's receive time, moved to the server's clock with skew, minus
// deliverAt.
func runLateness(ctx context.Context, p *peers, cfg Config, r *Report, skew, rtt time.Duration) error {
	n := cfg.Messages
	// Scheduling must end before the first message is due: 1s plus a
	// conservative 20,000 messages/s.
	lead := time.Second + time.Duration(float64(n)/20000*float64(time.Second))
	t0 := time.Now()
	base := t0.Add(skew).Add(lead) // server clock
	r.DueFromSeconds = round3(lead.Seconds())
	r.DueToSeconds = round3((lead + cfg.Window).Seconds())
	lastDue := t0.Add(lead + cfg.Window) // client clock
	if lastDue.After(t0.Add(cfg.Timeout)) {
		return fmt.Errorf("--timeout %v ends before the last message is due (%.3fs after the start); give a longer --timeout or fewer --messages or a shorter --window", cfg.Timeout, r.DueToSeconds)
	}

	t := newTally(n, rtt/2, nil)
	cs := startConsumers(ctx, p, cfg, t, skew)

	serr := schedule(ctx, p.scheds, cfg, r, false, func(i int, m *hourglassv1.ScheduleRequest) {
		at := base.Add(time.Duration(float64(cfg.Window) * float64(i) / float64(n)))
		m.When = &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}
	}, t.counts.Acked)
	if serr == nil && time.Since(t0) > lead {
		r.Note = fmt.Sprintf("scheduling took %.3fs, past the first due time (%.3fs): the first messages were due before they were scheduled", r.ScheduleSeconds, lead.Seconds())
	}

	// Wait for every delivery, until the timeout, or until Grace has
	// passed since the last message was due without a new delivery.
	cs.wait(ctx, r, int64(r.Scheduled), lastDue, cfg.Grace, nil)
	return errors.Join(serr, cs.finish(r))
}

// pollConsumer long-polls Receive until cctx ends and acks each batch
// received with one AckBatch call, concurrently (at most ackers calls in
// flight), so that acking holds up the next Receive only when the server
// falls behind on acks. The acks run under ctx, to finish after cctx.
func pollConsumer(ctx, cctx context.Context, pl poller, topic string, credits int, t *tally, s *sample, skew time.Duration) {
	var acks sync.WaitGroup
	defer acks.Wait()
	ackSem := make(chan struct{}, ackers)
	for cctx.Err() == nil {
		msgs, err := pl.receive(cctx, &hourglassv1.ReceiveRequest{
			Topic: topic, MaxMessages: int32(credits), WaitMs: 1000, LeaseMs: lease.Milliseconds(),
		})
		now := time.Now()
		if err != nil {
			if cctx.Err() != nil {
				return
			}
			t.errs.Add(1)
			select {
			case <-cctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		receipts := make([]string, len(msgs))
		for i, m := range msgs {
			t.record(s, now, skew, m.Body, m.DeliverAt.AsTime())
			receipts[i] = m.Receipt
		}
		select {
		case ackSem <- struct{}{}:
		case <-cctx.Done():
			return
		}
		acks.Go(func() {
			defer func() { <-ackSem }()
			res, err := pl.ackBatch(ctx, &hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts})
			if err != nil {
				if ctx.Err() == nil {
					t.errs.Add(1)
				}
				return
			}
			for _, a := range res {
				if !a.Acked {
					t.errs.Add(1)
				}
			}
		})
	}
}

// streamConsumer consumes topic with the Go client's Consume (a Consume
// stream holding credits, acks sent back on it in batches)
// until ctx ends. The handler's call is the receive time. It returns the
// error that ended Consume early, if any.
func streamConsumer(ctx context.Context, cl *client.Client, topic string, credits int, t *tally, s *sample, skew time.Duration) error {
	return cl.Consume(ctx, topic, func(_ context.Context, d client.Delivery) error {
		t.record(s, time.Now(), skew, d.Body, d.DeliverAt)
		return nil
	}, client.ConsumeOptions{
		Prefetch: credits, Lease: lease, Concurrency: 1,
		// Failed acks and streams broken (and opened again).
		OnError: func(error) { t.errs.Add(1) },
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func round1(v float64) float64   { return math.Round(v*10) / 10 }
func round3(v float64) float64   { return math.Round(v*1000) / 1000 }

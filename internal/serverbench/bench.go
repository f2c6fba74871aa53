package serverbench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/enginebench"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
)

// Report is enginebench.Report (the same JSON keys, 0 where one does not
// apply) and what only a network run has.
type Report struct {
	enginebench.Report
	Addr        string  `json:"addr"`
	Protocol    string  `json:"protocol"` // connect (HTTP/1.1) or grpc (HTTP/2)
	Topic       string  `json:"topic"`
	Clients     int     `json:"clients"`
	Consumers   int     `json:"consumers"`
	ClockSkewMs float64 `json:"clock_skew_ms"` // server clock - client clock, measured with Time
	ClockRTTMs  float64 `json:"clock_rtt_ms"`  // round trip of the Time call the skew came from
	Errors      int64   `json:"errors"`        // failed calls (the run stops at the first failed Schedule)
	// MaxCalls is Config.MaxCalls; with it, Calls counts the Schedule and
	// ScheduleBatch calls the messages went in, and Merged the messages
	// that went in ScheduleBatch calls.
	MaxCalls int   `json:"max_calls"`
	Calls    int64 `json:"calls"`
	Merged   int64 `json:"merged"`
	// Conns is Config.Conns: the connections per server the calls were
	// pipelined over, 0 for a connection per call in flight.
	Conns int `json:"conns"`
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
	// What the Go client (package client) uses: its HTTP/1.1 client, which
	// sends a small request in one write (and with --conns pipelines
	// Schedule and ScheduleBatch over that many connections), and (for
	// gRPC, through connect-go) its codec, which decodes ScheduleBatch
	// answers with a few allocations per batch.
	hc := client.NewPipelinedHTTPClient(cfg.Clients+cfg.Consumers+8, cfg.Conns)
	defer hc.CloseIdleConnections()
	opts := []connect.ClientOption{connect.WithCodec(wirecodec.Codec{})}
	if cfg.Protocol == ProtocolGRPC {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0
		tr.Protocols = new(http.Protocols)
		if strings.HasPrefix(cfg.Addr, "http://") {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP2(true)
		}
		opts = append(opts, connect.WithGRPC())
		hc = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	if cfg.Token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(cfg.Token)))
	}
	// The connect protocol goes through package client's service, as the
	// Go client's users get it (Schedule and ScheduleBatch on its direct
	// path); gRPC through connect-go.
	var svcs []hourglassv1connect.HourglassServiceClient
	for _, a := range cfg.Addrs() {
		if cfg.Protocol == ProtocolGRPC {
			svcs = append(svcs, hourglassv1connect.NewHourglassServiceClient(hc, a, opts...))
		} else {
			svcs = append(svcs, client.New(a, client.WithHTTPClient(hc), client.WithToken(cfg.Token), client.WithMaxCalls(0)).Service())
		}
	}
	svc := svcs[0]

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	r := &Report{Addr: cfg.Addr, Protocol: cfg.Protocol, Topic: cfg.Topic, Clients: cfg.Clients, MaxCalls: cfg.MaxCalls, Conns: cfg.Conns}
	r.Scenario, r.Messages, r.BodySize, r.Batch, r.Producers = cfg.Scenario, cfg.Messages, cfg.BodySize, cfg.Batch, cfg.Clients
	r.GOMAXPROCS = runtime.GOMAXPROCS(0)
	r.Fsync = "server"
	if cfg.Scenario == Single {
		r.Batch = 1
	}

	skew, rtt, err := measureSkew(ctx, svc)
	if err != nil {
		return nil, fmt.Errorf("asking the server at %s for its time: %w", cfg.Addr, err)
	}
	r.ClockSkewMs, r.ClockRTTMs = round3(ms(skew)), round3(ms(rtt))

	switch cfg.Scenario {
	case Batch, Single:
		var cls []*client.Client // one merging client per address, with --max-calls
		if cfg.MaxCalls > 0 {
			for _, a := range cfg.Addrs() {
				copts := []client.Option{client.WithHTTPClient(hc), client.WithMaxCalls(cfg.MaxCalls), client.WithToken(cfg.Token)}
				if cfg.Protocol == ProtocolGRPC {
					copts = []client.Option{client.WithHTTPClient(hc), client.WithMaxCalls(cfg.MaxCalls), client.WithConnectOptions(opts...)}
				}
				cls = append(cls, client.New(a, copts...))
			}
		}
		err = runSchedule(ctx, svcs, cls, cfg, r)
		for _, cl := range cls {
			calls, merged := cl.ScheduleCalls()
			r.Calls, r.Merged = r.Calls+calls, r.Merged+merged
		}
		r.DueFromSeconds, r.DueToSeconds = FarAhead.Seconds(), FarAhead.Seconds()+r.ScheduleSeconds
		r.Note = fmt.Sprintf("the %d messages stay pending on topic %s, due about %v after the run", r.Scheduled, cfg.Topic, FarAhead)
	case Lateness:
		r.Consumers = cfg.Consumers
		err = runLateness(ctx, svc, cfg, r, skew)
	}
	if r.End == "" {
		r.End = "complete"
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			r.End = "timeout"
		case ctx.Err() != nil:
			r.End = "interrupted"
		}
	}
	return r, err
}

// measureSkew calls Time a few times and keeps the call with the
// shortest round trip: skew = server clock - client clock at its middle.
func measureSkew(ctx context.Context, svc hourglassv1connect.HourglassServiceClient) (skew, rtt time.Duration, err error) {
	rtt = -1
	for range 5 {
		t0 := time.Now()
		res, err := svc.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		d := t1.Sub(t0)
		if rtt < 0 || d < rtt {
			rtt = d
			skew = res.Msg.Now.AsTime().Sub(t0.Add(d / 2))
		}
	}
	return skew, rtt, nil
}

// schedule sends messages [0, N) in calls of cfg.Batch (ScheduleBatch) or
// one at a time (Single) from cfg.Clients goroutines; at(i) sets each
// message's time. It records scheduled count and rate in r.
// With cls non-empty, single Schedules go through them (merged as the Go
// client does), client c through cls[c % len(cls)].
func schedule(ctx context.Context, svcs []hourglassv1connect.HourglassServiceClient, cls []*client.Client, cfg Config, r *Report, single bool, when func(i int, m *hourglassv1.ScheduleRequest)) error {
	step := cfg.Batch
	if single {
		step = 1
	}
	var next, scheduled, errs atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		svc := svcs[c%len(svcs)]
		var cl *client.Client
		if len(cls) > 0 {
			cl = cls[c%len(cls)]
		}
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
				switch {
				case single && cl != nil:
					m := msgs[0]
					_, err = cl.Schedule(ctx, client.Message{Topic: m.Topic, Body: m.Body, Delay: time.Duration(m.GetDelayMs()) * time.Millisecond})
				case single:
					_, err = svc.Schedule(ctx, connect.NewRequest(msgs[0]))
				default:
					_, err = svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs}))
				}
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						once.Do(func() { firstErr = err; stop() })
					}
					return
				}
				scheduled.Add(int64(len(msgs)))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	r.Scheduled = int(scheduled.Load())
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

func runSchedule(ctx context.Context, svcs []hourglassv1connect.HourglassServiceClient, cls []*client.Client, cfg Config, r *Report) error {
	delay := &hourglassv1.ScheduleRequest_DelayMs{DelayMs: FarAhead.Milliseconds()}
	return schedule(ctx, svcs, cls, cfg, r, cfg.Scenario == Single, func(_ int, m *hourglassv1.ScheduleRequest) { m.When = delay })
}

// runLateness schedules N messages due evenly over cfg.Window (on the
// server's clock), starting once scheduling should be over, while
// cfg.Consumers long-poll Receive and Ack. Lateness is the client's
// receive time, moved to the server's clock with skew, minus deliverAt.
func runLateness(ctx context.Context, svc hourglassv1connect.HourglassServiceClient, cfg Config, r *Report, skew time.Duration) error {
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

	seen := make([]atomic.Uint32, n)
	var delivered, dups, early, anomalies, errs atomic.Int64
	var lastProgress atomic.Int64 // unix nanos of the last new delivery
	lastProgress.Store(time.Now().UnixNano())
	type sample struct {
		late     []float64
		first    time.Time
		last     time.Time
		received int64
	}
	samples := make([]sample, cfg.Consumers)

	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var cwg sync.WaitGroup
	for ci := range cfg.Consumers {
		s := &samples[ci]
		cwg.Go(func() {
			var acks sync.WaitGroup
			defer acks.Wait()
			ackSem := make(chan struct{}, ackers)
			for cctx.Err() == nil {
				res, err := svc.Receive(cctx, connect.NewRequest(&hourglassv1.ReceiveRequest{
					Topic: cfg.Topic, MaxMessages: 100, WaitMs: 1000, LeaseMs: 60_000,
				}))
				now := time.Now()
				if err != nil {
					if cctx.Err() != nil {
						return
					}
					errs.Add(1)
					select {
					case <-cctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				msgs := res.Msg.Messages
				if len(msgs) == 0 {
					continue
				}
				serverNow := now.Add(skew)
				for _, m := range msgs {
					if len(m.Body) < 8 {
						anomalies.Add(1)
						continue
					}
					i := binary.BigEndian.Uint64(m.Body)
					if i >= uint64(n) {
						anomalies.Add(1)
						continue
					}
					late := serverNow.Sub(m.DeliverAt.AsTime())
					if late < 0 {
						early.Add(1)
					}
					if seen[i].Add(1) > 1 {
						dups.Add(1)
						continue
					}
					delivered.Add(1)
					s.late = append(s.late, ms(late))
					if s.first.IsZero() {
						s.first = now
					}
					s.last = now
					s.received++
				}
				lastProgress.Store(now.UnixNano())
				// Ack the whole batch in one AckBatch call, concurrently (at
				// most ackers calls in flight per consumer), so that acking
				// holds up the next Receive only when the server falls
				// behind on acks.
				receipts := make([]string, len(msgs))
				for i, m := range msgs {
					receipts[i] = m.Receipt
				}
				select {
				case ackSem <- struct{}{}:
				case <-cctx.Done():
					return
				}
				acks.Go(func() {
					defer func() { <-ackSem }()
					res, err := svc.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: cfg.Topic, Receipts: receipts}))
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					for _, a := range res.Msg.Results {
						if !a.Acked {
							errs.Add(1)
						}
					}
				})
			}
		})
	}

	serr := schedule(ctx, []hourglassv1connect.HourglassServiceClient{svc}, nil, cfg, r, false, func(i int, m *hourglassv1.ScheduleRequest) {
		at := base.Add(time.Duration(float64(cfg.Window) * float64(i) / float64(n)))
		m.When = &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}
	})
	if serr == nil && time.Since(t0) > lead {
		r.Note = fmt.Sprintf("scheduling took %.3fs, past the first due time (%.3fs): the first messages were due before they were scheduled", r.ScheduleSeconds, lead.Seconds())
	}

	// Wait for every delivery, until the timeout, or until Grace has
	// passed since the last message was due without a new delivery.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for delivered.Load() < int64(r.Scheduled) {
		select {
		case <-ctx.Done():
			break wait
		case <-tick.C:
		}
		now := time.Now()
		if now.After(lastDue) && now.Sub(time.Unix(0, lastProgress.Load())) > cfg.Grace && now.Sub(lastDue) > cfg.Grace {
			r.End = "no-progress"
			break
		}
	}
	stopConsumers()
	cwg.Wait()

	var all []float64
	var first, last time.Time
	for _, s := range samples {
		all = append(all, s.late...)
		if !s.first.IsZero() && (first.IsZero() || s.first.Before(first)) {
			first = s.first
		}
		if s.last.After(last) {
			last = s.last
		}
	}
	r.Delivered = delivered.Load()
	r.Duplicates = dups.Load()
	r.Early = early.Load()
	r.Anomalies = anomalies.Load()
	r.Errors += errs.Load()
	r.Lost = int64(r.Scheduled) - r.Delivered
	if d := last.Sub(first); d > 0 {
		r.FirePerSec = round1(float64(r.Delivered) / d.Seconds())
	}
	if len(all) > 0 {
		slices.Sort(all)
		sum := 0.0
		for _, v := range all {
			sum += v
		}
		r.LatenessP50Ms = round3(pct(all, 0.50))
		r.LatenessP99Ms = round3(pct(all, 0.99))
		r.LatenessMaxMs = round3(all[len(all)-1])
		r.LatenessMeanMs = round3(sum / float64(len(all)))
	}
	return serr
}

// pct is the nearest-rank percentile of sorted values.
// ackers bounds the AckBatch calls in flight per consumer.
const ackers = 16

func pct(sorted []float64, p float64) float64 {
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func round1(v float64) float64   { return math.Round(v*10) / 10 }
func round3(v float64) float64   { return math.Round(v*1000) / 1000 }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

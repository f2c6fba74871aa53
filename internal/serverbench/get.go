package serverbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// DefaultRate is the get scenario's Schedule rate: the load under which
// Get of a pending message is timed.
const DefaultRate = 50_000

// getters is how many goroutines call Get one after the other.
const getters = 2

// runGet schedules cfg.Messages far ahead at cfg.Rate messages a second
// (ScheduleBatch requests of cfg.Batch from cfg.Clients goroutines) and,
// meanwhile, Gets pending messages it was answered, picked at random, one
// call at a time from each of two goroutines, timing each. The Gets'
// latency percentiles go in the report; a Get that does not answer
// PENDING with the message's ID is an error.
func runGet(ctx context.Context, p *peers, cfg Config, r *Report) error {
	svc, ok := p.scheds[0].(grpcAPI)
	if !ok {
		return fmt.Errorf("--scenario get runs over --protocol grpc only")
	}
	body := make([]byte, cfg.BodySize)
	var (
		mu   sync.Mutex
		ids  []string
		sent atomic.Int64
	)
	start := time.Now()
	at := timestamppb.New(start.Add(FarAhead))
	// pace returns when n more messages may go at cfg.Rate from start.
	pace := func(n int) error {
		due := start.Add(time.Duration(float64(sent.Add(int64(n))-int64(n)) / float64(cfg.Rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	sctx, stopGets := context.WithCancel(ctx)
	var lat []time.Duration
	var latMu sync.Mutex
	var gets sync.WaitGroup
	getErr := make(chan error, getters)
	for g := range getters {
		gets.Add(1)
		go func() {
			defer gets.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []time.Duration
			defer func() { latMu.Lock(); lat = append(lat, mine...); latMu.Unlock() }()
			for sctx.Err() == nil {
				mu.Lock()
				n := len(ids)
				id := ""
				if n > 0 {
					id = ids[rng.IntN(n)]
				}
				mu.Unlock()
				if id == "" {
					time.Sleep(time.Millisecond)
					continue
				}
				t0 := time.Now()
				res, err := svc.svc.Get(sctx, &hourglassv1.GetRequest{Id: id})
				d := time.Since(t0)
				if sctx.Err() != nil {
					return
				}
				if err != nil {
					getErr <- fmt.Errorf("Get(%s): %w", id, err)
					return
				}
				if res.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || res.GetMessage().GetId() != id {
					getErr <- fmt.Errorf("Get(%s) = %v as %q; want PENDING as itself", id, res.State, res.GetMessage().GetId())
					return
				}
				mine = append(mine, d)
			}
		}()
	}
	per := cfg.Messages / cfg.Clients
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Clients)
	for c := range cfg.Clients {
		n := per
		if c == cfg.Clients-1 {
			n = cfg.Messages - per*(cfg.Clients-1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]*hourglassv1.ScheduleRequest, 0, cfg.Batch)
			for done := 0; done < n; {
				k := min(cfg.Batch, n-done)
				if err := pace(k); err != nil {
					errs <- err
					return
				}
				msgs = msgs[:0]
				for range k {
					msgs = append(msgs, &hourglassv1.ScheduleRequest{Topic: cfg.Topic, Body: body,
						When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: at}})
				}
				res, err := svc.svc.ScheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{Messages: msgs})
				if err == nil {
					err = batchAnswered(len(res.Results), k)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, x := range res.Results {
					ids = append(ids, x.GetId())
				}
				mu.Unlock()
				done += k
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopGets()
	gets.Wait()
	close(errs)
	r.Scheduled = len(ids)
	r.ScheduleSeconds = round3(elapsed.Seconds())
	r.SchedulePerSec = float64(r.Scheduled) / elapsed.Seconds()
	r.Rate = cfg.Rate
	slices.Sort(lat)
	r.Gets = int64(len(lat))
	if len(lat) > 0 {
		q := func(f float64) float64 { return round3(ms(lat[min(len(lat)-1, int(f*float64(len(lat))))])) }
		r.GetP50Ms, r.GetP99Ms, r.GetMaxMs = q(0.5), q(0.99), round3(ms(lat[len(lat)-1]))
	}
	for err := range errs {
		return err
	}
	select {
	case err := <-getErr:
		return err
	default:
	}
	return nil
}

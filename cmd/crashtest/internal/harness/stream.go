package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/sink"
)

// Names of the delivery stream the cluster publishes to (serve's defaults
// for --nats-stream and --nats-subject-prefix) and of the harness's
// durable consumer on it.
const (
	deliveryStream   = "HOURGLASS"
	deliveryConsumer = "crashtest"
)

// streamReader reads the delivery stream with a durable pull consumer and
// records each stored message once (by stream sequence) as a Delivery.
// A message the consumer gets again (its ack was lost while a NATS node
// died) is counted, not recorded twice; the same ID stored at two stream
// sequences is recorded twice, which Check counts as a stream duplicate.
type streamReader struct {
	js   jetstream.JetStream
	hist *History
	cyc  func() int // the cycle now running, for the record

	mu          sync.Mutex
	seen        map[uint64]bool // stream sequences recorded; guarded by mu
	redelivered int             // consumer redeliveries of a recorded sequence; guarded by mu
	fetchErrs   int             // failed fetches (NATS node down, no leader); guarded by mu
	last        time.Time       // consumer clock of the last message; guarded by mu
}

// ensureConsumer creates the durable consumer once the stream exists (the
// first hourglass node creates it), waiting up to a minute.
func ensureConsumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := js.CreateOrUpdateConsumer(cctx, deliveryStream, jetstream.ConsumerConfig{
			Durable: deliveryConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
			DeliverPolicy: jetstream.DeliverAllPolicy, MaxAckPending: 20_000,
		})
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("crashtest: the durable consumer on stream %s: %w", deliveryStream, err)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// run fetches until ctx ends.
func (s *streamReader) run(ctx context.Context, cons jetstream.Consumer) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(200, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			s.mu.Lock()
			s.fetchErrs++
			s.mu.Unlock()
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		for m := range batch.Messages() {
			s.record(m)
			m.Ack() // a lost ack means a redelivery, which record counts
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			s.mu.Lock()
			s.fetchErrs++
			s.mu.Unlock()
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

func (s *streamReader) record(m jetstream.Msg) {
	now := time.Now()
	md, err := m.Metadata()
	if err != nil {
		return
	}
	s.mu.Lock()
	s.last = now
	dup := s.seen[md.Sequence.Stream]
	if dup {
		s.redelivered++
	} else {
		s.seen[md.Sequence.Stream] = true
	}
	s.mu.Unlock()
	if dup {
		return
	}
	h := m.Headers()
	d := Delivery{Key: string(m.Data()), ID: h.Get(sink.HeaderID), OriginID: h.Get(sink.HeaderOriginID),
		Topic: h.Get(sink.HeaderTopic), Cycle: s.cyc(), Issued: md.Timestamp, Received: md.Timestamp,
		Stream: true, StreamSeq: md.Sequence.Stream, Consumed: now}
	if a, err := strconv.ParseUint(h.Get(sink.HeaderAttempt), 10, 32); err == nil {
		d.Attempt = uint32(a)
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(sink.HeaderDeliverAt)); err == nil {
		d.DeliverAt = t
	}
	s.hist.AddDelivery(d)
}

// stats returns the consumer redeliveries and failed fetches so far.
func (s *streamReader) stats() (redelivered, fetchErrs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.redelivered, s.fetchErrs
}

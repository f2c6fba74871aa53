package crashtest

// Expiring messages (issue 44): a small workload of its own beside the
// main one, on two topics with the two expiry policies, whose history the
// checker in expirycheck.go holds to "never handed out from its expiry
// on" across kill -9, with --damage and --corrupt-tail too.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/queue"
)

// The expiry topics and their policies.
const (
	// ExpiryAckTopic expires a message not acked by its expiry
	// (expiry_unacked) and dead-letters it.
	ExpiryAckTopic = "ce-ack"
	// ExpiryDropTopic drops a message not received by its expiry
	// (expiry_drop).
	ExpiryDropTopic = "ce-drop"
	expiryLease     = 400 * time.Millisecond
)

var expiryTopics = []string{ExpiryAckTopic, ExpiryDropTopic}

// expiryPolicy is the policy of expiry topic t.
func expiryPolicy(t string) *hourglassv1.Policy {
	if t == ExpiryAckTopic {
		return &hourglassv1.Policy{ExpiryUnacked: new(true)}
	}
	return &hourglassv1.Policy{ExpiryDrop: new(true)}
}

// ExpirySchedule is one Schedule of an expiry topic: body "ce/<n>", due
// at Due, expiring at ExpireAt (harness clock; expire_at is absolute).
type ExpirySchedule struct {
	Body, Topic   string
	Due, ExpireAt time.Time
	Outcome       Outcome
}

// ExpiryDelivery is one message of an expiry topic, or of its dead-letter
// topic, a consumer received.
type ExpiryDelivery struct {
	Body, Topic, Receipt string
	// Reason is a dead letter's hourglass-dead-letter-reason.
	Reason           string `json:",omitempty"`
	Issued, Received time.Time
}

// ExpirySettle is one Ack of an expiry delivery, by receipt.
type ExpirySettle struct {
	Receipt, Topic string
	Sent, Answered time.Time
	Outcome        Outcome
}

// expiryWork is the expiry topics' producer and consumers and what they
// did.
type expiryWork struct {
	mu      sync.Mutex
	set     bool // the policies are set (answered OK); guarded by mu
	n       int  // messages scheduled; guarded by mu
	scheds  []ExpirySchedule
	dels    []ExpiryDelivery
	settles []ExpirySettle
	lastExp time.Time // the latest expiry asked for
}

// setPolicies sets the topics' policies until answered OK (they are
// durable: once is enough).
func (e *expiryWork) setPolicies(ctx context.Context, c hourglassv1.HourglassServiceClient) bool {
	e.mu.Lock()
	done := e.set
	e.mu.Unlock()
	if done {
		return true
	}
	for _, t := range expiryTopics {
		if _, err := call(ctx, c.SetPolicy, &hourglassv1.SetPolicyRequest{Topic: t, Policy: expiryPolicy(t)}); err != nil {
			return false
		}
	}
	e.mu.Lock()
	e.set = true
	e.mu.Unlock()
	return true
}

// produce schedules a message on an expiry topic every 20-60 ms until ctx
// ends: due 0-300 ms later, expiring 50-600 ms after that.
func (e *expiryWork) produce(ctx context.Context, c hourglassv1.HourglassServiceClient, rng *rand.Rand) {
	for op := 0; op < maxLoopOps && ctx.Err() == nil; op++ {
		if !e.setPolicies(ctx, c) {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		topic := expiryTopics[rng.IntN(len(expiryTopics))]
		due := time.Now().Add(time.Duration(rng.IntN(300)) * time.Millisecond).Truncate(time.Millisecond)
		exp := due.Add(time.Duration(50+rng.IntN(550)) * time.Millisecond)
		e.mu.Lock()
		e.n++
		body := fmt.Sprintf("ce/%d/%d", rng.Uint32(), e.n)
		if exp.After(e.lastExp) {
			e.lastExp = exp
		}
		e.mu.Unlock()
		_, err := call(ctx, c.Schedule, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(body),
			When:   &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(due)},
			Expiry: &hourglassv1.ScheduleRequest_ExpireAt{ExpireAt: timestamppb.New(exp)}})
		e.mu.Lock()
		e.scheds = append(e.scheds, ExpirySchedule{Body: body, Topic: topic, Due: due, ExpireAt: exp, Outcome: classify(err)})
		e.mu.Unlock()
		sleep(ctx, time.Duration(20+rng.IntN(40))*time.Millisecond)
	}
}

// consume receives from the expiry topics and their dead-letter topics in
// turn until ctx ends, under a lease of expiryLease. What it gets from an
// expiry topic it holds for 0-500 ms (so that some acks come after the
// expiry, and some leases end after it) and acks, or one time in five
// (not in the drain) lets the lease run out; dead letters it acks at once.
func (e *expiryWork) consume(ctx context.Context, c hourglassv1.HourglassServiceClient, rng *rand.Rand, drain bool) {
	topics := []string{ExpiryAckTopic, ExpiryDropTopic, ExpiryAckTopic + queue.DLQSuffix, ExpiryDropTopic + queue.DLQSuffix}
	for op := 0; op < maxLoopOps && ctx.Err() == nil; op++ {
		topic := topics[op%len(topics)]
		dead := isDLQ(topic)
		wait := int64(100)
		if dead {
			wait = 0
		}
		issued := time.Now()
		res, err := call(ctx, c.Receive, &hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 10, WaitMs: wait, LeaseMs: expiryLease.Milliseconds()})
		if err != nil {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		got := time.Now()
		e.mu.Lock()
		for _, m := range res.Messages {
			e.dels = append(e.dels, ExpiryDelivery{Body: string(m.Body), Topic: topic, Receipt: m.Receipt,
				Reason: m.GetDeadLetter().GetReason(), Issued: issued, Received: got})
		}
		e.mu.Unlock()
		if !dead && len(res.Messages) > 0 {
			sleep(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
		}
		for _, m := range res.Messages {
			if !dead && !drain && rng.IntN(5) == 0 {
				continue // the lease runs out
			}
			x := ExpirySettle{Receipt: m.Receipt, Topic: topic, Sent: time.Now()}
			_, err := call(ctx, c.Ack, &hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt})
			x.Answered, x.Outcome = time.Now(), classify(err)
			e.mu.Lock()
			e.settles = append(e.settles, x)
			e.mu.Unlock()
		}
	}
}

// snapshot copies the expiry history.
func (e *expiryWork) snapshot() ExpiryEvents {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ExpiryEvents{Policies: e.set, Schedules: append([]ExpirySchedule(nil), e.scheds...),
		Deliveries: append([]ExpiryDelivery(nil), e.dels...), Settles: append([]ExpirySettle(nil), e.settles...)}
}

// lastExpiry is the latest expiry a message asked for.
func (e *expiryWork) lastExpiry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastExp
}

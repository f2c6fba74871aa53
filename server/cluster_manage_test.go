package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// The fake cluster's queue management: it notes each call (as the other
// management calls) and keeps one policy per topic; the dead letters of
// any topic are the three of deadLetters.

var deadLetters = []queue.Message{
	{ID: message.ID{DeliverAt: 1, Seq: 1}, Headers: []message.Header{{Key: []byte(queue.DeadLetterReasonHeader), Value: []byte(queue.ReasonNacked)}}},
	{ID: message.ID{DeliverAt: 1, Seq: 2}, Headers: []message.Header{{Key: []byte(queue.DeadLetterReasonHeader), Value: []byte(queue.ReasonMaxAttempts)}}},
	{ID: message.ID{DeliverAt: 1, Seq: 3}, Headers: []message.Header{{Key: []byte(queue.DeadLetterReasonHeader), Value: []byte(queue.ReasonNacked)}}},
}

func (f *fakeCluster) ExtendReceipt(_ context.Context, topic, receipt string, lease time.Duration) (time.Time, error) {
	f.note("Extend %s %s %v", topic, receipt, lease)
	return time.UnixMilli(1e12).Add(lease), nil
}

func (f *fakeCluster) TopicPolicy(_ context.Context, topic string) (set, effective queue.Policy, err error) {
	f.mmu.Lock()
	defer f.mmu.Unlock()
	set = f.policies[topic]
	effective = set
	if effective.Lease == 0 {
		effective.Lease = time.Minute
	}
	if effective.MaxAttempts == 0 {
		effective.MaxAttempts = 5
	}
	return set, effective, nil
}

func (f *fakeCluster) SetTopicPolicy(ctx context.Context, topic string, p queue.Policy) (set, effective queue.Policy, err error) {
	f.note("SetPolicy %s %+v", topic, p)
	f.mmu.Lock()
	if f.policies == nil {
		f.policies = map[string]queue.Policy{}
	}
	f.policies[topic] = p
	f.mmu.Unlock()
	return f.TopicPolicy(ctx, topic)
}

func (f *fakeCluster) QueueTopics(context.Context) ([]QueueTopic, error) {
	return []QueueTopic{{Topic: "a", Due: 3, Leased: 2, DeadLettered: 1, Policy: queue.Policy{Paused: true}}, {Topic: "b"}}, nil
}

func (f *fakeCluster) ListQueue(context.Context, string, string, int) ([]queue.Message, string, error) {
	return nil, "", nil
}

func (f *fakeCluster) PurgeTopic(_ context.Context, topic string) (int64, error) {
	f.note("Purge %s", topic)
	return 4, nil
}

func (f *fakeCluster) DeleteQueueTopic(_ context.Context, topic string) (int64, bool, error) {
	f.note("DeleteTopic %s", topic)
	return 6, true, nil
}

func (f *fakeCluster) Redrive(ctx context.Context, dlq string, o queue.RedriveOptions) (queue.RedriveResult, error) {
	f.note("Redrive %s to %q max %d", dlq, o.To, o.Max)
	var res queue.RedriveResult
	for _, d := range deadLetters {
		if o.Match != nil && !o.Match(d) {
			res.Skipped++
			continue
		}
		if o.Max > 0 && res.Redriven == o.Max {
			res.More = true
			break
		}
		if err := o.Wait(ctx); err != nil {
			return res, err
		}
		res.Redriven++
	}
	return res, nil
}

// TestClusterQueueManage: in cluster mode the queue's management RPCs
// reach the node: Extend by receipt with its lease (by id it asks for the
// receipt), SetPolicy changes the fields it names over what the node has
// and sends the node the whole policy, GetPolicy fills in the effective
// fields, Topics shows the node's counts, Purge of due messages and dead
// letters names the topic or its dead-letter topic, DeleteTopic cancels
// pending messages and deletes the queue's topic, Redrive filters by ids
// and reason.
func TestClusterQueueManage(t *testing.T) {
	fc := newFakeCluster(true, nil)
	s := serveTest(t, Options{Cluster: fc, ExternalSink: "nats"}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)

	ex, err := c.Extend(ctx, &hourglassv1.ExtendRequest{Topic: "orders", Receipt: "r1", LeaseMs: 2000})
	if err != nil || !ex.LeaseExpiresAt.AsTime().Equal(time.UnixMilli(1e12+2000)) {
		t.Errorf("Extend = %v, %v", ex, err)
	}
	_, err = c.Extend(ctx, &hourglassv1.ExtendRequest{Topic: "orders", Id: message.ID{DeliverAt: 1, Seq: 1}.String(), LeaseMs: 2000})
	wantStatus(t, "Extend by id", err, codes.FailedPrecondition, "receipt")

	if _, err := c.SetPolicy(ctx, &hourglassv1.SetPolicyRequest{Topic: "orders", Policy: &hourglassv1.Policy{LeaseMs: ptr(int64(1500)), Paused: ptr(true)}}); err != nil {
		t.Fatal(err)
	}
	sp, err := c.SetPolicy(ctx, &hourglassv1.SetPolicyRequest{Topic: "orders", Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(3))}, Defaults: []string{"paused"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := sp.Policy; p.GetLeaseMs() != 1500 || p.GetMaxAttempts() != 3 || p.Paused != nil {
		t.Errorf("SetPolicy answered %v; want lease 1500, max attempts 3, not paused", p)
	}
	for field, p := range map[string]*hourglassv1.Policy{
		"flow_concurrency": {FlowConcurrency: ptr(int32(3))}, "flow_rate": {FlowRate: ptr(50.0)},
		"flow_ordered": {FlowOrdered: ptr(true)}, "flow_fair": {FlowFair: ptr(true)},
	} {
		_, err = c.SetPolicy(ctx, &hourglassv1.SetPolicyRequest{Topic: "orders", Policy: p})
		wantStatus(t, "SetPolicy with "+field, err, codes.FailedPrecondition, field, "cluster mode")
	}
	_, err = c.SetPolicy(ctx, &hourglassv1.SetPolicyRequest{Topic: "orders", Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(0))}, Defaults: []string{"nope"}})
	wantStatus(t, "SetPolicy with an unknown default", err, codes.InvalidArgument, "nope")
	gp, err := c.GetPolicy(ctx, &hourglassv1.GetPolicyRequest{Topic: "fresh"})
	if err != nil || gp.Policy.LeaseMs != nil || gp.Effective.GetLeaseMs() != 60_000 || gp.Effective.GetMaxAttempts() != 5 ||
		gp.Effective.GetPaused() || gp.Effective.GetMaxDispatchRate() != 0 || gp.Effective.Backoff.GetMultiplier() != 1 {
		t.Errorf("GetPolicy of a topic without one: %v, %v", gp, err)
	}

	tp, err := c.Topics(ctx, &hourglassv1.TopicsRequest{})
	if err != nil || len(tp.Topics) != 2 || tp.Topics[0].Topic != "a" || tp.Topics[0].Due != 3 || tp.Topics[0].Leased != 2 ||
		tp.Topics[0].DeadLettered != 1 || !tp.Topics[0].Policy.GetPaused() {
		t.Errorf("Topics = %v, %v", tp, err)
	}
	pu, err := c.Purge(ctx, &hourglassv1.PurgeRequest{Topic: "orders", State: hourglassv1.MessageState_MESSAGE_STATE_DUE})
	if err != nil || pu.Purged != 4 {
		t.Errorf("Purge due: %v, %v", pu, err)
	}
	if _, err := c.Purge(ctx, &hourglassv1.PurgeRequest{Topic: "orders", State: hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED}); err != nil {
		t.Errorf("Purge dead letters: %v", err)
	}
	dt, err := c.DeleteTopic(ctx, &hourglassv1.DeleteTopicRequest{Topic: "t"})
	if err != nil || dt.Cancelled != 1 || dt.Removed != 6 {
		t.Errorf("DeleteTopic = %v, %v; want 1 cancelled (the fake's pending one), 6 removed", dt, err)
	}
	rd, err := c.Redrive(ctx, &hourglassv1.RedriveRequest{DeadLetterTopic: "orders.dlq", Reason: queue.ReasonNacked, MaxMessages: 1})
	if err != nil || rd.Redriven != 1 || rd.Skipped != 1 || !rd.More {
		t.Errorf("Redrive by reason, max 1: %v, %v", rd, err)
	}
	rd, err = c.Redrive(ctx, &hourglassv1.RedriveRequest{DeadLetterTopic: "orders.dlq", ToTopic: "elsewhere", Ids: []string{deadLetters[1].ID.String()}})
	if err != nil || rd.Redriven != 1 || rd.Skipped != 2 || rd.More {
		t.Errorf("Redrive by id: %v, %v", rd, err)
	}
	_, err = c.Redrive(ctx, &hourglassv1.RedriveRequest{DeadLetterTopic: "orders"})
	wantStatus(t, "Redrive of a topic that is not a dead-letter topic", err, codes.InvalidArgument, ".dlq")

	fc.mmu.Lock()
	got := slices.Clone(fc.manage)
	fc.mmu.Unlock()
	for _, want := range []string{
		"Extend orders r1 2s",
		fmt.Sprintf("SetPolicy orders %+v", queue.Policy{Lease: 1500 * time.Millisecond, Paused: true}),
		fmt.Sprintf("SetPolicy orders %+v", queue.Policy{Lease: 1500 * time.Millisecond, MaxAttempts: 3}),
		"Purge orders", "Purge orders.dlq", "DeleteTopic t",
		`Redrive orders.dlq to "" max 1`, `Redrive orders.dlq to "elsewhere" max 0`,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("the node did not see %q; it saw %q", want, got)
		}
	}
}

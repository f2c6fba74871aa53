package server

import (
	"context"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/recur"
)

// Cluster is a node of a cluster (package cluster) that a Server serves
// instead of a local engine and queue.
type Cluster interface {
	// ScheduleBatch stores reqs and returns their IDs; it need not be
	// atomic (its error then says so).
	ScheduleBatch(ctx context.Context, reqs []engine.Request) ([]message.ID, error)
	// Cancel cancels id, forwarding it to the node that decides unless
	// forwarded is set (the request was forwarded here already).
	Cancel(ctx context.Context, id message.ID, forwarded bool) (engine.CancelResult, error)
	// Get says what became of id (engine.Found; a Found with no topic
	// has no message to show) and, for a rescheduled one, its
	// replacement; Reschedule moves a pending message to at; Lookup finds
	// the message scheduled with topic and idempotency key. Each is
	// decided where the message is held, forwarded there unless forwarded
	// is set.
	Get(ctx context.Context, id message.ID, forwarded bool) (engine.Found, message.ID, error)
	Reschedule(ctx context.Context, id message.ID, at time.Time, forwarded bool) (engine.RescheduleResult, message.ID, error)
	Lookup(ctx context.Context, topic, key string, forwarded bool) (message.ID, bool, error)
	// List answers a page of req.Topic's pending messages after the page
	// token (the cluster's own, opaque; req.After is unused) and the next
	// page's token, asking every partition's owner unless forwarded is
	// set (then the token names the partitions this node answers for).
	List(ctx context.Context, req engine.ListRequest, token string, forwarded bool) ([]engine.Found, string, error)
	Now() time.Time
	Ready() <-chan struct{}
	Stats() engine.Stats
	// Health is nil while the data path works, else why not (an
	// *engine.StallError for a local engine).
	Health() error
	// Schedules serves the recurring-schedule RPCs, each decided by the
	// node that owns the schedule, forwarded there unless forwarded is
	// set; nil answers them Unimplemented.
	Schedules(forwarded bool) recur.Service
	// Receiver serves Receive, Ack and Nack by receipt (a cluster node:
	// from JetStream's consumers).
	Receiver
	// QueueManager serves the queue's management RPCs from the same
	// consumers.
	QueueManager
}

// QueueManager is what Extend, Redrive, Purge of due messages and dead
// letters, DeleteTopic, Topics, GetPolicy and SetPolicy need of a cluster
// node. Its errors are those of package queue or gRPC status errors.
type QueueManager interface {
	// ExtendReceipt starts the lease of the delivery receipt names
	// again, lease from now, and returns when it ends.
	ExtendReceipt(ctx context.Context, topic, receipt string, lease time.Duration) (time.Time, error)
	// TopicPolicy returns topic's policy as set (fields not set zero)
	// and as it applies; SetTopicPolicy makes p the policy (zero fields:
	// the node's defaults), refusing what it cannot serve, and returns it
	// as TopicPolicy does, as it made it.
	TopicPolicy(ctx context.Context, topic string) (set, effective queue.Policy, err error)
	SetTopicPolicy(ctx context.Context, topic string, p queue.Policy) (set, effective queue.Policy, err error)
	// QueueTopics returns the topics with their counts, sorted.
	QueueTopics(ctx context.Context) ([]QueueTopic, error)
	// PurgeTopic removes topic's messages waiting to be received and
	// returns how many; DeleteQueueTopic removes every message of topic
	// and its policy, returns how many, and reports whether it existed.
	PurgeTopic(ctx context.Context, topic string) (int64, error)
	DeleteQueueTopic(ctx context.Context, topic string) (int64, bool, error)
	// ListQueue returns up to n of topic's messages not handed out yet,
	// after the page token (its own), and the next page's token.
	ListQueue(ctx context.Context, topic, token string, n int) ([]queue.Message, string, error)
	// Redrive moves dead letters of dlq back as o says.
	Redrive(ctx context.Context, dlq string, o queue.RedriveOptions) (queue.RedriveResult, error)
}

// QueueTopic is one topic's counts and policy (as set) in cluster mode.
type QueueTopic struct {
	Topic                     string
	Due, Leased, DeadLettered int64
	Policy                    queue.Policy
}

// Receiver is what Receive, ReceiveStream, Consume, Ack, AckBatch and
// Nack by receipt need: the built-in queue, or a cluster node. Its errors
// are those of package queue (queue.ErrNotLeased, ...) or gRPC status
// errors.
type Receiver interface {
	Receive(ctx context.Context, topic string, n int, wait, lease time.Duration) ([]queue.Message, error)
	AckReceipt(ctx context.Context, topic, receipt string) error
	AckBatch(ctx context.Context, topic string, receipts []string) ([]error, error)
	NackReceipt(ctx context.Context, topic, receipt string, o queue.NackOptions) error
}

// ForwardedHeader marks a request one cluster node forwarded to another.
const ForwardedHeader = "Hourglass-Forwarded"

// core is what the RPCs need of a local engine or a cluster node: a
// Cluster's methods but its Receiver's.
type core interface {
	ScheduleBatch(ctx context.Context, reqs []engine.Request) ([]message.ID, error)
	Cancel(ctx context.Context, id message.ID, forwarded bool) (engine.CancelResult, error)
	Now() time.Time
	Ready() <-chan struct{}
	Stats() engine.Stats
	Health() error
}

// engineCore is a local engine as a core.
type engineCore struct{ *engine.Engine }

// Cancel cancels what carries the message id now (engine.Current): the
// ID a producer was given names the message through its retries,
// reschedules and redrives.
func (e engineCore) Cancel(ctx context.Context, id message.ID, _ bool) (engine.CancelResult, error) {
	for range currentTries {
		f, err := e.Current(ctx, id)
		if err != nil {
			return engine.Unknown, err
		}
		res, err := e.Engine.Cancel(ctx, f.ID)
		if err != nil || res != engine.AlreadyCancelled || !e.movedSince(ctx, f.ID) {
			return res, err
		}
		// Rescheduled between Current and Cancel: cancel its replacement.
	}
	return engine.AlreadyCancelled, nil
}

// Reschedule moves what carries the message id now, as Cancel.
func (e engineCore) Reschedule(ctx context.Context, id message.ID, at time.Time) (engine.RescheduleResult, message.ID, error) {
	for range currentTries {
		f, err := e.Current(ctx, id)
		if err != nil {
			return engine.RescheduleUnknown, message.ID{}, err
		}
		res, nid, err := e.Engine.Reschedule(ctx, f.ID, at)
		if err != nil || res != engine.RescheduleCancelled || !e.movedSince(ctx, f.ID) {
			return res, nid, err
		}
	}
	return engine.RescheduleCancelled, message.ID{}, nil
}

// currentTries bounds how often Cancel and Reschedule look for what
// carries a message again, when it moved on between the look and the act.
const currentTries = 3

// movedSince reports whether id was rescheduled (it has a later
// incarnation now).
func (e engineCore) movedSince(ctx context.Context, id message.ID) bool {
	f, err := e.Current(ctx, id)
	return err == nil && f.ID != id
}

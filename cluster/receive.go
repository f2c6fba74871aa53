package cluster

import (
	"context"
	"time"

	"github.com/hourglassmq/hourglass/cluster/jsqueue"
	"github.com/hourglassmq/hourglass/queue"
)

// The consumer side: any node serves any topic from its durable consumer
// on the delivery stream (package jsqueue); nothing is forwarded.

// Receive hands out up to n due messages of topic, waiting up to wait for
// the first, each leased for the topic consumer's AckWait (lease must be
// 0 or that); see jsqueue.Queue.Receive.
func (n *Node) Receive(ctx context.Context, topic string, max int, wait, lease time.Duration) ([]queue.Message, error) {
	return n.queue.Receive(ctx, topic, max, wait, lease)
}

// AckReceipt acks the delivery a receipt of any node names.
func (n *Node) AckReceipt(ctx context.Context, topic, receipt string) error {
	return n.queue.AckReceipt(ctx, topic, receipt)
}

// AckBatch acks each receipt and returns each one's error.
func (n *Node) AckBatch(ctx context.Context, topic string, receipts []string) ([]error, error) {
	return n.queue.AckBatch(ctx, topic, receipts)
}

// NackReceipt gives the delivery a receipt names back, or moves it to the
// dead-letter topic; see jsqueue.Queue.NackReceipt.
func (n *Node) NackReceipt(ctx context.Context, topic, receipt string, o queue.NackOptions) error {
	return n.queue.NackReceipt(ctx, topic, receipt, o)
}

// The queue's management: also served from the topics' consumers, by any
// node (see jsqueue's Queue).

// ExtendReceipt starts the lease of the delivery a receipt of any node
// names again (lease must be the topic consumer's AckWait).
func (n *Node) ExtendReceipt(ctx context.Context, topic, receipt string, lease time.Duration) (time.Time, error) {
	return n.queue.ExtendReceipt(ctx, topic, receipt, lease)
}

// TopicPolicy returns topic's policy as set and as it applies.
func (n *Node) TopicPolicy(ctx context.Context, topic string) (set, effective queue.Policy, err error) {
	return n.queue.Policy(ctx, topic)
}

// SetTopicPolicy makes p topic's policy on its consumer and returns it as
// set and as it applies.
func (n *Node) SetTopicPolicy(ctx context.Context, topic string, p queue.Policy) (set, effective queue.Policy, err error) {
	return n.queue.SetPolicy(ctx, topic, p)
}

// QueueTopics returns the delivery stream's topics with their counts.
func (n *Node) QueueTopics(ctx context.Context) ([]jsqueue.TopicStats, error) {
	return n.queue.Topics(ctx)
}

// PurgeTopic removes topic's messages from the delivery stream.
func (n *Node) PurgeTopic(ctx context.Context, topic string) (int64, error) {
	return n.queue.Purge(ctx, topic)
}

// DeleteQueueTopic removes topic's messages and its consumer.
func (n *Node) DeleteQueueTopic(ctx context.Context, topic string) (int64, bool, error) {
	return n.queue.DeleteTopic(ctx, topic)
}

// ListQueue lists topic's messages not handed out yet; see
// jsqueue.Queue.List.
func (n *Node) ListQueue(ctx context.Context, topic, token string, max int) ([]queue.Message, string, error) {
	return n.queue.List(ctx, topic, token, max)
}

// Redrive moves dead letters of dlq back; see jsqueue.Queue.Redrive.
func (n *Node) Redrive(ctx context.Context, dlq string, o queue.RedriveOptions) (queue.RedriveResult, error) {
	return n.queue.Redrive(ctx, dlq, o)
}

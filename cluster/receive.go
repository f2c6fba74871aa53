package cluster

import (
	"context"
	"time"

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

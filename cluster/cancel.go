package cluster

import (
	"context"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Cancel, and its forwarding to the node that owns a message's partition.

// ForwardedHeader marks a Cancel one node forwarded to the owner of the
// message's partition, so that it is not forwarded again.
const ForwardedHeader = "Hourglass-Forwarded"

// Cancel cancels the message id: decided here if this node owns its
// partition, else forwarded to the owner (unless forwarded is set: a
// request another node forwarded is never forwarded again).
func (n *Node) Cancel(ctx context.Context, id message.ID, forwarded bool) (engine.CancelResult, error) {
	p, _, _ := SplitID(id)
	if p >= n.opts.Partitions {
		return engine.Unknown, nil
	}
	pt, fw, err := n.route(ctx, p, forwarded, "the cancel")
	if err != nil {
		return engine.Unknown, err
	}
	if pt != nil {
		res, err := pt.cancel(ctx, id)
		if res == engine.Cancelled {
			n.counts.cancelled.Add(1)
		}
		return res, err
	}
	res, err := fw.c.Cancel(ctx, clientID(id))
	if err != nil {
		return engine.Unknown, fw.err("the cancel", err)
	}
	switch res {
	case client.Cancelled:
		return engine.Cancelled, nil
	case client.AlreadyDelivered:
		return engine.AlreadyDone, nil
	case client.AlreadyCancelled:
		return engine.AlreadyCancelled, nil
	}
	return engine.Unknown, nil
}

// forwarder returns the client that forwards requests to url.
func (n *Node) forwarder(url string) (*client.Client, error) {
	if c, ok := n.fwd.Load(url); ok {
		return c.(*client.Client), nil
	}
	opts := []client.Option{client.WithHeader(ForwardedHeader, n.opts.NodeID)}
	if n.opts.AuthToken != "" {
		opts = append(opts, client.WithToken(n.opts.AuthToken))
	}
	c, err := client.New(url, opts...)
	if err != nil {
		return nil, err
	}
	if old, loaded := n.fwd.LoadOrStore(url, c); loaded {
		c.Close()
		return old.(*client.Client), nil
	}
	return c, nil
}

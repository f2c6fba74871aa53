package cluster

import (
	"context"
	"errors"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"google.golang.org/grpc/status"
)

// Cancel, and its forwarding to the node that owns a message's partition.

// Cancel cancels the message id: decided here if this node owns its
// partition, else forwarded to the owner (unless forwarded is set: a
// request another node forwarded is never forwarded again).
func (n *Node) Cancel(ctx context.Context, id message.ID, forwarded bool) (engine.CancelResult, error) {
	p, _, _ := SplitID(id)
	if p >= n.opts.Partitions {
		return engine.Unknown, nil
	}
	if pt := n.partition(p); pt != nil {
		res, err := pt.cancel(ctx, id)
		if res == engine.Cancelled {
			n.cancelled.Add(1)
		}
		return res, err
	}
	if forwarded {
		return engine.Unknown, unavailable("partition %d moved away from this node while the request was forwarded to it; retry", p)
	}
	o, ok, err := owner(ctx, n.owners, p)
	if err != nil {
		return engine.Unknown, unavailable("looking up the owner of partition %d: %v", p, err)
	}
	if !ok {
		return engine.Unknown, unavailable("partition %d has no owner at the moment (a node stopped; another takes it over within the lease TTL %v); retry", p, n.opts.LeaseTTL)
	}
	if o.Node == n.opts.NodeID {
		return engine.Unknown, unavailable("partition %d is being taken over by this node; retry", p)
	}
	fc, err := n.forwarder(o.URL)
	if err != nil {
		return engine.Unknown, unavailable("forwarding the cancel to %s (%s), the owner of partition %d: %v", o.Node, o.URL, p, err)
	}
	cid, err := client.ParseID(id.String())
	if err != nil {
		return engine.Unknown, err // a message.ID always parses
	}
	res, err := fc.Cancel(ctx, cid)
	if err != nil {
		if st, ok := status.FromError(errors.Unwrap(err)); ok {
			return engine.Unknown, st.Err()
		}
		return engine.Unknown, unavailable("forwarding the cancel to %s (%s), the owner of partition %d: %v", o.Node, o.URL, p, err)
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

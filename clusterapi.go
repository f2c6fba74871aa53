package hourglass

import (
	"context"

	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/cluster/jsqueue"
	"github.com/hourglassmq/hourglass/server"
)

// clusterAPI is a cluster node as the server's Cluster: the queue's
// management in the server's types.
type clusterAPI struct{ *cluster.Node }

func (c clusterAPI) QueueTopics(ctx context.Context) ([]server.QueueTopic, error) {
	ts, err := c.Node.QueueTopics(ctx)
	out := make([]server.QueueTopic, len(ts))
	for i, t := range ts {
		out[i] = server.QueueTopic{Topic: t.Topic, Due: t.Due, Leased: t.Leased, DeadLettered: t.DeadLettered, Policy: t.Policy}
	}
	return out, err
}

func (c clusterAPI) Redrive(ctx context.Context, dlq string, o server.RedriveOptions) (server.RedriveResult, error) {
	res, err := c.Node.Redrive(ctx, dlq, jsqueue.RedriveOptions{To: o.To, Match: o.Match, Max: o.Max, Wait: o.Wait})
	return server.RedriveResult{Redriven: res.Redriven, Skipped: res.Skipped, More: res.More}, err
}

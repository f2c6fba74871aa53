package hourglass

import (
	"context"

	"github.com/hourglassmq/hourglass/cluster"
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

package server

// The queue's management RPCs in cluster mode: each is served by the
// cluster node from the topics' JetStream consumers (cluster/jsqueue).

import (
	"context"

	"golang.org/x/time/rate"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// clusterRedrive serves Redrive on a cluster node: the node receives the
// dead letters, moves those that match (ids, reason) and gives the
// others back.
func (s *Server) clusterRedrive(ctx context.Context, c Cluster, m *hourglassv1.RedriveRequest, ids map[message.ID]bool, lim *rate.Limiter) (*hourglassv1.RedriveResponse, error) {
	o := queue.RedriveOptions{To: m.ToTopic, Max: int64(m.MaxMessages), Wait: lim.Wait}
	if len(ids) > 0 || m.Reason != "" {
		o.Match = func(d queue.Message) bool {
			return (len(ids) == 0 || ids[d.ID]) && (m.Reason == "" || message.HeaderValue(d.Headers, queue.DeadLetterReasonHeader) == m.Reason)
		}
	}
	res, err := c.Redrive(ctx, m.DeadLetterTopic, o)
	out := &hourglassv1.RedriveResponse{Redriven: res.Redriven, Skipped: res.Skipped, More: res.More}
	if err != nil {
		return out, serverError(err)
	}
	return out, nil
}

// clusterTopics serves Topics on a cluster node: the topics of the
// delivery stream, with their consumers' counts.
func (s *Server) clusterTopics(ctx context.Context, c Cluster) (*hourglassv1.TopicsResponse, error) {
	ts, err := c.QueueTopics(ctx)
	if err != nil {
		return nil, serverError(err)
	}
	out := &hourglassv1.TopicsResponse{}
	for _, t := range ts {
		out.Topics = append(out.Topics, &hourglassv1.TopicInfo{Topic: t.Topic, Due: t.Due, Leased: t.Leased,
			DeadLettered: t.DeadLettered, Policy: toProtoPolicy(t.Policy)})
	}
	return out, nil
}

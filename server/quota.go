package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/access"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// errQuotasInCluster refuses a credentials file with quotas in cluster
// mode: the pending counts are a local engine's.
var errQuotasInCluster = errors.New("quotas need the local engine's pending counts, which cluster mode has not: remove the quotas from the credentials file or serve without --cluster")

// errQuotasNotCounted refuses a reload that brings the first quota to a
// server whose engine does not count (it counts when the file it started
// with had quotas).
var errQuotasNotCounted = errors.New("quotas need the engine's pending counts, which it makes at start when the credentials file has quotas: restart the server to use them")

// quotasUsable checks that a credentials file's quotas can be kept.
func (s *Server) quotasUsable(set *access.Set) error {
	switch {
	case !set.HasQuotas():
		return nil
	case s.opts.Cluster != nil:
		return errQuotasInCluster
	case !s.opts.Engine.CountsPending():
		return errQuotasNotCounted
	}
	return nil
}

// checkQuotas refuses, with ResourceExhausted naming the quota, a
// Schedule whose messages would take what a quota bounds past it: the
// caller's credential's quota and those of the topic patterns of the
// credentials file. The pending counts are the engine's
// (engine.Engine.PendingOf). A message's size is its stored size less the
// headers the server adds. Concurrent calls are checked each against the
// count before them, so together they may pass a limit by their own size.
func (s *Server) checkQuotas(ctx context.Context, reqs []engine.Request) error {
	set := s.creds.Load()
	if set == nil || s.opts.Engine == nil {
		return nil
	}
	var cred *access.Credential
	if c := callerOf(ctx); c != nil {
		cred = c.cred
	}
	for _, q := range set.Quotas(cred) {
		var add engine.Pending
		for i := range reqs {
			r := &reqs[i]
			if q.Applies(r.Topic) {
				add.Messages++
				add.Bytes += int64(message.ScheduleSize(&message.Message{Topic: []byte(r.Topic), Headers: r.Headers, Body: r.Body}))
			}
		}
		if add.Messages == 0 {
			continue
		}
		cur, err := s.opts.Engine.PendingOf(ctx, q.Applies)
		if err != nil {
			return err
		}
		if q.MaxPendingMessages > 0 && cur.Messages+add.Messages > q.MaxPendingMessages {
			return quotaError(q, "max_pending_messages", q.MaxPendingMessages, cur.Messages, add.Messages, "messages", reqs)
		}
		if q.MaxPendingBytes > 0 && cur.Bytes+add.Bytes > q.MaxPendingBytes {
			return quotaError(q, "max_pending_bytes", q.MaxPendingBytes, cur.Bytes, add.Bytes, "bytes", reqs)
		}
	}
	return nil
}

func quotaError(q *access.Quota, limit string, max, cur, add int64, unit string, reqs []engine.Request) error {
	var topics []string
	for i := range reqs {
		if q.Applies(reqs[i].Topic) && !slices.Contains(topics, reqs[i].Topic) {
			topics = append(topics, reqs[i].Topic)
		}
	}
	return status.Error(codes.ResourceExhausted, fmt.Sprintf("quota of %s exceeded: %s is %d; its topics hold %d %s pending and this call adds %d (to %s): retry once consumers have taken some, or cancel some",
		q.Name, limit, max, cur, unit, add, strings.Join(topics, ", ")))
}

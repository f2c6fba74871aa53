package server

// The RPCs that operate what is scheduled: Reschedule, Extend, Redrive,
// Purge, DeleteTopic, Topics, GetPolicy and SetPolicy.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// policyTable holds the topics' policies (control records).
const policyTable = catalog.Policies

// target resolves the message an RPC names by id, or by topic and key
// (exactly one of the two); found is false for a key no pending message
// has.
func (s *Server) target(ctx context.Context, rpc, id, topic, key string) (message.ID, bool, error) {
	switch {
	case id != "" && (topic != "" || key != ""):
		return message.ID{}, false, invalid("%s: both id and topic/key are set: name the message by one of them", rpc)
	case id != "":
		mid, err := parseID("id", id)
		return mid, err == nil, err
	case topic == "" || key == "":
		return message.ID{}, false, invalid("%s: name the message by id, or by topic and key (both)", rpc)
	}
	if err := checkTopic("", topic); err != nil {
		return message.ID{}, false, err
	}
	if len(key) > engine.MaxIdempotencyKey {
		return message.ID{}, false, invalid("key is %d bytes: at most %d", len(key), engine.MaxIdempotencyKey)
	}
	var mid message.ID
	var ok bool
	var err error
	if c := s.opts.Cluster; c != nil {
		mid, ok, err = c.Lookup(ctx, topic, key, infoOf(ctx).forwarded)
	} else {
		mid, ok, err = s.eng.(engineCore).Lookup(ctx, topic, key)
	}
	if err != nil {
		return message.ID{}, false, serverError(err)
	}
	return mid, ok, nil
}

// Reschedule serves the Reschedule RPC.
func (s api) Reschedule(ctx context.Context, m *hourglassv1.RescheduleRequest) (*hourglassv1.RescheduleResponse, error) {
	now := s.eng.Now()
	var at time.Time
	switch w := m.When.(type) {
	case *hourglassv1.RescheduleRequest_DelayMs:
		if w.DelayMs < 0 || w.DelayMs > s.opts.MaxDelay.Milliseconds() {
			return nil, invalid("delay_ms %d: from 0 to %d (%s, the server's --max-delay)", w.DelayMs, s.opts.MaxDelay.Milliseconds(), units.FormatDuration(s.opts.MaxDelay))
		}
		at = now.Add(time.Duration(w.DelayMs) * time.Millisecond)
	case *hourglassv1.RescheduleRequest_DeliverAt:
		if err := w.DeliverAt.CheckValid(); err != nil {
			return nil, invalid("deliver_at: %v", err)
		}
		at = w.DeliverAt.AsTime()
	case *hourglassv1.RescheduleRequest_Now:
		if !w.Now {
			return nil, invalid("now is false: set now to true to deliver at once, or give delay_ms or deliver_at")
		}
		at = now
	default:
		return nil, invalid("no new time: give one of delay_ms, deliver_at and now")
	}
	id, found, err := s.target(ctx, "Reschedule", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	out := &hourglassv1.RescheduleResponse{Result: hourglassv1.RescheduleResult_RESCHEDULE_RESULT_UNKNOWN}
	if !found {
		return out, nil
	}
	var res engine.RescheduleResult
	var nid message.ID
	if c := s.opts.Cluster; c != nil {
		res, nid, err = c.Reschedule(ctx, id, at, infoOf(ctx).forwarded)
	} else {
		res, nid, err = s.eng.(engineCore).Reschedule(ctx, id, at)
	}
	if err != nil {
		if errors.Is(err, engine.ErrTooFar) {
			return nil, invalid("%v", err)
		}
		return nil, serverError(err)
	}
	switch res {
	case engine.Rescheduled:
		out.Result, out.Id, out.DeliverAt = hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED, nid.String(), timestamppb.New(nid.Time())
	case engine.RescheduleTooLate:
		out.Result = hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED
	case engine.RescheduleCancelled:
		out.Result = hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_CANCELLED
	case engine.RescheduleUnknown:
		if s.retiredDelivered(ctx, id) {
			out.Result = hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED
		}
	}
	return out, nil
}

// retiredDelivered reports whether id, which the engine no longer knows
// (its bucket retired once every entry was done), was delivered to the
// built-in queue, which holds or remembers it: Cancel and Reschedule then
// answer already delivered, as they did before the bucket retired.
func (s api) retiredDelivered(ctx context.Context, id message.ID) bool {
	ec, ok := s.eng.(engineCore)
	if !ok {
		return false
	}
	f, err := ec.Current(ctx, id)
	if err != nil || f.State != engine.StateNotFound {
		return false
	}
	t, _, _, err := s.retiredInQueue(ctx, ec.Engine, f.ID, true)
	return err == nil && t != ""
}

// Extend serves the Extend RPC.
func (s api) Extend(ctx context.Context, m *hourglassv1.ExtendRequest) (*hourglassv1.ExtendResponse, error) {
	id, err := settleTarget(m.Topic, m.Id, m.Receipt)
	if err == nil {
		err = s.byReceipt(m.Receipt)
	}
	if err != nil {
		return nil, err
	}
	if m.LeaseMs < 1 || m.LeaseMs > queue.DefaultMaxLease.Milliseconds() {
		return nil, invalid("lease_ms %d: from 1 to %d (%s)", m.LeaseMs, queue.DefaultMaxLease.Milliseconds(), units.FormatDuration(queue.DefaultMaxLease))
	}
	d := time.Duration(m.LeaseMs) * time.Millisecond
	var until time.Time
	if m.Receipt != "" || s.opts.Cluster != nil {
		until, err = s.extendReceipt(ctx, m.Topic, m.Receipt, d)
	} else {
		until, err = s.q.Extend(ctx, m.Topic, id, d)
	}
	if err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.ExtendResponse{LeaseExpiresAt: timestamppb.New(until)}, nil
}

// extendReceipt extends the lease receipt names, on the cluster or the
// built-in queue.
func (s *Server) extendReceipt(ctx context.Context, topic, receipt string, d time.Duration) (time.Time, error) {
	if c := s.opts.Cluster; c != nil {
		return c.ExtendReceipt(ctx, topic, receipt, d)
	}
	return s.q.ExtendReceipt(ctx, topic, receipt, d)
}

// Redrive limits.
const (
	DefaultRedriveRate = 1000
	MaxRedriveRate     = 100000
	MaxRedrive         = 1000000
	// RedriveKeyPrefix starts the idempotency key of a redriven message:
	// "redrive:<its ID in the dead-letter topic>". A redrive cut short and
	// run again finds the key and does not schedule the message twice.
	RedriveKeyPrefix = "redrive:"
)

// Redrive serves the Redrive RPC: page through the dead-letter topic's waiting
// messages, and move each that matches: schedule it for now on its
// topic (attempt 0, its origin kept, keyed by its dead-letter ID), then
// take and ack it in the dead-letter topic.
func (s api) Redrive(ctx context.Context, m *hourglassv1.RedriveRequest) (*hourglassv1.RedriveResponse, error) {
	if err := checkTopic("dead_letter_topic ", m.DeadLetterTopic); err != nil {
		return nil, err
	}
	origin, isDLQ := cutSuffix(m.DeadLetterTopic, queue.DLQSuffix)
	if !isDLQ {
		return nil, invalid("dead_letter_topic %q does not end in %q: redrive drains a dead-letter topic", m.DeadLetterTopic, queue.DLQSuffix)
	}
	if m.ToTopic != "" {
		if err := checkTopic("to_topic ", m.ToTopic); err != nil {
			return nil, err
		}
		// A new topic counts against --max-topics, as a Schedule's does.
		if err := s.admit("to_topic", m.ToTopic); err != nil {
			return nil, err
		}
	}
	ratePerSec := int(m.RatePerSecond)
	if ratePerSec == 0 {
		ratePerSec = DefaultRedriveRate
	}
	if ratePerSec < 1 || ratePerSec > MaxRedriveRate {
		return nil, invalid("rate_per_second %d: from 1 to %d; 0 means %d", m.RatePerSecond, MaxRedriveRate, DefaultRedriveRate)
	}
	if m.MaxMessages < 0 || m.MaxMessages > MaxRedrive {
		return nil, invalid("max_messages %d: from 0 to %d; 0 means all that wait now", m.MaxMessages, MaxRedrive)
	}
	ids := map[message.ID]bool{}
	for _, t := range m.Ids {
		id, err := parseID("ids", t)
		if err != nil {
			return nil, err
		}
		ids[id] = true
	}
	lim := rate.NewLimiter(rate.Limit(ratePerSec), max(1, ratePerSec/10))
	if c := s.opts.Cluster; c != nil {
		return s.clusterRedrive(ctx, c, m, ids, lim)
	}
	eng, err := s.localEngine("Redrive")
	if err != nil {
		return nil, err
	}
	out := &hourglassv1.RedriveResponse{}
	tok := ""
	for {
		page, next, err := s.q.List(ctx, m.DeadLetterTopic, queue.ListDue, tok, 100)
		if err != nil {
			return nil, serverError(err)
		}
		for _, d := range page {
			reason := message.HeaderValue(d.Headers, queue.DeadLetterReasonHeader)
			if (len(ids) > 0 && !ids[d.ID]) || (m.Reason != "" && reason != m.Reason) {
				out.Skipped++
				continue
			}
			if m.MaxMessages > 0 && out.Redriven >= int64(m.MaxMessages) {
				out.More = true
				return out, nil
			}
			if err := lim.Wait(ctx); err != nil {
				return out, serverError(err)
			}
			to := m.ToTopic
			if to == "" {
				to = message.HeaderValue(d.Headers, queue.DeadLetterOriginHeader)
			}
			if to == "" {
				to = origin
			}
			moved, err := s.redriveOne(ctx, eng, d, to)
			if err != nil {
				return out, serverError(err)
			}
			if moved {
				out.Redriven++
			}
		}
		if next == "" {
			return out, nil
		}
		tok = next
	}
}

// redriveOne moves the dead letter d back to topic to; moved is false if
// another caller (a consumer of the dead-letter topic, another Redrive)
// took it meanwhile. It leases d first, so that no one else has it while
// its copy is scheduled, then acks it; a copy scheduled before a crash is
// found by its key and not scheduled twice.
func (s *Server) redriveOne(ctx context.Context, eng *engine.Engine, d queue.Message, to string) (bool, error) {
	taken, err := s.q.Take(ctx, d.Topic, d.Offset, time.Minute)
	if errors.Is(err, queue.ErrNotWaiting) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	key := RedriveKeyPrefix + d.ID.String()
	_, done, err := eng.Lookup(ctx, to, key)
	if err == nil && !done {
		origin := d.Origin
		if origin.IsZero() {
			origin = d.ID
		}
		hs := slices.DeleteFunc(slices.Clone(d.Headers), func(h message.Header) bool {
			switch string(h.Key) {
			case queue.DeadLetterOriginHeader, queue.DeadLetterReasonHeader, queue.DeadLetterErrorHeader, queue.DeadLetterAtHeader,
				queue.LastErrorHeader, engine.IdempotencyHeader, engine.IdempotencyTimeHeader:
				return true
			}
			return false
		})
		_, err = eng.Schedule(ctx, engine.Request{Topic: to, Headers: hs, Body: d.Body, Origin: origin, IdempotencyKey: key})
	}
	if err != nil {
		// Given back as it was: another Redrive may move it.
		if rerr := s.q.NackReceipt(ctx, d.Topic, taken.Receipt, queue.NackOptions{Release: true}); rerr != nil {
			s.log.Warn("server: redrive: giving a dead letter back failed; its lease runs out", "topic", d.Topic, "id", d.ID, "err", rerr)
		}
		return false, err
	}
	return true, s.q.AckReceipt(ctx, d.Topic, taken.Receipt)
}

// Purge serves the Purge RPC.
func (s api) Purge(ctx context.Context, m *hourglassv1.PurgeRequest) (*hourglassv1.PurgeResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	var n int64
	var err error
	switch m.State {
	case hourglassv1.MessageState_MESSAGE_STATE_PENDING:
		n, err = s.purgePending(ctx, m.Topic)
	case hourglassv1.MessageState_MESSAGE_STATE_DUE, hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED:
		topic := m.Topic
		if m.State == hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED {
			topic = dlqOf(topic)
		}
		if c := s.opts.Cluster; c != nil {
			n, err = c.PurgeTopic(ctx, topic)
		} else {
			n, err = s.q.PurgeDue(ctx, topic)
		}
	default:
		return nil, invalid("state %s: Purge removes PENDING, DUE or DEAD_LETTERED messages", m.State)
	}
	if err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.PurgeResponse{Purged: n}, nil
}

// purgePending cancels every pending message of topic, a page of List at
// a time, and returns how many it cancelled. In cluster mode the pages
// come from every partition's owner and each Cancel goes to its owner.
func (s *Server) purgePending(ctx context.Context, topic string) (int64, error) {
	req := engine.ListRequest{Topic: topic, Limit: engine.MaxListLimit}
	var page func() ([]engine.Found, bool, error)
	cancel := s.eng.Cancel
	if c := s.opts.Cluster; c != nil {
		token := ""
		page = func() ([]engine.Found, bool, error) {
			found, next, err := c.List(ctx, req, token, false)
			token = next
			return found, next == "", err
		}
	} else {
		eng := s.eng.(engineCore).Engine
		page = func() ([]engine.Found, bool, error) {
			found, err := eng.List(ctx, req)
			if len(found) > 0 {
				req.After = found[len(found)-1].ID
			}
			return found, len(found) < req.Limit, err
		}
	}
	var n int64
	for {
		found, last, err := page()
		if err != nil {
			return n, err
		}
		for _, f := range found {
			res, err := cancel(ctx, f.ID, false)
			if err != nil {
				return n, err
			}
			if res == engine.Cancelled {
				n++
			}
		}
		if last {
			return n, nil
		}
	}
}

// dlqOf is topic's dead-letter topic (a dead-letter topic is its own).
func dlqOf(topic string) string {
	if _, ok := cutSuffix(topic, queue.DLQSuffix); ok {
		return topic
	}
	return topic + queue.DLQSuffix
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// DeleteTopic serves the DeleteTopic RPC.
func (s api) DeleteTopic(ctx context.Context, m *hourglassv1.DeleteTopicRequest) (*hourglassv1.DeleteTopicResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	cancelled, err := s.purgePending(ctx, m.Topic)
	if err != nil {
		return nil, serverError(err)
	}
	if c := s.opts.Cluster; c != nil {
		removed, _, err := c.DeleteQueueTopic(ctx, m.Topic)
		if err != nil {
			return nil, serverError(err)
		}
		return &hourglassv1.DeleteTopicResponse{Cancelled: cancelled, Removed: removed}, nil
	}
	eng, err := s.localEngine("DeleteTopic")
	if err != nil {
		return nil, err
	}
	removed, _, err := s.q.DeleteTopic(ctx, m.Topic)
	if err != nil {
		return nil, serverError(err)
	}
	if _, set, err := eng.Setting(policyTable, m.Topic); err == nil && set {
		if err := eng.Control(ctx, message.Control{Kind: message.ControlPolicy, Name: []byte(m.Topic)}); err != nil {
			return nil, serverError(err)
		}
	}
	return &hourglassv1.DeleteTopicResponse{Cancelled: cancelled, Removed: removed}, nil
}

// Topics serves the Topics RPC: the queue's topics, those scheduled to since the
// server started, and those with a policy.
func (s api) Topics(ctx context.Context, _ *hourglassv1.TopicsRequest) (*hourglassv1.TopicsResponse, error) {
	if c := s.opts.Cluster; c != nil {
		return s.clusterTopics(ctx, c)
	}
	stats := s.q.Stats()
	names := map[string]bool{}
	// The queue's topics and those scheduled to since the server started.
	for _, t := range s.metrics.topics(stats) {
		if _, dlq := cutSuffix(t.name, queue.DLQSuffix); !dlq {
			names[t.name] = true
		}
	}
	if eng, err := s.localEngine("Topics"); err == nil {
		set, err := eng.Settings(policyTable)
		if err != nil {
			return nil, serverError(err)
		}
		for t := range set {
			names[t] = true
		}
	}
	out := &hourglassv1.TopicsResponse{}
	now := time.Now()
	for _, t := range slices.Sorted(maps.Keys(names)) {
		st, dl := stats[t], stats[t+queue.DLQSuffix]
		ti := &hourglassv1.TopicInfo{Topic: t, Due: st.Backlog, Leased: int64(st.Leased), DeadLettered: dl.Backlog + int64(dl.Leased),
			Policy: toProtoPolicy(s.q.Policy(t))}
		if st.OldestReady > 0 {
			ti.OldestDueAgeSeconds = max(0, now.Sub(time.UnixMilli(st.OldestReady)).Seconds())
		}
		ti.FlowHeld, ti.FlowKeysHeld = st.FlowHeld, int64(st.FlowKeysHeld)
		for _, b := range s.q.FlowBacklogs(t, MaxFlowBacklogs) {
			ti.FlowBacklogs = append(ti.FlowBacklogs, &hourglassv1.FlowBacklog{FlowKey: b.Key, Due: b.Due, Leased: int64(b.Leased), HeldBy: b.HeldBy})
		}
		out.Topics = append(out.Topics, ti)
	}
	return out, nil
}

// deadLetterInfo is what a dead letter's headers say of why it died, or
// nil for a message that is not one.
func deadLetterInfo(hs []message.Header, attempts uint32) *hourglassv1.DeadLetter {
	reason := message.HeaderValue(hs, queue.DeadLetterReasonHeader)
	if reason == "" {
		return nil
	}
	dl := &hourglassv1.DeadLetter{OriginTopic: message.HeaderValue(hs, queue.DeadLetterOriginHeader), Reason: reason, Attempts: attempts,
		LastError: message.HeaderValue(hs, queue.DeadLetterErrorHeader)}
	if ms, err := strconv.ParseInt(message.HeaderValue(hs, queue.DeadLetterAtHeader), 10, 64); err == nil {
		dl.At = timestamppb.New(time.UnixMilli(ms))
	}
	return dl
}

// MaxFlowBacklogs bounds the flow keys Topics shows per topic: the
// largest backlogs.
const MaxFlowBacklogs = 20

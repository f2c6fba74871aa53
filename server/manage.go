package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// localEngine returns the local engine, or Unimplemented naming the RPC
// in cluster mode.
func (s *Server) localEngine(rpc string) (*engine.Engine, error) {
	if ec, ok := s.eng.(engineCore); ok {
		return ec.Engine, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "%s is not yet available in cluster mode: ask a node's data directory with `hourglass inspect`", rpc)
}

// Get serves the Get RPC: what carries the message now (the engine's
// Current: the asked ID, or the latest retry, reschedule or redrive of
// it), as the engine knows it from the schedule segment and its dispatch
// log; for one delivered to the built-in queue, the queue says whether it
// waits, is leased, was acked or dead-lettered.
func (s api) Get(ctx context.Context, m *hourglassv1.GetRequest) (*hourglassv1.GetResponse, error) {
	id, found, err := s.target(ctx, "Get", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	if !found {
		return &hourglassv1.GetResponse{State: hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND}, nil
	}
	if c := s.opts.Cluster; c != nil {
		return s.clusterGet(ctx, c, id)
	}
	eng := s.eng.(engineCore).Engine
	f, err := eng.Current(ctx, id)
	if err != nil {
		return nil, serverError(err)
	}
	out := &hourglassv1.GetResponse{State: engineState(f.State)}
	if f.State == engine.StateNotFound {
		return s.heldAfterRetirement(ctx, eng, id, f.ID)
	}
	out.Message = protoMessage(f.ID, &f.Message)
	out.FlowKey = message.HeaderValue(f.Message.Headers, message.FlowKeyHeader)
	if f.ID != id {
		out.RescheduledTo = f.ID.String()
	}
	if f.State == engine.StatePending || f.State == engine.StateDelivering {
		s.frozenDue(out.Message, &f.Message, f.ID)
	}
	delivering := f.State == engine.StateDelivering
	if !delivering && f.State != engine.StateDelivered || s.q == nil || s.opts.ExternalSink != "" {
		return out, nil
	}
	topic := string(f.Message.Topic)
	l, err := s.q.Lookup(ctx, topic, f.ID)
	if err != nil {
		return nil, serverError(err)
	}
	if delivering && l.Held != queue.Waiting && l.Held != queue.Leased {
		// On its way: the queue holds it once its write is durable (and
		// a consumer may hold it before the engine's done-record is).
		return out, nil
	}
	if l.Held == queue.NotHeld || l.Held == queue.Acked {
		// Dead-lettered by the queue: the dead-letter topic holds it
		// under the same ID.
		dlq := topic + queue.DLQSuffix
		if !strings.HasSuffix(topic, queue.DLQSuffix) && queue.ValidateTopic(dlq) == nil {
			d, err := s.q.Lookup(ctx, dlq, f.ID)
			if err != nil {
				return nil, serverError(err)
			}
			if d.Held != queue.NotHeld {
				out.State = hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED
				out.DeadLetterTopic = dlq
				// The dead-letter topic counts the attempts made.
				out.Message.DeadLetter = deadLetterInfo(d.Message.Headers, d.Message.Attempt)
				return out, nil
			}
		}
	}
	switch l.Held {
	case queue.Waiting:
		s.frozenDue(out.Message, &f.Message, f.ID)
		out.State = hourglassv1.MessageState_MESSAGE_STATE_DUE
		out.QueueAttempt = l.Attempt
		out.FlowWait = l.FlowWait
	case queue.Leased:
		out.State = hourglassv1.MessageState_MESSAGE_STATE_LEASED
		out.QueueAttempt = l.Attempt
		out.LeaseExpiresAt = timestamppb.New(l.LeaseUntil)
	default:
		// Acked, or no longer in the queue's retained log: the engine's
		// done-record says the queue took it, and the queue deletes only
		// what is acked.
		out.State = hourglassv1.MessageState_MESSAGE_STATE_ACKED
	}
	return out, nil
}

// heldAfterRetirement answers Get for a message whose schedule segment is
// gone (its bucket was retired once every entry was done), cur the ID that
// carries it: the built-in queue may still hold it, or have it as acked
// in its retained log, under one of the topics the bucket delivered to
// (engine.DeliveredTo) or its dead-letter topic. Anything else is not
// found: a cancelled message of a retired bucket, or an acked one the
// queue's log no longer retains, is not told apart from one never
// scheduled.
func (s *Server) heldAfterRetirement(ctx context.Context, eng *engine.Engine, asked, cur message.ID) (*hourglassv1.GetResponse, error) {
	out := &hourglassv1.GetResponse{State: hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND}
	t, dlq, l, err := s.retiredInQueue(ctx, eng, cur, true)
	if err != nil || t == "" {
		return out, err
	}
	out.Message = protoMessage(cur, &l.Message)
	if cur != asked {
		out.RescheduledTo = cur.String()
	}
	switch {
	case dlq:
		out.State, out.DeadLetterTopic = hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED, t
	case l.Held == queue.Acked:
		out.State = hourglassv1.MessageState_MESSAGE_STATE_ACKED
	case l.Held == queue.Leased:
		out.State, out.QueueAttempt = hourglassv1.MessageState_MESSAGE_STATE_LEASED, l.Attempt
		out.LeaseExpiresAt = timestamppb.New(l.LeaseUntil)
	default:
		out.State, out.QueueAttempt = hourglassv1.MessageState_MESSAGE_STATE_DUE, l.Attempt
	}
	return out, nil
}

// retiredInQueue looks for cur, a message of a retired bucket, in the
// built-in queue: under one of the topics the bucket delivered to
// (engine.DeliveredTo) or its dead-letter topic (dlq). With acked, a
// message the queue's retained log has as acked counts too. It returns
// the topic that holds it, "" when none does.
func (s *Server) retiredInQueue(ctx context.Context, eng *engine.Engine, cur message.ID, acked bool) (topic string, dlq bool, l queue.Lookup, err error) {
	if s.q == nil || s.opts.ExternalSink != "" {
		return "", false, l, nil
	}
	topics, err := eng.DeliveredTo(ctx, cur)
	if err != nil {
		return "", false, l, serverError(err)
	}
	held := func(l queue.Lookup) bool {
		return l.Held == queue.Waiting || l.Held == queue.Leased || acked && l.Held == queue.Acked
	}
	for _, topic := range topics {
		// The topic's log has a dead-lettered message as acked: its
		// dead-letter topic is asked before that answer is taken.
		l, err := s.q.Lookup(ctx, topic, cur)
		if err != nil {
			return "", false, l, serverError(err)
		}
		if l.Held == queue.Waiting || l.Held == queue.Leased {
			return topic, false, l, nil
		}
		if dlq := topic + queue.DLQSuffix; !strings.HasSuffix(topic, queue.DLQSuffix) && queue.ValidateTopic(dlq) == nil {
			d, err := s.q.Lookup(ctx, dlq, cur)
			if err != nil {
				return "", false, d, serverError(err)
			}
			if held(d) {
				return dlq, true, d, nil
			}
		}
		if held(l) {
			return topic, false, l, nil
		}
	}
	return "", false, l, nil
}

// clusterGet serves Get on a cluster node: the owner of the message's
// partition says what it knows (the delivery stream's consumers are not
// asked whether a delivered message was received or acked).
func (s *Server) clusterGet(ctx context.Context, c Cluster, id message.ID) (*hourglassv1.GetResponse, error) {
	forwarded := infoOf(ctx).forwarded
	f, moved, err := c.Get(ctx, id, forwarded)
	if err != nil {
		return nil, serverError(err)
	}
	// As on one node, what carries the message now: follow its
	// replacements (each in the same partition), as many as a keyed
	// retry follows.
	cur := id
	for range maxReschedules {
		if moved.IsZero() {
			break
		}
		nf, nmoved, err := c.Get(ctx, moved, forwarded)
		if err != nil {
			return nil, serverError(err)
		}
		if nf.State == engine.StateNotFound {
			break
		}
		cur, f, moved = moved, nf, nmoved
	}
	out := &hourglassv1.GetResponse{State: engineState(f.State)}
	if f.State == engine.StateNotFound {
		return out, nil
	}
	if len(f.Message.Topic) > 0 {
		out.Message = protoMessage(cur, &f.Message)
	}
	switch {
	case !moved.IsZero():
		out.RescheduledTo = moved.String()
	case cur != id:
		out.RescheduledTo = cur.String()
	}
	return out, nil
}

// maxReschedules is how many replacements clusterGet follows.
const maxReschedules = 16

// engineState maps the engine's state to the API's.
func engineState(st engine.State) hourglassv1.MessageState {
	switch st {
	case engine.StatePending:
		return hourglassv1.MessageState_MESSAGE_STATE_PENDING
	case engine.StateDelivering:
		return hourglassv1.MessageState_MESSAGE_STATE_DELIVERING
	case engine.StateDelivered:
		return hourglassv1.MessageState_MESSAGE_STATE_DELIVERED
	case engine.StateCancelled:
		return hourglassv1.MessageState_MESSAGE_STATE_CANCELLED
	case engine.StateDeadLettered:
		return hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED
	case engine.StateRescheduled:
		return hourglassv1.MessageState_MESSAGE_STATE_RESCHEDULED
	}
	return hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND
}

// protoMessage is a stored message as the API shows it.
func protoMessage(id message.ID, m *message.Message) *hourglassv1.Message {
	pm := &hourglassv1.Message{
		Id: id.String(), Topic: string(m.Topic), Body: m.Body,
		DeliverAt: timestamppb.New(time.UnixMilli(m.DeliverAt)), Attempt: m.Attempt,
	}
	if !m.Origin.IsZero() {
		pm.OriginId = m.Origin.String()
	}
	pm.DeadLetter = deadLetterInfo(m.Headers, m.Attempt)
	for _, h := range m.Headers {
		pm.Headers = append(pm.Headers, &hourglassv1.Header{Key: strings.ToValidUTF8(string(h.Key), "\uFFFD"), Value: strings.ToValidUTF8(string(h.Value), "\uFFFD")})
	}
	return pm
}

// List serves the List RPC: pending messages of a topic from the schedule
// segments, a page at a time.
func (s api) List(ctx context.Context, m *hourglassv1.ListRequest) (*hourglassv1.ListResponse, error) {
	switch m.State {
	case hourglassv1.MessageState_MESSAGE_STATE_DUE, hourglassv1.MessageState_MESSAGE_STATE_LEASED, hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED:
		return s.listQueue(ctx, m)
	}
	req, err := listRequest(m)
	if err != nil {
		return nil, err
	}
	var found []engine.Found
	next := ""
	if c := s.opts.Cluster; c != nil {
		// The cluster's token is its own (a position and the layout).
		found, next, err = c.List(ctx, req, m.PageToken, infoOf(ctx).forwarded)
	} else {
		if req.After, err = pageAfter(m.PageToken); err != nil {
			return nil, err
		}
		found, err = s.eng.(engineCore).List(ctx, req)
		if len(found) == req.Limit {
			next = found[len(found)-1].ID.String()
		}
	}
	if err != nil {
		return nil, serverError(err)
	}
	out := &hourglassv1.ListResponse{Messages: make([]*hourglassv1.Message, len(found)), NextPageToken: next}
	for i := range found {
		out.Messages[i] = protoMessage(found[i].ID, &found[i].Message)
		s.frozenDue(out.Messages[i], &found[i].Message, found[i].ID)
	}
	return out, nil
}

// pageAfter is the message a single node's page token names.
func pageAfter(token string) (message.ID, error) {
	if token == "" {
		return message.ID{}, nil
	}
	id, err := message.ParseID(token)
	if err != nil {
		return id, invalid("page_token %q: not a token List returned (want the next_page_token of the previous page, or empty for the first page)", token)
	}
	return id, nil
}

// listRequest checks a ListRequest and turns it into the engine's, all
// but its page token (a single node's and a cluster's differ).
func listRequest(m *hourglassv1.ListRequest) (engine.ListRequest, error) {
	var req engine.ListRequest
	if err := checkTopic("", m.Topic); err != nil {
		return req, err
	}
	switch m.State {
	case hourglassv1.MessageState_MESSAGE_STATE_UNSPECIFIED, hourglassv1.MessageState_MESSAGE_STATE_PENDING:
	default:
		return req, invalid("state %s: List lists PENDING (the default), DUE, LEASED or DEAD_LETTERED messages", m.State)
	}
	if m.PageSize < 0 || m.PageSize > engine.MaxListLimit {
		return req, invalid("page_size %d: from 1 to %d; 0 means %d", m.PageSize, engine.MaxListLimit, engine.DefaultListLimit)
	}
	req.Topic, req.Limit = m.Topic, int(m.PageSize)
	if req.Limit == 0 {
		req.Limit = engine.DefaultListLimit
	}
	if m.From != nil {
		if err := m.From.CheckValid(); err != nil {
			return req, invalid("from: %v", err)
		}
		req.From = max(0, m.From.AsTime().UnixMilli())
	}
	if m.To != nil {
		if err := m.To.CheckValid(); err != nil {
			return req, invalid("to: %v", err)
		}
		req.To = m.To.AsTime().UnixMilli()
		if req.To <= 0 {
			return req, invalid("to %s: must be after 1970-01-01T00:00:00Z (leave it unset for no end)", m.To.AsTime().Format(time.RFC3339Nano))
		}
		if m.From != nil && m.From.AsTime().After(m.To.AsTime()) {
			return req, invalid("from %s is after to %s: from must not be after to",
				m.From.AsTime().UTC().Format(time.RFC3339Nano), m.To.AsTime().UTC().Format(time.RFC3339Nano))
		}
	}
	return req, nil
}

// listQueue serves List of the built-in queue's states: DUE and LEASED
// messages of the topic, DEAD_LETTERED ones of its dead-letter topic.
func (s *Server) listQueue(ctx context.Context, m *hourglassv1.ListRequest) (*hourglassv1.ListResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	c := s.opts.Cluster
	if c != nil && m.State == hourglassv1.MessageState_MESSAGE_STATE_LEASED {
		return nil, status.Error(codes.FailedPrecondition, "List of LEASED messages is not served in cluster mode: a JetStream consumer tells how many deliveries wait for an ack, not which; Topics counts them (leased)")
	}
	if m.PageSize < 0 || m.PageSize > queue.MaxListPage {
		return nil, invalid("page_size %d: from 1 to %d; 0 means %d", m.PageSize, queue.MaxListPage, engine.DefaultListLimit)
	}
	if m.From != nil || m.To != nil {
		return nil, invalid("from and to select delivery times of PENDING messages; the queue lists %s messages in the order it holds them", m.State)
	}
	n := int(m.PageSize)
	if n == 0 {
		n = engine.DefaultListLimit
	}
	topic, st := m.Topic, queue.ListDue
	switch m.State {
	case hourglassv1.MessageState_MESSAGE_STATE_LEASED:
		st = queue.ListLeased
	case hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED:
		topic = dlqOf(m.Topic)
	}
	var msgs []queue.Message
	var next string
	var err error
	if c != nil {
		msgs, next, err = c.ListQueue(ctx, topic, m.PageToken, n)
	} else {
		msgs, next, err = s.q.List(ctx, topic, st, m.PageToken, n)
	}
	if errors.Is(err, queue.ErrInvalid) {
		return nil, invalid("%s", trimPkg(err.Error()))
	}
	if err != nil {
		return nil, serverError(err)
	}
	out := &hourglassv1.ListResponse{Messages: toMessages(msgs), NextPageToken: next}
	for i, pm := range out.Messages {
		pm.Receipt = ""
		if st != queue.ListLeased {
			pm.LeaseExpiresAt = nil
		}
		if st == queue.ListDue {
			s.topicFrozenDue(pm, topic, msgs[i].ID)
		}
	}
	return out, nil
}

// frozenDue sets pm's due_at and frozen (and frozen_remaining_ms) for the
// stored message m of id when it is frozen on its own (messageFrozen) or
// its topic's frozen pauses make it due after its deliverAt
// (topicFrozenDue).
func (s *Server) frozenDue(pm *hourglassv1.Message, m *message.Message, id message.ID) {
	if !messageFrozen(pm, m.Headers, s.eng.Now()) {
		s.topicFrozenDue(pm, string(m.Topic), id)
	}
}

// topicFrozenDue sets pm's due_at and frozen when its topic's frozen
// pauses make the message id due after its deliverAt (queue.Freezes.Due).
func (s *Server) topicFrozenDue(pm *hourglassv1.Message, topic string, id message.ID) {
	if s.q == nil || pm == nil {
		return
	}
	due, frozen := s.q.Due(topic, id)
	if due.UnixMilli() > id.DeliverAt {
		pm.DueAt, pm.Frozen = timestamppb.New(due), frozen
	}
}

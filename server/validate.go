package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// invalid returns an InvalidArgument error with a formatted message.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// field prefixes a message with the field it is about: "messages[3]: ".
func field(prefix, msg string) string {
	if prefix == "" {
		return msg
	}
	return prefix + ": " + msg
}

// trimPkg drops a Go package prefix ("queue: ") from an error text meant
// for a client.
func trimPkg(s string) string {
	for _, p := range []string{"queue: ", "message: ", "engine: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// checkTopic applies the queue's topic rule.
func checkTopic(prefix, topic string) error {
	if err := queue.ValidateTopic(topic); err != nil {
		return invalid("%s", field(prefix, "topic: "+trimPkg(err.Error())))
	}
	return nil
}

// admit lets a Schedule's topic into the built-in queue, which holds at
// most --max-topics topics: a message accepted is never refused when due.
func (s *Server) admit(prefix, topic string) error {
	if s.q == nil || s.opts.ExternalSink != "" {
		return nil
	}
	if err := s.q.Admit(topic); err != nil {
		if errors.Is(err, queue.ErrTooManyTopics) {
			return status.Errorf(codes.ResourceExhausted, "%s", field(prefix, trimPkg(err.Error())+
				" set by the server's --max-topics: schedule to an existing topic, or restart the server with a higher --max-topics"))
		}
		return serverError(err)
	}
	return nil
}

// parseID parses a message ID field.
func parseID(name, s string) (message.ID, error) {
	if s == "" {
		return message.ID{}, invalid("%s is empty: want the 32 hex digits Schedule returned", name)
	}
	id, err := message.ParseID(s)
	if err != nil {
		return message.ID{}, invalid("%s: %s", name, trimPkg(err.Error()))
	}
	return id, nil
}

// levelsText renders a delay level table for error messages.
func levelsText(levels []time.Duration) string {
	var b strings.Builder
	for i, d := range levels {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=%s", i+1, units.FormatDuration(d))
	}
	return b.String()
}

// requests checks the messages of a ScheduleBatch and appends their
// engine requests to dst. A topic is checked once for a run of messages
// with the same one. The error names the message it is about.
func (s *Server) requests(dst []engine.Request, msgs []*hourglassv1.ScheduleRequest, now time.Time) ([]engine.Request, error) {
	for i, m := range msgs {
		topicOK := i > 0 && m != nil && msgs[i-1] != nil && m.Topic == msgs[i-1].Topic
		dst = append(dst, engine.Request{})
		if cerr := s.request("", m, now, topicOK, &dst[len(dst)-1]); cerr != nil {
			// Check it again to name it in the error: formatting the
			// prefix for every message costs more than the check.
			var r engine.Request
			return dst[:len(dst)-1], s.request(fmt.Sprintf("messages[%d]", i), m, now, false, &r)
		}
	}
	return dst, nil
}

// request checks one ScheduleRequest and turns it into an engine request.
// now is the server's clock, for the max-delay check of absolute times
// (the engine checks again against its own clock). topicOK says that
// m.Topic passed checkTopic already. It fills req, which must be zero.
func (s *Server) request(prefix string, m *hourglassv1.ScheduleRequest, now time.Time, topicOK bool, req *engine.Request) error {
	if m == nil {
		return invalid("%s", field(prefix, "message is null"))
	}
	if !topicOK {
		if err := checkTopic(prefix, m.Topic); err != nil {
			return err
		}
	}
	if len(m.Body) > s.opts.MaxBody {
		return invalid("%s", field(prefix, fmt.Sprintf("body is %d bytes; at most %d (%s, the server's --max-body)",
			len(m.Body), s.opts.MaxBody, units.FormatSize(int64(s.opts.MaxBody)))))
	}
	if len(m.Headers) > message.MaxHeaders {
		return invalid("%s", field(prefix, fmt.Sprintf("%d headers; at most %d", len(m.Headers), message.MaxHeaders)))
	}
	if len(m.IdempotencyKey) > engine.MaxIdempotencyKey {
		return invalid("%s", field(prefix, fmt.Sprintf("idempotency_key is %d bytes; at most %d", len(m.IdempotencyKey), engine.MaxIdempotencyKey)))
	}
	if !utf8.ValidString(m.IdempotencyKey) {
		return invalid("%s", field(prefix, "idempotency_key is not valid UTF-8; a key is text"))
	}
	if len(m.FlowKey) > message.MaxFlowKey {
		return invalid("%s", field(prefix, fmt.Sprintf("flow_key is %d bytes; at most %d", len(m.FlowKey), message.MaxFlowKey)))
	}
	if !utf8.ValidString(m.FlowKey) {
		return invalid("%s", field(prefix, "flow_key is not valid UTF-8; a key is text"))
	}
	req.Topic, req.Body, req.IdempotencyKey, req.FlowKey = m.Topic, m.Body, m.IdempotencyKey, m.FlowKey
	hs, err := checkHeaders(prefix, m.Headers)
	if err != nil {
		return err
	}
	req.Headers = hs
	maxDelay := s.opts.MaxDelay
	switch w := m.When.(type) {
	case nil:
		// Due now.
	case *hourglassv1.ScheduleRequest_DelayMs:
		if w.DelayMs < 0 {
			return invalid("%s", field(prefix, fmt.Sprintf("delay_ms %d is negative; 0 or more", w.DelayMs)))
		}
		if w.DelayMs > maxDelay.Milliseconds() {
			return invalid("%s", field(prefix, fmt.Sprintf("delay_ms %d (%s) is beyond the maximum delay %s (%d ms, the server's --max-delay)",
				w.DelayMs, units.FormatDuration(time.Duration(w.DelayMs)*time.Millisecond), units.FormatDuration(maxDelay), maxDelay.Milliseconds())))
		}
		req.Delay = time.Duration(w.DelayMs) * time.Millisecond
	case *hourglassv1.ScheduleRequest_DeliverAt:
		if err := w.DeliverAt.CheckValid(); err != nil {
			return invalid("%s", field(prefix, "deliver_at is not a valid time: "+err.Error()+"; want 0001-01-01 to 9999-12-31 UTC"))
		}
		at := w.DeliverAt.AsTime()
		if at.After(now.Add(maxDelay)) {
			return invalid("%s", field(prefix, fmt.Sprintf("deliver_at %s is %s ahead of the server's clock (%s); the maximum delay is %s (the server's --max-delay)",
				at.UTC().Format(time.RFC3339Nano), units.FormatDuration(at.Sub(now).Round(time.Second)), now.UTC().Format(time.RFC3339), units.FormatDuration(maxDelay))))
		}
		if at.IsZero() {
			at = time.UnixMilli(0) // the engine reads a zero At as "use Delay"
		}
		req.At = at
	case *hourglassv1.ScheduleRequest_DelayLevel:
		n := len(s.opts.DelayLevels)
		if w.DelayLevel < 1 || int(w.DelayLevel) > n {
			return invalid("%s", field(prefix, fmt.Sprintf("delay_level %d is unknown: levels are 1 to %d (%s; the server's --delay-levels)",
				w.DelayLevel, n, s.levelsText)))
		}
		req.Delay = s.opts.DelayLevels[w.DelayLevel-1]
	case *hourglassv1.ScheduleRequest_Working:
		at, err := s.workingTime(prefix, w.Working, now)
		if err != nil {
			return err
		}
		req.At = at
	default:
		return invalid("%s", field(prefix, "unknown kind of delivery time"))
	}
	switch x := m.Expiry.(type) {
	case *hourglassv1.ScheduleRequest_ExpireAt:
		if err := x.ExpireAt.CheckValid(); err != nil {
			return invalid("%s", field(prefix, "expire_at is not a valid time: "+err.Error()+"; want 0001-01-01 to 9999-12-31 UTC"))
		}
		req.ExpireAt = x.ExpireAt.AsTime()
		if req.ExpireAt.IsZero() {
			req.ExpireAt = time.UnixMilli(0) // the engine reads a zero ExpireAt as none
		}
	case *hourglassv1.ScheduleRequest_TtlMs:
		if x.TtlMs < 1 || x.TtlMs > maxDelay.Milliseconds() {
			return invalid("%s", field(prefix, fmt.Sprintf("ttl_ms %d: from 1 to %d (%s, the server's --max-delay), milliseconds after the delivery time",
				x.TtlMs, maxDelay.Milliseconds(), units.FormatDuration(maxDelay))))
		}
		req.TTL = time.Duration(x.TtlMs) * time.Millisecond
	}
	if n := req.AddedHeaders(); n > 0 && len(m.Headers) > message.MaxHeaders-n {
		return invalid("%s", field(prefix, fmt.Sprintf("%d headers; at most %d of one's own with these fields: the server stores an idempotency_key as two headers, a flow_key and an expiry as one each, of %d in all",
			len(m.Headers), message.MaxHeaders-n, message.MaxHeaders)))
	}
	if !topicOK {
		// Last: a message refused for another reason admits no topic.
		return s.admit(prefix, m.Topic)
	}
	return nil
}

// checkHeaders checks a request's headers (their number is checked
// already) and returns them as the engine's; nil for none.
func checkHeaders(prefix string, in []*hourglassv1.Header) ([]message.Header, error) {
	if len(in) == 0 {
		return nil, nil
	}
	hs := make([]message.Header, len(in))
	size := 0
	for i, h := range in {
		if h == nil || h.Key == "" {
			return nil, invalid("%s", field(prefix, fmt.Sprintf("headers[%d] has an empty key; a header needs a key", i)))
		}
		if !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return nil, invalid("%s", field(prefix, fmt.Sprintf("headers[%d] is not valid UTF-8; keys and values are text", i)))
		}
		if message.Reserved(h.Key) {
			return nil, invalid("%s", field(prefix, reservedText(i, h.Key)))
		}
		size += len(h.Key) + len(h.Value)
		hs[i] = message.Header{Key: []byte(h.Key), Value: []byte(h.Value)}
	}
	if size > MaxHeaderBytes {
		return nil, invalid("%s", field(prefix, fmt.Sprintf("headers hold %d bytes of keys and values; at most %d", size, MaxHeaderBytes)))
	}
	return hs, nil
}

// reservedText says why headers[i], named key, is refused: the server
// sets the headers of its prefix itself, from the request's own fields.
func reservedText(i int, key string) string {
	why := fmt.Sprintf("headers[%d] %q: the prefix %q is reserved for the headers the server sets itself "+
		"(idempotency keys, flow keys, dead letters, recurring schedules); use another name", i, key, message.ReservedPrefix)
	switch {
	case strings.EqualFold(key, engine.IdempotencyHeader):
		why += ", or set idempotency_key"
	case strings.EqualFold(key, message.FlowKeyHeader):
		why += ", or set flow_key"
	}
	return why
}

// scheduleError turns an engine error into an API error.
func scheduleError(err error) error {
	switch {
	case errors.Is(err, engine.ErrTooFar), errors.Is(err, engine.ErrInvalid):
		return invalid("%s", trimPkg(err.Error()))
	}
	return serverError(err)
}

// serverError classifies an error the caller did not cause, so that a
// client can tell what to do: retry later (Unavailable,
// ResourceExhausted), fix the request (InvalidArgument), or look at the
// state (FailedPrecondition). Internal is left for what nobody can act on.
func serverError(err error) error {
	if _, ok := status.FromError(err); ok && err != nil {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, engine.ErrClosed), errors.Is(err, queue.ErrClosed):
		return status.Error(codes.Unavailable, "the server is shutting down: retry on another node or after it restarts")
	case errors.Is(err, engine.ErrTooFar), errors.Is(err, engine.ErrInvalid),
		errors.Is(err, queue.ErrInvalid), errors.Is(err, queue.ErrInvalidTopic):
		return invalid("%s", trimPkg(err.Error()))
	case errors.Is(err, queue.ErrNotLeased), errors.Is(err, queue.ErrExpired):
		return status.Error(codes.FailedPrecondition, trimPkg(err.Error()))
	}
	if code, why := resourceError(err); code != codes.OK {
		return status.Error(code, why+": "+err.Error())
	}
	if errors.Is(err, engine.ErrStalled) {
		return status.Error(codes.Unavailable, "the server cannot deliver what it is given now, retry later: "+err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// resourceError classifies the operating system's errors that go away by
// themselves or by an operator's hand (a full disk, a descriptor limit, a
// failing device), which a client should retry later.
func resourceError(err error) (codes.Code, string) {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return codes.ResourceExhausted, "the server's disk is full; retry once space is freed"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return codes.ResourceExhausted, "the server has too many open files; retry later"
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.EROFS):
		return codes.Unavailable, "the server's storage is failing; retry later or on another node"
	}
	return codes.OK, ""
}

package wirecodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// The encoders below write what proto.Marshal writes (the fields outside
// a oneof in number order, then the oneof's member, which is written even
// when zero; other proto3 zero values left out) for
// messages without unknown fields and with valid UTF-8 strings; for any
// other message they report false and proto.Marshal does the work (and
// words the error). TestEncodeMatchesProto and FuzzEncode hold them to
// proto.Marshal byte for byte.

// Field numbers of ScheduleRequest and Header not named in request.go.
const (
	fieldHeaders     = 3
	fieldDeliverAtRq = 5
	fieldHeaderKey   = 1
	fieldHeaderValue = 2
)

func sizeBytes(n int) int { return protowire.SizeTag(1) + protowire.SizeVarint(uint64(n)) + n }

// timestampSize is the encoded size of a Timestamp's fields.
func timestampSize(ts *timestamppb.Timestamp) int {
	n := 0
	if ts.Seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(ts.Seconds))
	}
	if ts.Nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(ts.Nanos)))
	}
	return n
}

func appendTimestamp(b []byte, ts *timestamppb.Timestamp) []byte {
	if ts.Seconds != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldSeconds, protowire.VarintType), uint64(ts.Seconds))
	}
	if ts.Nanos != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldNanos, protowire.VarintType), uint64(int64(ts.Nanos)))
	}
	return b
}

func plainTimestamp(ts *timestamppb.Timestamp) bool {
	return ts != nil && len(ts.ProtoReflect().GetUnknown()) == 0
}

// resultSize is the encoded size of r's fields, or -1 if proto.Marshal
// must encode it.
func resultSize(r *hourglassv1.ScheduleResponse) int {
	if r == nil || len(r.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(r.Id) {
		return -1
	}
	n := 0
	if r.Id != "" {
		n += sizeBytes(len(r.Id))
	}
	if r.DeliverAt != nil {
		if !plainTimestamp(r.DeliverAt) {
			return -1
		}
		n += sizeBytes(timestampSize(r.DeliverAt))
	}
	return n
}

// appendBatchResponse appends the encoding of m to b.
func appendBatchResponse(b []byte, m *hourglassv1.ScheduleBatchResponse) ([]byte, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	var stack [256]int
	sizes := stack[:0]
	total := 0
	for _, r := range m.Results {
		n := resultSize(r)
		if n < 0 {
			return nil, false
		}
		sizes = append(sizes, n)
		total += sizeBytes(n)
	}
	b = grow(b, total)
	for i, r := range m.Results {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldResults, protowire.BytesType), uint64(sizes[i]))
		if r.Id != "" {
			b = protowire.AppendString(protowire.AppendTag(b, fieldID, protowire.BytesType), r.Id)
		}
		if ts := r.DeliverAt; ts != nil {
			b = protowire.AppendVarint(protowire.AppendTag(b, fieldDeliverAt, protowire.BytesType), uint64(timestampSize(ts)))
			b = appendTimestamp(b, ts)
		}
	}
	return b, true
}

// requestSize is the encoded size of r's fields, or -1 if proto.Marshal
// must encode it.
func requestSize(r *hourglassv1.ScheduleRequest) int {
	if r == nil || len(r.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(r.Topic) || !utf8.ValidString(r.IdempotencyKey) {
		return -1
	}
	n := 0
	if r.Topic != "" {
		n += sizeBytes(len(r.Topic))
	}
	if len(r.Body) > 0 {
		n += sizeBytes(len(r.Body))
	}
	for _, h := range r.Headers {
		if h == nil || len(h.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return -1
		}
		n += sizeBytes(headerSize(h))
	}
	switch w := r.When.(type) {
	case nil:
	case *hourglassv1.ScheduleRequest_DelayMs:
		n += 1 + protowire.SizeVarint(uint64(w.DelayMs))
	case *hourglassv1.ScheduleRequest_DelayLevel:
		n += 1 + protowire.SizeVarint(uint64(int64(w.DelayLevel)))
	case *hourglassv1.ScheduleRequest_DeliverAt:
		if !plainTimestamp(w.DeliverAt) {
			return -1
		}
		n += sizeBytes(timestampSize(w.DeliverAt))
	default:
		return -1
	}
	if r.IdempotencyKey != "" {
		n += sizeBytes(len(r.IdempotencyKey))
	}
	return n
}

func headerSize(h *hourglassv1.Header) int {
	n := 0
	if h.Key != "" {
		n += sizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += sizeBytes(len(h.Value))
	}
	return n
}

// AppendBatchRequest appends the encoding of m to b, the bytes
// proto.Marshal writes, and reports whether it could; when it could not
// (unknown fields, bad UTF-8, a nil message), b is unchanged and
// proto.Marshal must encode m.
func AppendBatchRequest(b []byte, m *hourglassv1.ScheduleBatchRequest) ([]byte, bool) {
	if m == nil {
		return b, false
	}
	return appendBatchRequest(b, m)
}

// AppendRequest appends the encoding of the ScheduleRequest r to b, as
// AppendBatchRequest does a batch.
func AppendRequest(b []byte, r *hourglassv1.ScheduleRequest) ([]byte, bool) {
	n := requestSize(r)
	if n < 0 {
		return b, false
	}
	return appendRequest(grow(b, n), r), true
}

// appendBatchRequest appends the encoding of m to b.
func appendBatchRequest(b []byte, m *hourglassv1.ScheduleBatchRequest) ([]byte, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	var stack [256]int
	sizes := stack[:0]
	total := 0
	for _, r := range m.Messages {
		n := requestSize(r)
		if n < 0 {
			return b, false
		}
		sizes = append(sizes, n)
		total += sizeBytes(n)
	}
	b = grow(b, total)
	for i, r := range m.Messages {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldBatchMessages, protowire.BytesType), uint64(sizes[i]))
		b = appendRequest(b, r)
	}
	return b, true
}

// appendRequest appends the fields of r, which requestSize accepted.
func appendRequest(b []byte, r *hourglassv1.ScheduleRequest) []byte {
	if r.Topic != "" {
		b = protowire.AppendString(protowire.AppendTag(b, fieldTopic, protowire.BytesType), r.Topic)
	}
	if len(r.Body) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, fieldBody, protowire.BytesType), r.Body)
	}
	for _, h := range r.Headers {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldHeaders, protowire.BytesType), uint64(headerSize(h)))
		if h.Key != "" {
			b = protowire.AppendString(protowire.AppendTag(b, fieldHeaderKey, protowire.BytesType), h.Key)
		}
		if h.Value != "" {
			b = protowire.AppendString(protowire.AppendTag(b, fieldHeaderValue, protowire.BytesType), h.Value)
		}
	}
	if r.IdempotencyKey != "" {
		b = protowire.AppendString(protowire.AppendTag(b, fieldIdempotencyKey, protowire.BytesType), r.IdempotencyKey)
	}
	switch w := r.When.(type) {
	case *hourglassv1.ScheduleRequest_DelayMs:
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldDelayMs, protowire.VarintType), uint64(w.DelayMs))
	case *hourglassv1.ScheduleRequest_DelayLevel:
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldDelayLevel, protowire.VarintType), uint64(int64(w.DelayLevel)))
	case *hourglassv1.ScheduleRequest_DeliverAt:
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldDeliverAtRq, protowire.BytesType), uint64(timestampSize(w.DeliverAt)))
		b = appendTimestamp(b, w.DeliverAt)
	}
	return b
}

// grow makes room for n more bytes in b.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	return b
}

// AppendResponse appends the encoding of the ScheduleResponse that
// answers a Schedule of the message id: its ID as text (message.ID.String)
// and its delivery time as a Timestamp of whole seconds and the
// milliseconds as nanoseconds, what timestamppb.New(id.Time()) holds. The
// bytes are those proto.Marshal writes for that message.
func AppendResponse(b []byte, id message.ID) []byte {
	sec, nanos := splitMs(id.DeliverAt)
	return appendResponse(b, id, sec, nanos, stampSize(sec, nanos))
}

// AppendResponses appends the encoding of the ScheduleBatchResponse that
// answers a ScheduleBatch with ids: one result per ID, as AppendResponse
// writes it.
func AppendResponses(b []byte, ids []message.ID) []byte {
	b = grow(b, len(ids)*(2+maxResponseSize))
	for _, id := range ids {
		sec, nanos := splitMs(id.DeliverAt)
		ts := stampSize(sec, nanos)
		b = append(b, fieldResults<<3|byte(protowire.BytesType), byte(2+message.IDTextLen+2+ts))
		b = appendResponse(b, id, sec, nanos, ts)
	}
	return b
}

// maxResponseSize is the longest AppendResponse encoding: a Timestamp of
// a ten-byte varint of seconds and five of nanoseconds.
const maxResponseSize = 2 + message.IDTextLen + 2 + 1 + 10 + 1 + 5

// appendResponse is AppendResponse for the Timestamp sec, nanos whose
// fields take ts bytes.
func appendResponse(b []byte, id message.ID, sec int64, nanos int32, ts int) []byte {
	b = append(b, fieldID<<3|byte(protowire.BytesType), message.IDTextLen)
	b = id.AppendText(b)
	// Lengths here are below 128 (a Timestamp at most 17 bytes, a
	// response at most 53), so each is one byte of varint.
	b = append(b, fieldDeliverAt<<3|byte(protowire.BytesType), byte(ts))
	if sec != 0 {
		b = appendVarint(append(b, fieldSeconds<<3|byte(protowire.VarintType)), uint64(sec))
	}
	if nanos != 0 {
		b = appendVarint(append(b, fieldNanos<<3|byte(protowire.VarintType)), uint64(nanos))
	}
	return b
}

// appendVarint is protowire.AppendVarint as a loop: shorter for the
// five-byte varints of a Timestamp.
func appendVarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// responseSize is the length of AppendResponse's encoding of id.
func responseSize(id message.ID) int {
	return 2 + message.IDTextLen + 2 + stampSize(splitMs(id.DeliverAt))
}

// stampSize is the length of a Timestamp's fields.
func stampSize(sec int64, nanos int32) int {
	n := 0
	if sec != 0 {
		n += 1 + protowire.SizeVarint(uint64(sec))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(nanos))
	}
	return n
}

// splitMs splits epoch milliseconds into seconds and non-negative
// nanoseconds, as a time.Time's Unix and Nanosecond do.
func splitMs(ms int64) (sec int64, nanos int32) {
	sec, rem := ms/1000, ms%1000
	if rem < 0 {
		sec, rem = sec-1, rem+1000
	}
	return sec, int32(rem) * 1_000_000
}

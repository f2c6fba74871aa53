package wirecodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Field numbers of hourglass.v1.ScheduleBatchRequest and ScheduleRequest
// (proto/hourglass/v1/hourglass.proto).
const (
	fieldBatchMessages   = 1
	fieldTopic           = 1
	fieldBody            = 2
	fieldDelayMs         = 4
	fieldDelayLevel      = 6
	fieldIdempotencyKey  = 7
	maxFastBatchMessages = 1000 // the server refuses larger batches anyway
)

// Requests is memory for decoded ScheduleRequests that DecodeBatchInto and
// DecodeRequestInto reuse from one call to the next. The zero value is
// ready to use. One goroutine at a time may use it.
type Requests struct {
	// Msgs holds the messages of the last decode.
	Msgs []*hourglassv1.ScheduleRequest

	reqs   []hourglassv1.ScheduleRequest
	delays []hourglassv1.ScheduleRequest_DelayMs
	levels []hourglassv1.ScheduleRequest_DelayLevel
}

// Strings turns the bytes of a topic into a string. A caller that reuses
// the buffer it decodes from passes one that copies (and may hand out the
// same string again for the same bytes); the string must not alias the
// bytes it is given.
type Strings func([]byte) string

func copyString(b []byte) string { return string(b) }

// DecodeBatchInto decodes a ScheduleBatchRequest of the common shape
// (Codec's package doc) into r.Msgs and reports whether it could; when it
// could not, r.Msgs is unspecified and proto.Unmarshal must decide. The
// bodies alias data; topics come from topic (called once per run of
// equal topics); idempotency keys are copied.
func DecodeBatchInto(data []byte, r *Requests, topic Strings) bool {
	n := 0
	for rest := data; len(rest) > 0; n++ {
		num, typ, tl := consumeTag(rest)
		if tl < 0 || num != fieldBatchMessages || typ != protowire.BytesType || n == maxFastBatchMessages {
			return false
		}
		_, vl := consumeBytes(rest[tl:])
		if vl < 0 {
			return false
		}
		rest = rest[tl+vl:]
	}
	if n == 0 {
		return false
	}
	r.grow(n)
	rest := data
	for i := range n {
		_, _, tl := consumeTag(rest)
		m, vl := consumeBytes(rest[tl:])
		rest = rest[tl+vl:]
		if !r.decode(i, m, topic) {
			return false
		}
	}
	return true
}

// DecodeRequestInto decodes a ScheduleRequest of the common shape into
// r.Msgs[0], as DecodeBatchInto decodes each message of a batch.
func DecodeRequestInto(data []byte, r *Requests, topic Strings) bool {
	r.grow(1)
	return r.decode(0, data, topic)
}

// grow makes room for n messages.
func (r *Requests) grow(n int) {
	if cap(r.reqs) < n {
		r.reqs = make([]hourglassv1.ScheduleRequest, n)
		r.Msgs = make([]*hourglassv1.ScheduleRequest, n)
	}
	r.reqs = r.reqs[:n]
	r.Msgs = r.Msgs[:n]
	clear(r.delays)
	clear(r.levels)
}

// decode decodes the fields m of one ScheduleRequest into message i. It
// sets every field the common shape has, so that nothing of an earlier
// decode into the same memory stays.
func (r *Requests) decode(i int, m []byte, topic Strings) bool {
	q := &r.reqs[i]
	q.Topic, q.Body, q.Headers, q.When, q.IdempotencyKey = "", nil, nil, nil, ""
	var seenTopic, seenBody, seenKey bool
	for len(m) > 0 {
		num, typ, tl := consumeTag(m)
		if tl < 0 {
			return false
		}
		m = m[tl:]
		switch {
		case typ == protowire.BytesType && (num == fieldTopic || num == fieldBody || num == fieldIdempotencyKey):
			v, vl := consumeBytes(m)
			if vl < 0 {
				return false
			}
			m = m[vl:]
			switch num {
			case fieldTopic:
				if seenTopic {
					return false
				}
				seenTopic = true
				// Batches are mostly of one topic: one string (checked
				// once) for a run.
				switch {
				case i > 0 && string(v) == r.reqs[i-1].Topic:
					q.Topic = r.reqs[i-1].Topic
				case !utf8.Valid(v):
					return false
				default:
					q.Topic = topic(v)
				}
			case fieldBody:
				if seenBody {
					return false
				}
				seenBody = true
				q.Body = v[:len(v):len(v)]
			default:
				if seenKey || !utf8.Valid(v) {
					return false
				}
				seenKey = true
				q.IdempotencyKey = string(v)
			}
		case typ == protowire.VarintType && (num == fieldDelayMs || num == fieldDelayLevel):
			v, vl := consumeVarint(m)
			if vl < 0 || q.When != nil {
				return false
			}
			m = m[vl:]
			if num == fieldDelayMs {
				if len(r.delays) < len(r.reqs) {
					r.delays = make([]hourglassv1.ScheduleRequest_DelayMs, len(r.reqs))
				}
				r.delays[i].DelayMs = int64(v)
				q.When = &r.delays[i]
			} else {
				if len(r.levels) < len(r.reqs) {
					r.levels = make([]hourglassv1.ScheduleRequest_DelayLevel, len(r.reqs))
				}
				r.levels[i].DelayLevel = int32(v)
				q.When = &r.levels[i]
			}
		default:
			return false
		}
	}
	r.Msgs[i] = q
	return true
}

// decodeBatch decodes a ScheduleBatchRequest of the common shape for
// Codec.Unmarshal and reports whether it could. It keeps no reference to
// data (connect reuses it): the bodies point into one copy of it.
func decodeBatch(data []byte) ([]*hourglassv1.ScheduleRequest, bool) {
	own := make([]byte, len(data))
	copy(own, data)
	var r Requests
	if !DecodeBatchInto(own, &r, copyString) {
		return nil, false
	}
	return r.Msgs, true
}

// decodeRequest decodes a ScheduleRequest of the common shape for
// Codec.Unmarshal, as decodeBatch does a batch.
func decodeRequest(data []byte) (*hourglassv1.ScheduleRequest, bool) {
	own := make([]byte, len(data))
	copy(own, data)
	var r Requests
	if !DecodeRequestInto(own, &r, copyString) {
		return nil, false
	}
	return r.Msgs[0], true
}

// consumeTag, consumeVarint and consumeBytes are protowire's, with the
// short cases (a tag of fields 1 to 15, a length below 16 KiB) inlined:
// the decoder calls them a few times per message. Like protowire's, they
// return a negative length for input they cannot read.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if b[0] < 8 {
			return 0, 0, -1 // field number 0 is not valid
		}
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

func consumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	if len(b) > 1 && b[1] < 0x80 {
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, 2
	}
	return protowire.ConsumeVarint(b)
}

func consumeBytes(b []byte) ([]byte, int) {
	m, n := consumeVarint(b)
	if n < 0 {
		return nil, n
	}
	if m > uint64(len(b)-n) {
		return nil, -1
	}
	return b[n : n+int(m)], n + int(m)
}

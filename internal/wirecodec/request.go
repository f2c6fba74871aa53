package wirecodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Field numbers of hourglass.v1.ScheduleBatchRequest and ScheduleRequest
// (proto/hourglass/v1/hourglass.proto).
const (
	fieldBatchMessages   = 1
	fieldTopic           = 1
	fieldBody            = 2
	fieldDelayMs         = 4
	fieldReqDeliverAt    = 5
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
	ats    []hourglassv1.ScheduleRequest_DeliverAt
	stamps []timestamppb.Timestamp
	raw    [][]byte // the encoded messages of a batch
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
	if r.raw == nil {
		r.raw = make([][]byte, 0, 128)
	}
	r.raw = r.raw[:0]
	for rest := data; len(rest) > 0; {
		var m []byte
		var ok bool
		if rest[0] != tagBatchMessages || len(r.raw) == maxFastBatchMessages {
			return false
		}
		if m, rest, ok = lengthPrefixed(rest[1:]); !ok {
			return false
		}
		r.raw = append(r.raw, m)
	}
	if len(r.raw) == 0 {
		return false
	}
	r.grow(len(r.raw))
	for i, m := range r.raw {
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
	// delays, levels and times keep their old values: decode sets the
	// one a message points at.
}

// The one-byte tags of the fields the decoders take: field number << 3 |
// wire type. A longer (non-minimal) encoding of one of them is left to
// proto.Unmarshal.
const (
	tagBatchMessages  = fieldBatchMessages<<3 | byte(protowire.BytesType)
	tagTopic          = fieldTopic<<3 | byte(protowire.BytesType)
	tagBody           = fieldBody<<3 | byte(protowire.BytesType)
	tagIdempotencyKey = fieldIdempotencyKey<<3 | byte(protowire.BytesType)
	tagDelayMs        = fieldDelayMs<<3 | byte(protowire.VarintType)
	tagDeliverAt      = fieldReqDeliverAt<<3 | byte(protowire.BytesType)
	tagDelayLevel     = fieldDelayLevel<<3 | byte(protowire.VarintType)
)

// decode decodes the fields m of one ScheduleRequest into message i. It
// sets every field the common shape has, so that nothing of an earlier
// decode into the same memory stays.
func (r *Requests) decode(i int, m []byte, topic Strings) bool {
	q := &r.reqs[i]
	q.Topic, q.Body, q.Headers, q.When, q.IdempotencyKey = "", nil, nil, nil, ""
	var seenTopic, seenBody, seenKey bool
	for len(m) > 0 {
		tag := m[0]
		m = m[1:]
		var v []byte
		var x uint64
		// The lengths and varints of one or two bytes are read inline:
		// a call each costs more than the reading.
		switch {
		case len(m) > 0 && m[0] < 0x80:
			x, m = uint64(m[0]), m[1:]
		case len(m) > 1 && m[1] < 0x80:
			x, m = uint64(m[0]&0x7f)|uint64(m[1])<<7, m[2:]
		default:
			var ok bool
			if x, m, ok = varintLong(m); !ok {
				return false
			}
		}
		switch tag {
		case tagTopic, tagBody, tagIdempotencyKey, tagDeliverAt:
			if x > uint64(len(m)) {
				return false
			}
			v, m = m[:x], m[x:]
			if tag == tagDeliverAt && q.When != nil {
				return false
			}
		case tagDelayMs, tagDelayLevel:
			if q.When != nil {
				return false
			}
		default:
			return false // another field
		}
		switch tag {
		case tagTopic:
			if seenTopic {
				return false
			}
			seenTopic = true
			// Batches are mostly of one topic: one string (checked once)
			// for a run.
			switch {
			case i > 0 && string(v) == r.reqs[i-1].Topic:
				q.Topic = r.reqs[i-1].Topic
			case !utf8.Valid(v):
				return false
			default:
				q.Topic = topic(v)
			}
		case tagBody:
			if seenBody {
				return false
			}
			seenBody = true
			q.Body = v[:len(v):len(v)]
		case tagIdempotencyKey:
			if seenKey || !utf8.Valid(v) {
				return false
			}
			seenKey = true
			q.IdempotencyKey = string(v)
		case tagDeliverAt:
			if len(r.ats) < len(r.reqs) {
				r.ats = make([]hourglassv1.ScheduleRequest_DeliverAt, len(r.reqs))
				r.stamps = make([]timestamppb.Timestamp, len(r.reqs))
			}
			ts := &r.stamps[i]
			if !decodeStamp(v, ts) {
				return false
			}
			r.ats[i].DeliverAt = ts
			q.When = &r.ats[i]
		case tagDelayMs:
			if len(r.delays) < len(r.reqs) {
				r.delays = make([]hourglassv1.ScheduleRequest_DelayMs, len(r.reqs))
			}
			r.delays[i].DelayMs = int64(x)
			q.When = &r.delays[i]
		default: // tagDelayLevel
			if len(r.levels) < len(r.reqs) {
				r.levels = make([]hourglassv1.ScheduleRequest_DelayLevel, len(r.reqs))
			}
			r.levels[i].DelayLevel = int32(x)
			q.When = &r.levels[i]
		}
	}
	r.Msgs[i] = q
	return true
}

// decodeStamp decodes a Timestamp whose fields appear at most once, as
// varints, into ts (every field set), and reports whether it could.
func decodeStamp(b []byte, ts *timestamppb.Timestamp) bool {
	ts.Seconds, ts.Nanos = 0, 0
	var seen uint8
	for len(b) > 0 {
		tag := b[0]
		var x uint64
		var ok bool
		if x, b, ok = varint(b[1:]); !ok {
			return false
		}
		switch {
		case tag == fieldSeconds<<3|byte(protowire.VarintType) && seen&1 == 0:
			seen |= 1
			ts.Seconds = int64(x)
		case tag == fieldNanos<<3|byte(protowire.VarintType) && seen&2 == 0:
			seen |= 2
			ts.Nanos = int32(x) // as protobuf reads an int32
		default:
			return false
		}
	}
	return true
}

// varint reads a varint, without a call where it is one or two bytes.
func varint(b []byte) (x uint64, rest []byte, ok bool) {
	switch {
	case len(b) > 0 && b[0] < 0x80:
		return uint64(b[0]), b[1:], true
	case len(b) > 1 && b[1] < 0x80:
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, b[2:], true
	}
	return varintLong(b)
}

func varintLong(b []byte) (x uint64, rest []byte, ok bool) {
	x, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, nil, false
	}
	return x, b[n:], true
}

// lengthPrefixed reads a length and that many bytes.
func lengthPrefixed(b []byte) (v, rest []byte, ok bool) {
	n, b, ok := varint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
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

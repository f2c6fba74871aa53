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

// decodeBatch decodes a ScheduleBatchRequest of the common shape (see
// protoCodec) and reports whether it could. It keeps no reference to
// data (connect reuses it): the bodies point into one copy of it.
func decodeBatch(data []byte) ([]*hourglassv1.ScheduleRequest, bool) {
	n := 0
	for rest := data; len(rest) > 0; n++ {
		num, typ, tl := protowire.ConsumeTag(rest)
		if tl < 0 || num != fieldBatchMessages || typ != protowire.BytesType || n == maxFastBatchMessages {
			return nil, false
		}
		_, vl := protowire.ConsumeBytes(rest[tl:])
		if vl < 0 {
			return nil, false
		}
		rest = rest[tl+vl:]
	}
	if n == 0 {
		return nil, false
	}
	own := make([]byte, len(data))
	copy(own, data)
	reqs := make([]hourglassv1.ScheduleRequest, n)
	out := make([]*hourglassv1.ScheduleRequest, n)
	var delays []hourglassv1.ScheduleRequest_DelayMs
	topic := ""
	rest := own
	for i := range reqs {
		_, _, tl := protowire.ConsumeTag(rest)
		m, vl := protowire.ConsumeBytes(rest[tl:])
		rest = rest[tl+vl:]
		r := &reqs[i]
		var seenTopic, seenBody, seenKey bool
		for len(m) > 0 {
			num, typ, tl := protowire.ConsumeTag(m)
			if tl < 0 {
				return nil, false
			}
			m = m[tl:]
			switch {
			case typ == protowire.BytesType && (num == fieldTopic || num == fieldBody || num == fieldIdempotencyKey):
				v, vl := protowire.ConsumeBytes(m)
				if vl < 0 {
					return nil, false
				}
				m = m[vl:]
				switch num {
				case fieldTopic:
					if seenTopic || !utf8.Valid(v) {
						return nil, false
					}
					seenTopic = true
					if string(v) != topic { // batches are mostly of one topic: one string
						topic = string(v)
					}
					r.Topic = topic
				case fieldBody:
					if seenBody {
						return nil, false
					}
					seenBody = true
					r.Body = v[:len(v):len(v)]
				default:
					if seenKey || !utf8.Valid(v) {
						return nil, false
					}
					seenKey = true
					r.IdempotencyKey = string(v)
				}
			case typ == protowire.VarintType && (num == fieldDelayMs || num == fieldDelayLevel):
				v, vl := protowire.ConsumeVarint(m)
				if vl < 0 || r.When != nil {
					return nil, false
				}
				m = m[vl:]
				if num == fieldDelayMs {
					if delays == nil {
						delays = make([]hourglassv1.ScheduleRequest_DelayMs, n)
					}
					delays[i].DelayMs = int64(v)
					r.When = &delays[i]
				} else {
					r.When = &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: int32(v)}
				}
			default:
				return nil, false
			}
		}
		out[i] = r
	}
	return out, true
}

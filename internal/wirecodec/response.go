package wirecodec

import (
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Field numbers of hourglass.v1.ScheduleBatchResponse, ScheduleResponse
// and google.protobuf.Timestamp.
const (
	fieldResults   = 1
	fieldID        = 1
	fieldDeliverAt = 2
	fieldSeconds   = 1
	fieldNanos     = 2
	maxFastResults = 1000
)

// decodeBatchResponse decodes a ScheduleBatchResponse whose results hold
// an id and a deliver_at of seconds and nanos, each at most once, and
// reports whether it could. The IDs share one string's bytes.
func decodeBatchResponse(data []byte) ([]*hourglassv1.ScheduleResponse, bool) {
	n := 0
	for rest := data; len(rest) > 0; n++ {
		num, typ, tl := protowire.ConsumeTag(rest)
		if tl < 0 || num != fieldResults || typ != protowire.BytesType || n == maxFastResults {
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
	results := make([]hourglassv1.ScheduleResponse, n)
	times := make([]timestamppb.Timestamp, n)
	out := make([]*hourglassv1.ScheduleResponse, n)
	// First the ID bytes all go into text, then the strings are cut from
	// it: text never changes after that.
	text := make([]byte, 0, 32*n)
	idAt := make([][2]int, n) // start and end of result i's ID in text; start -1: none
	rest := data
	for i := range results {
		_, _, tl := protowire.ConsumeTag(rest)
		m, vl := protowire.ConsumeBytes(rest[tl:])
		rest = rest[tl+vl:]
		r := &results[i]
		idAt[i][0] = -1
		for len(m) > 0 {
			num, typ, tl := protowire.ConsumeTag(m)
			if tl < 0 || typ != protowire.BytesType {
				return nil, false
			}
			v, vl := protowire.ConsumeBytes(m[tl:])
			if vl < 0 {
				return nil, false
			}
			m = m[tl+vl:]
			switch num {
			case fieldID:
				if idAt[i][0] >= 0 || !utf8.Valid(v) {
					return nil, false
				}
				idAt[i] = [2]int{len(text), len(text) + len(v)}
				text = append(text, v...)
			case fieldDeliverAt:
				if r.DeliverAt != nil || !decodeTimestamp(v, &times[i]) {
					return nil, false
				}
				r.DeliverAt = &times[i]
			default:
				return nil, false
			}
		}
		out[i] = r
	}
	for i := range results {
		if a := idAt[i]; a[0] >= 0 && a[1] > a[0] {
			results[i].Id = unsafe.String(&text[a[0]], a[1]-a[0])
		}
	}
	return out, true
}

// decodeTimestamp decodes a Timestamp of seconds and nanos, each at most
// once.
func decodeTimestamp(b []byte, ts *timestamppb.Timestamp) bool {
	var seenS, seenN bool
	for len(b) > 0 {
		num, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 || typ != protowire.VarintType {
			return false
		}
		v, vl := protowire.ConsumeVarint(b[tl:])
		if vl < 0 {
			return false
		}
		b = b[tl+vl:]
		switch {
		case num == fieldSeconds && !seenS:
			seenS, ts.Seconds = true, int64(v)
		case num == fieldNanos && !seenN:
			seenN, ts.Nanos = true, int32(v)
		default:
			return false
		}
	}
	return true
}

// decodeResponse decodes a ScheduleResponse of an id and a deliver_at of
// seconds and nanos, each at most once (what the server writes), and
// reports whether it could. The response and its Timestamp are one
// allocation; the ID is copied.
func decodeResponse(data []byte) (*hourglassv1.ScheduleResponse, bool) {
	var id []byte
	var seenID bool
	var ts timestamppb.Timestamp
	var seenTS bool
	for len(data) > 0 {
		num, typ, tl := protowire.ConsumeTag(data)
		if tl < 0 || typ != protowire.BytesType {
			return nil, false
		}
		v, vl := protowire.ConsumeBytes(data[tl:])
		if vl < 0 {
			return nil, false
		}
		data = data[tl+vl:]
		switch {
		case num == fieldID && !seenID:
			if !utf8.Valid(v) {
				return nil, false
			}
			seenID, id = true, v
		case num == fieldDeliverAt && !seenTS:
			if !decodeTimestamp(v, &ts) {
				return nil, false
			}
			seenTS = true
		default:
			return nil, false
		}
	}
	type both struct {
		r  hourglassv1.ScheduleResponse
		ts timestamppb.Timestamp
	}
	m := new(both)
	m.r.Id = string(id)
	if seenTS {
		m.ts.Seconds, m.ts.Nanos = ts.Seconds, ts.Nanos
		m.r.DeliverAt = &m.ts
	}
	return &m.r, true
}

package wirecodec

import (
	"bytes"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Field numbers of hourglass.v1.ReceiveResponse and Message.
const (
	fieldMessages       = 1
	fieldMsgID          = 1
	fieldMsgTopic       = 2
	fieldMsgHeaders     = 3
	fieldMsgBody        = 4
	fieldMsgDeliverAt   = 5
	fieldMsgAttempt     = 6
	fieldMsgReceivedAt  = 7
	fieldMsgLeaseExpiry = 8
	fieldMsgOriginID    = 9
	fieldMsgReceipt     = 10
	maxFastMessages     = 1000
)

// headerFieldsSize is the encoded size of h's fields, or -1 if
// proto.Marshal must encode it.
func headerFieldsSize(h *hourglassv1.Header) int {
	if h == nil || len(h.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
		return -1
	}
	n := 0
	if h.Key != "" {
		n += sizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += sizeBytes(len(h.Value))
	}
	return n
}

// stringSize is the encoded size of a string field holding s (0 if s is
// empty: proto3 leaves it out).
func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return sizeBytes(len(s))
}

// receivedSize is the encoded size of m's fields, or -1 if proto.Marshal
// must encode it.
func receivedSize(m *hourglassv1.Message) int {
	if m == nil || len(m.ProtoReflect().GetUnknown()) > 0 ||
		!utf8.ValidString(m.Id) || !utf8.ValidString(m.Topic) || !utf8.ValidString(m.OriginId) || !utf8.ValidString(m.Receipt) {
		return -1
	}
	// Every tag here (fields 1 to 10) is one byte, as sizeBytes counts.
	n := stringSize(m.Id) + stringSize(m.Topic) + stringSize(m.OriginId) + stringSize(m.Receipt)
	for _, h := range m.Headers {
		hs := headerFieldsSize(h)
		if hs < 0 {
			return -1
		}
		n += sizeBytes(hs)
	}
	if len(m.Body) > 0 {
		n += sizeBytes(len(m.Body))
	}
	for _, ts := range [...]*timestamppb.Timestamp{m.DeliverAt, m.ReceivedAt, m.LeaseExpiresAt} {
		if ts == nil {
			continue
		}
		if !plainTimestamp(ts) {
			return -1
		}
		n += sizeBytes(timestampSize(ts))
	}
	if m.Attempt != 0 {
		n += 1 + protowire.SizeVarint(uint64(m.Attempt))
	}
	return n
}

// appendReceiveResponse appends the encoding of m to b, the bytes
// proto.Marshal writes, and reports whether it could.
func appendReceiveResponse(b []byte, m *hourglassv1.ReceiveResponse) ([]byte, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	var stack [128]int
	sizes := stack[:0]
	total := 0
	for _, msg := range m.Messages {
		n := receivedSize(msg)
		if n < 0 {
			return nil, false
		}
		sizes = append(sizes, n)
		total += sizeBytes(n)
	}
	b = grow(b, total)
	str := func(b []byte, num protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	stamp := func(b []byte, num protowire.Number, ts *timestamppb.Timestamp) []byte {
		if ts == nil {
			return b
		}
		b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(timestampSize(ts)))
		return appendTimestamp(b, ts)
	}
	for i, msg := range m.Messages {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldMessages, protowire.BytesType), uint64(sizes[i]))
		b = str(b, fieldMsgID, msg.Id)
		b = str(b, fieldMsgTopic, msg.Topic)
		for _, h := range msg.Headers {
			b = protowire.AppendVarint(protowire.AppendTag(b, fieldMsgHeaders, protowire.BytesType), uint64(headerFieldsSize(h)))
			b = str(b, fieldHeaderKey, h.Key)
			b = str(b, fieldHeaderValue, h.Value)
		}
		if len(msg.Body) > 0 {
			b = protowire.AppendBytes(protowire.AppendTag(b, fieldMsgBody, protowire.BytesType), msg.Body)
		}
		b = stamp(b, fieldMsgDeliverAt, msg.DeliverAt)
		if msg.Attempt != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, fieldMsgAttempt, protowire.VarintType), uint64(msg.Attempt))
		}
		b = stamp(b, fieldMsgReceivedAt, msg.ReceivedAt)
		b = stamp(b, fieldMsgLeaseExpiry, msg.LeaseExpiresAt)
		b = str(b, fieldMsgOriginID, msg.OriginId)
		b = str(b, fieldMsgReceipt, msg.Receipt)
	}
	return b, true
}

// decodeReceiveResponse decodes a ReceiveResponse of messages whose
// fields each appear at most once (headers any number of times, each with
// a key and a value at most once), with the wire types of the schema and
// valid UTF-8, and reports whether it could. Strings share one buffer,
// bodies another; nothing points into data.
func decodeReceiveResponse(data []byte) ([]*hourglassv1.Message, bool) {
	n, nh := 0, 0
	for rest := data; len(rest) > 0; n++ {
		num, typ, tl := protowire.ConsumeTag(rest)
		if tl < 0 || num != fieldMessages || typ != protowire.BytesType || n == maxFastMessages {
			return nil, false
		}
		v, vl := protowire.ConsumeBytes(rest[tl:])
		if vl < 0 {
			return nil, false
		}
		rest = rest[tl+vl:]
		// Count the headers (a tag byte of field 3, bytes type) roughly:
		// an upper bound is enough to size one slice for them all.
		nh += bytes.Count(v, []byte{byte(fieldMsgHeaders<<3 | protowire.BytesType)})
	}
	if n == 0 {
		return nil, false
	}
	msgs := make([]hourglassv1.Message, n)
	times := make([]timestamppb.Timestamp, 3*n)
	out := make([]*hourglassv1.Message, n)
	var hdrs []hourglassv1.Header
	var hdrPtrs []*hourglassv1.Header
	// Strings and bodies are copied into one buffer, in the order met. It
	// never grows past its capacity (what it holds is part of data), so
	// what is cut from it stays put, and the bytes of a string are never
	// written again: each copy goes after the last, and a body is cut
	// with its capacity at its end, so that appending to it copies.
	text := make([]byte, 0, len(data))
	str := func(v []byte) (string, bool) {
		if !utf8.Valid(v) {
			return "", false
		}
		if len(v) == 0 {
			return "", true
		}
		start := len(text)
		text = append(text, v...)
		return unsafe.String(&text[start], len(v)), true
	}
	rest := data
	for i := range msgs {
		_, _, tl := protowire.ConsumeTag(rest)
		m, vl := protowire.ConsumeBytes(rest[tl:])
		rest = rest[tl+vl:]
		msg := &msgs[i]
		h0 := len(hdrs)
		var seen uint16
		for len(m) > 0 {
			num, typ, tl := protowire.ConsumeTag(m)
			if tl < 0 || num < fieldMsgID || num > fieldMsgReceipt {
				return nil, false
			}
			if num != fieldMsgHeaders {
				if seen&(1<<num) != 0 {
					return nil, false
				}
				seen |= 1 << num
			}
			if num == fieldMsgAttempt {
				if typ != protowire.VarintType {
					return nil, false
				}
				v, vl := protowire.ConsumeVarint(m[tl:])
				if vl < 0 {
					return nil, false
				}
				m = m[tl+vl:]
				msg.Attempt = uint32(v)
				continue
			}
			if typ != protowire.BytesType {
				return nil, false
			}
			v, vl := protowire.ConsumeBytes(m[tl:])
			if vl < 0 {
				return nil, false
			}
			m = m[tl+vl:]
			ok := true
			switch num {
			case fieldMsgID:
				msg.Id, ok = str(v)
			case fieldMsgTopic:
				msg.Topic, ok = str(v)
			case fieldMsgOriginID:
				msg.OriginId, ok = str(v)
			case fieldMsgReceipt:
				msg.Receipt, ok = str(v)
			case fieldMsgBody:
				start := len(text)
				text = append(text, v...)
				msg.Body = text[start:len(text):len(text)]
			case fieldMsgHeaders:
				if hdrs == nil {
					hdrs = make([]hourglassv1.Header, 0, nh)
					hdrPtrs = make([]*hourglassv1.Header, 0, nh)
				}
				if len(hdrs) == cap(hdrs) {
					return nil, false // cannot happen: nh counts every header tag
				}
				hdrs = append(hdrs, hourglassv1.Header{})
				hd := &hdrs[len(hdrs)-1]
				var seenK, seenV bool
				for len(v) > 0 && ok {
					hn, ht, htl := protowire.ConsumeTag(v)
					if htl < 0 || ht != protowire.BytesType {
						return nil, false
					}
					hv, hvl := protowire.ConsumeBytes(v[htl:])
					if hvl < 0 {
						return nil, false
					}
					v = v[htl+hvl:]
					switch {
					case hn == fieldHeaderKey && !seenK:
						seenK = true
						hd.Key, ok = str(hv)
					case hn == fieldHeaderValue && !seenV:
						seenV = true
						hd.Value, ok = str(hv)
					default:
						return nil, false
					}
				}
				hdrPtrs = append(hdrPtrs, hd)
			case fieldMsgDeliverAt:
				msg.DeliverAt = &times[3*i]
				ok = decodeTimestamp(v, msg.DeliverAt)
			case fieldMsgReceivedAt:
				msg.ReceivedAt = &times[3*i+1]
				ok = decodeTimestamp(v, msg.ReceivedAt)
			case fieldMsgLeaseExpiry:
				msg.LeaseExpiresAt = &times[3*i+2]
				ok = decodeTimestamp(v, msg.LeaseExpiresAt)
			}
			if !ok {
				return nil, false
			}
		}
		if len(hdrs) > h0 {
			msg.Headers = hdrPtrs[h0:len(hdrs):len(hdrs)]
		}
		out[i] = msg
	}
	return out, true
}

package server

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// Field numbers of hourglass.v1.ReceiveResponse, Message, Header and
// google.protobuf.Timestamp.
const (
	fieldRecvMessages   = 1
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
	fieldHeaderKey      = 1
	fieldHeaderValue    = 2
	fieldStampSeconds   = 1
	fieldStampNanos     = 2
)

// appendReceived appends the encoding of the ReceiveResponse the Receive
// handler answers for msgs, ReceiveResponse{Messages: toMessages(msgs)},
// to b without building it: the bytes proto.Marshal writes
// (TestAppendReceivedMatchesProto, FuzzAppendReceived). It reports false,
// with b unchanged, where a text is not valid UTF-8 (a topic, a receipt, a
// header of a message an embedding program scheduled): toMessages then
// repairs or proto.Marshal refuses it, and the caller goes that way.
func appendReceived(b []byte, msgs []queue.Message) ([]byte, bool) {
	start := len(b)
	for i := range msgs {
		m := &msgs[i]
		if !utf8.ValidString(m.Topic) || !utf8.ValidString(m.Receipt) {
			return b[:start], false
		}
		for _, h := range m.Headers {
			if !utf8.Valid(h.Key) || !utf8.Valid(h.Value) {
				return b[:start], false
			}
		}
		origin := m.ID
		if !m.Origin.IsZero() {
			origin = m.Origin
		}
		deliverAt := time.UnixMilli(m.DeliverAt)
		n := 2*sizeText(message.IDTextLen) + sizeText(len(m.Topic)) + sizeText(len(m.Receipt)) +
			sizeStamp(deliverAt) + sizeStamp(m.ReceivedAt) + sizeStamp(m.LeaseUntil)
		for _, h := range m.Headers {
			n += sizeField(sizeText(len(h.Key)) + sizeText(len(h.Value)))
		}
		if len(m.Body) > 0 {
			n += sizeField(len(m.Body))
		}
		if m.Attempt != 0 {
			n += 1 + protowire.SizeVarint(uint64(m.Attempt))
		}
		b = protowire.AppendVarint(append(b, tag(fieldRecvMessages, protowire.BytesType)), uint64(n))
		b = appendID(b, fieldMsgID, m.ID)
		b = appendText(b, fieldMsgTopic, m.Topic)
		for _, h := range m.Headers {
			b = protowire.AppendVarint(append(b, tag(fieldMsgHeaders, protowire.BytesType)), uint64(sizeText(len(h.Key))+sizeText(len(h.Value))))
			b = appendText(b, fieldHeaderKey, h.Key)
			b = appendText(b, fieldHeaderValue, h.Value)
		}
		if len(m.Body) > 0 {
			b = protowire.AppendBytes(append(b, tag(fieldMsgBody, protowire.BytesType)), m.Body)
		}
		b = appendStamp(b, fieldMsgDeliverAt, deliverAt)
		if m.Attempt != 0 {
			b = protowire.AppendVarint(append(b, tag(fieldMsgAttempt, protowire.VarintType)), uint64(m.Attempt))
		}
		b = appendStamp(b, fieldMsgReceivedAt, m.ReceivedAt)
		b = appendStamp(b, fieldMsgLeaseExpiry, m.LeaseUntil)
		b = appendID(b, fieldMsgOriginID, origin)
		b = appendText(b, fieldMsgReceipt, m.Receipt)
	}
	return b, true
}

// tag is the one-byte tag of a field numbered below 16.
func tag(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

// sizeField is the size of a length-delimited field of n bytes with a
// one-byte tag.
func sizeField(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// sizeText is the size of a string field of n bytes: none if empty
// (proto3 leaves it out).
func sizeText[T ~int](n T) int {
	if n == 0 {
		return 0
	}
	return sizeField(int(n))
}

func appendText[T string | []byte](b []byte, num protowire.Number, s T) []byte {
	if len(s) == 0 {
		return b
	}
	b = protowire.AppendVarint(append(b, tag(num, protowire.BytesType)), uint64(len(s)))
	return append(b, s...)
}

func appendID(b []byte, num protowire.Number, id message.ID) []byte {
	return id.AppendText(append(b, tag(num, protowire.BytesType), message.IDTextLen))
}

// stampSize is the size of a Timestamp of t's seconds and nanoseconds.
func stampSize(t time.Time) int {
	n := 0
	if s := t.Unix(); s != 0 {
		n += 1 + protowire.SizeVarint(uint64(s))
	}
	if ns := t.Nanosecond(); ns != 0 {
		n += 1 + protowire.SizeVarint(uint64(ns))
	}
	return n
}

// sizeStamp is the size of a Timestamp field holding t.
func sizeStamp(t time.Time) int { return sizeField(stampSize(t)) }

func appendStamp(b []byte, num protowire.Number, t time.Time) []byte {
	b = protowire.AppendVarint(append(b, tag(num, protowire.BytesType)), uint64(stampSize(t)))
	if s := t.Unix(); s != 0 {
		b = protowire.AppendVarint(append(b, tag(fieldStampSeconds, protowire.VarintType)), uint64(s))
	}
	if ns := t.Nanosecond(); ns != 0 {
		b = protowire.AppendVarint(append(b, tag(fieldStampNanos, protowire.VarintType)), uint64(ns))
	}
	return b
}

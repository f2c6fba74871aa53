package wirecodec

import (
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of hourglass.v1.ReceiveRequest, AckBatchRequest,
// AckBatchResponse and AckResult.
const (
	fieldRecvTopic    = 1
	fieldRecvMax      = 2
	fieldRecvWait     = 3
	fieldRecvLease    = 4
	fieldAckTopic     = 1
	fieldAckReceipts  = 2
	fieldAckResults   = 1
	fieldResultAcked  = 1
	fieldResultError  = 2
	maxFastReceipts   = 1000 // the server refuses larger batches anyway
	tagAckBatchResult = byte(fieldAckResults<<3 | protowire.BytesType)
)

// ReceiveArgs are the fields of a ReceiveRequest, as
// DecodeReceiveRequest decodes them.
type ReceiveArgs struct {
	// Topic aliases the decoded bytes.
	Topic           []byte
	MaxMessages     int32
	WaitMs, LeaseMs int64
}

// DecodeReceiveRequest decodes a ReceiveRequest whose fields each appear
// at most once, with the schema's wire types and a valid UTF-8 topic, into
// r, and reports whether it could; when it could not, proto.Unmarshal must
// decide (and word any error).
func DecodeReceiveRequest(data []byte, r *ReceiveArgs) bool {
	*r = ReceiveArgs{}
	var seen uint8
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num < fieldRecvTopic || num > fieldRecvLease || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		rest = rest[n:]
		if num == fieldRecvTopic {
			if typ != protowire.BytesType {
				return false
			}
			v, m := protowire.ConsumeBytes(rest)
			if m < 0 || !utf8.Valid(v) {
				return false
			}
			r.Topic, rest = v, rest[m:]
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, m := protowire.ConsumeVarint(rest)
		if m < 0 {
			return false
		}
		rest = rest[m:]
		switch num {
		case fieldRecvMax:
			r.MaxMessages = int32(v) // as protobuf reads an int32
		case fieldRecvWait:
			r.WaitMs = int64(v)
		case fieldRecvLease:
			r.LeaseMs = int64(v)
		}
	}
	return true
}

// AckBatchArgs are the fields of an AckBatchRequest, as
// DecodeAckBatchRequest decodes them; its memory is reused from one
// decode to the next. One goroutine at a time may use it.
type AckBatchArgs struct {
	// Topic aliases the decoded bytes.
	Topic []byte
	// Receipts alias the decoded bytes: they are valid while those are.
	Receipts []string
}

// DecodeAckBatchRequest decodes an AckBatchRequest of at most 1000
// receipts, with the topic at most once, the schema's wire types and
// valid UTF-8, into r, and reports whether it could; when it could not,
// proto.Unmarshal must decide (and word any error). The receipts are
// strings that alias data: the caller keeps data unchanged while it uses
// them.
func DecodeAckBatchRequest(data []byte, r *AckBatchArgs) bool {
	r.Topic, r.Receipts = nil, r.Receipts[:0]
	topicSeen := false
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || typ != protowire.BytesType || (num != fieldAckTopic && num != fieldAckReceipts) {
			return false
		}
		v, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 || !utf8.Valid(v) {
			return false
		}
		rest = rest[n+m:]
		if num == fieldAckTopic {
			if topicSeen {
				return false
			}
			topicSeen, r.Topic = true, v
			continue
		}
		if len(r.Receipts) == maxFastReceipts {
			return false
		}
		r.Receipts = append(r.Receipts, unsafe.String(unsafe.SliceData(v), len(v)))
	}
	return true
}

// AppendAckResults appends the AckBatchResponse for one result per
// receipt (nil: acked, else the error's text) to b, the bytes
// proto.Marshal writes, and reports whether it could: false when an
// error's text is not valid UTF-8, which proto.Marshal refuses.
func AppendAckResults(b []byte, results []error) ([]byte, bool) {
	for _, e := range results {
		if e == nil {
			// AckResult{Acked: true}: field 1, varint 1.
			b = append(b, tagAckBatchResult, 2, fieldResultAcked<<3|byte(protowire.VarintType), 1)
			continue
		}
		msg := e.Error()
		if !utf8.ValidString(msg) {
			return b, false
		}
		n := 0
		if msg != "" {
			n = sizeBytes(len(msg))
		}
		b = protowire.AppendVarint(append(b, tagAckBatchResult), uint64(n))
		if msg != "" {
			b = protowire.AppendString(append(b, fieldResultError<<3|byte(protowire.BytesType)), msg)
		}
	}
	return b, true
}

// SettleArgs are the fields of an AckRequest or a NackRequest, as
// DecodeAckRequest and DecodeNackRequest decode them. The texts alias the
// decoded bytes.
type SettleArgs struct {
	Topic, ID, Receipt []byte
	DelayMs            int64 // NackRequest only
}

// DecodeAckRequest decodes an AckRequest (topic 1, id 2, receipt 3)
// whose fields each appear at most once, with the schema's wire types and
// valid UTF-8, into r, and reports whether it could; when it could not,
// proto.Unmarshal must decide (and word any error).
func DecodeAckRequest(data []byte, r *SettleArgs) bool {
	*r = SettleArgs{}
	return decodeSettle(data, [5]*[]byte{1: &r.Topic, 2: &r.ID, 3: &r.Receipt}, 0, nil)
}

// DecodeNackRequest decodes a NackRequest (topic 1, id 2, delay_ms 3,
// receipt 4) as DecodeAckRequest does an AckRequest.
func DecodeNackRequest(data []byte, r *SettleArgs) bool {
	*r = SettleArgs{}
	return decodeSettle(data, [5]*[]byte{1: &r.Topic, 2: &r.ID, 4: &r.Receipt}, 3, &r.DelayMs)
}

// decodeSettle decodes fields 1 to 4, each at most once: the string
// fields into texts, the varint field numbered varNum into v.
func decodeSettle(data []byte, texts [5]*[]byte, varNum protowire.Number, v *int64) bool {
	var seen uint8
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num < 1 || num > 4 || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		rest = rest[n:]
		if num == varNum {
			if typ != protowire.VarintType {
				return false
			}
			x, m := protowire.ConsumeVarint(rest)
			if m < 0 {
				return false
			}
			*v, rest = int64(x), rest[m:]
			continue
		}
		if texts[num] == nil || typ != protowire.BytesType {
			return false
		}
		b, m := protowire.ConsumeBytes(rest)
		if m < 0 || !utf8.Valid(b) {
			return false
		}
		*texts[num], rest = b, rest[m:]
	}
	return true
}

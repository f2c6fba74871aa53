package wirecodec

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// receiveRequestSeeds are encoded ReceiveRequests of the shapes
// DecodeReceiveRequest takes and of those it leaves to proto.Unmarshal.
func receiveRequestSeeds(t testing.TB) map[string][]byte {
	tag := protowire.AppendTag
	return map[string][]byte{
		"common":         mustMarshal(t, &hourglassv1.ReceiveRequest{Topic: "orders", MaxMessages: 100, WaitMs: 1000, LeaseMs: 10_000}),
		"topic_only":     mustMarshal(t, &hourglassv1.ReceiveRequest{Topic: "t"}),
		"negative":       mustMarshal(t, &hourglassv1.ReceiveRequest{Topic: "t", MaxMessages: -1, WaitMs: -2, LeaseMs: -3}),
		"empty":          {},
		"long_max":       protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1<<40+5), // int32 truncates
		"topic_twice":    protowire.AppendString(tag(protowire.AppendString(tag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b"),
		"wait_twice":     protowire.AppendVarint(tag(protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1), 3, protowire.VarintType), 2),
		"bad_utf8_topic": protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{0xff}),
		"topic_varint":   protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1),
		"max_as_bytes":   protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{1}),
		"unknown":        protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1),
		"truncated":      []byte{0x0a, 0x05, 'a'},
		"bad_varint":     {0x10, 0xff},
	}
}

// checkDecodeReceiveRequest holds DecodeReceiveRequest to proto.Unmarshal:
// where it decodes, proto.Unmarshal decodes the same fields.
func checkDecodeReceiveRequest(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.ReceiveRequest
	stdErr := proto.Unmarshal(data, &std)
	var r ReceiveArgs
	r.MaxMessages = 7 // a stale value must not survive
	if !DecodeReceiveRequest(data, &r) {
		return false
	}
	if stdErr != nil {
		t.Fatalf("DecodeReceiveRequest accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	got := &hourglassv1.ReceiveRequest{Topic: string(r.Topic), MaxMessages: r.MaxMessages, WaitMs: r.WaitMs, LeaseMs: r.LeaseMs}
	if !proto.Equal(got, &std) {
		t.Fatalf("DecodeReceiveRequest(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	return true
}

func TestDecodeReceiveRequest(t *testing.T) {
	wantFast := map[string]bool{"common": true, "topic_only": true, "negative": true, "empty": true, "long_max": true}
	for name, data := range receiveRequestSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeReceiveRequest(t, data); fast != wantFast[name] {
				t.Errorf("DecodeReceiveRequest took it: %v, want %v", fast, wantFast[name])
			}
		})
	}
}

func FuzzDecodeReceiveRequest(f *testing.F) {
	for _, data := range receiveRequestSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeReceiveRequest(t, data) })
}

// ackBatchSeeds are encoded AckBatchRequests of the shapes
// DecodeAckBatchRequest takes and of those it leaves to proto.Unmarshal.
func ackBatchSeeds(t testing.TB) map[string][]byte {
	tag := protowire.AppendTag
	many := make([]string, 1001)
	for i := range many {
		many[i] = "r"
	}
	return map[string][]byte{
		"common":          mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "orders", Receipts: []string{"0123456789abcdef0123456789abcdef.1a", "x"}}),
		"empty_receipt":   mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "t", Receipts: []string{"", "a"}}),
		"no_receipts":     mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "t"}),
		"1000":            mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "t", Receipts: many[:1000]}),
		"1001":            mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "t", Receipts: many}),
		"empty":           {},
		"topic_last":      protowire.AppendString(tag(protowire.AppendString(tag(nil, 2, protowire.BytesType), "r"), 1, protowire.BytesType), "t"),
		"topic_twice":     protowire.AppendString(tag(protowire.AppendString(tag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b"),
		"bad_utf8":        protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0xff}),
		"receipt_varint":  protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1),
		"unknown":         protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1),
		"truncated":       []byte{0x12, 0x05, 'a'},
		"bad_utf8_topic":  protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{'a', 0xc3}),
		"group_wire_type": {0x0b},
	}
}

// checkDecodeAckBatch holds DecodeAckBatchRequest to proto.Unmarshal,
// decoding twice into the same AckBatchArgs as the server reuses them.
func checkDecodeAckBatch(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.AckBatchRequest
	stdErr := proto.Unmarshal(data, &std)
	var r AckBatchArgs
	DecodeAckBatchRequest(mustMarshal(t, &hourglassv1.AckBatchRequest{Topic: "stale", Receipts: []string{"1", "2", "3"}}), &r)
	if !DecodeAckBatchRequest(data, &r) {
		return false
	}
	if stdErr != nil {
		t.Fatalf("DecodeAckBatchRequest accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	got := &hourglassv1.AckBatchRequest{Topic: string(r.Topic), Receipts: r.Receipts}
	if !proto.Equal(got, &std) {
		t.Fatalf("DecodeAckBatchRequest(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	return true
}

func TestDecodeAckBatchRequest(t *testing.T) {
	wantFast := map[string]bool{"common": true, "empty_receipt": true, "no_receipts": true, "1000": true, "empty": true, "topic_last": true}
	for name, data := range ackBatchSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeAckBatch(t, data); fast != wantFast[name] {
				t.Errorf("DecodeAckBatchRequest took it: %v, want %v", fast, wantFast[name])
			}
		})
	}
}

func FuzzDecodeAckBatchRequest(f *testing.F) {
	for _, data := range ackBatchSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeAckBatch(t, data) })
}

// checkAckResults holds AppendAckResults to proto.Marshal of the
// AckBatchResponse the connect handler builds.
func checkAckResults(t *testing.T, results []error) {
	want := &hourglassv1.AckBatchResponse{}
	for _, e := range results {
		r := &hourglassv1.AckResult{Acked: e == nil}
		if e != nil {
			r.Error = e.Error()
		}
		want.Results = append(want.Results, r)
	}
	std, stdErr := proto.Marshal(want)
	got, ok := AppendAckResults([]byte("prefix"), results)
	if !ok {
		if stdErr == nil {
			t.Fatalf("AppendAckResults refused %v, which proto.Marshal encodes", results)
		}
		return
	}
	if stdErr != nil {
		t.Fatalf("AppendAckResults encoded %v, which proto.Marshal refuses: %v", results, stdErr)
	}
	if !bytes.Equal(got[len("prefix"):], std) || string(got[:len("prefix")]) != "prefix" {
		t.Fatalf("AppendAckResults(%v) = %x, proto.Marshal %x", results, got, std)
	}
}

func TestAppendAckResults(t *testing.T) {
	notLeased := errors.New("queue: message not leased (unknown, already settled, or its lease expired)")
	for name, results := range map[string][]error{
		"none":      nil,
		"acked":     {nil, nil},
		"mixed":     {nil, notLeased, nil},
		"empty_err": {errors.New("")},
		"long_err":  {errors.New(strings.Repeat("e", 300))},
		"bad_utf8":  {errors.New("\xff")},
	} {
		t.Run(name, func(t *testing.T) { checkAckResults(t, results) })
	}
}

func FuzzAppendAckResults(f *testing.F) {
	f.Add([]byte{1, 0, 1}, "queue: message not leased")
	f.Add([]byte{0}, "\xff")
	f.Fuzz(func(t *testing.T, acked []byte, msg string) {
		results := make([]error, len(acked))
		for i, a := range acked {
			if a%2 == 0 {
				results[i] = errors.New(strings.Repeat(msg, int(a)%3))
			}
		}
		checkAckResults(t, results)
	})
}

// settleSeeds are encoded AckRequests and NackRequests, of the shapes the
// decoders take and of those they leave to proto.Unmarshal.
func settleSeeds(t testing.TB) map[string][]byte {
	tag := protowire.AppendTag
	return map[string][]byte{
		"ack":          mustMarshal(t, &hourglassv1.AckRequest{Topic: "orders", Receipt: "0123456789abcdef0123456789abcdef.1a"}),
		"ack_id":       mustMarshal(t, &hourglassv1.AckRequest{Topic: "orders", Id: "0123456789abcdef0123456789abcdef"}),
		"nack":         mustMarshal(t, &hourglassv1.NackRequest{Topic: "t", Receipt: "r", DelayMs: 60_000}),
		"nack_neg":     mustMarshal(t, &hourglassv1.NackRequest{Topic: "t", Id: "i", DelayMs: -1}),
		"empty":        {},
		"topic_twice":  protowire.AppendString(tag(protowire.AppendString(tag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b"),
		"field3_bytes": protowire.AppendString(tag(nil, 3, protowire.BytesType), "r"),
		"field3_int":   protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 5),
		"field4_text":  protowire.AppendString(tag(nil, 4, protowire.BytesType), "r"),
		"bad_utf8":     protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0xff}),
		"unknown":      protowire.AppendVarint(tag(nil, 5, protowire.VarintType), 1),
		"truncated":    []byte{0x0a, 0x05, 'a'},
	}
}

// checkDecodeSettle holds DecodeAckRequest and DecodeNackRequest to
// proto.Unmarshal.
func checkDecodeSettle(t *testing.T, data []byte) (ack, nack bool) {
	var stdAck hourglassv1.AckRequest
	ackErr := proto.Unmarshal(data, &stdAck)
	var r SettleArgs
	r.DelayMs = 9
	if ack = DecodeAckRequest(data, &r); ack {
		got := &hourglassv1.AckRequest{Topic: string(r.Topic), Id: string(r.ID), Receipt: string(r.Receipt)}
		if ackErr != nil || !proto.Equal(got, &stdAck) || r.DelayMs != 0 {
			t.Fatalf("DecodeAckRequest(%x) = %+v; proto.Unmarshal %v, %v", data, r, &stdAck, ackErr)
		}
	}
	var stdNack hourglassv1.NackRequest
	nackErr := proto.Unmarshal(data, &stdNack)
	if nack = DecodeNackRequest(data, &r); nack {
		got := &hourglassv1.NackRequest{Topic: string(r.Topic), Id: string(r.ID), Receipt: string(r.Receipt), DelayMs: r.DelayMs}
		if nackErr != nil || !proto.Equal(got, &stdNack) {
			t.Fatalf("DecodeNackRequest(%x) = %+v; proto.Unmarshal %v, %v", data, r, &stdNack, nackErr)
		}
	}
	return ack, nack
}

func TestDecodeSettle(t *testing.T) {
	wantAck := map[string]bool{"ack": true, "ack_id": true, "empty": true, "field3_bytes": true}
	wantNack := map[string]bool{"ack_id": true, "nack": true, "nack_neg": true, "empty": true, "field3_int": true, "field4_text": true}
	for name, data := range settleSeeds(t) {
		t.Run(name, func(t *testing.T) {
			ack, nack := checkDecodeSettle(t, data)
			if ack != wantAck[name] || nack != wantNack[name] {
				t.Errorf("decoded as Ack %v, Nack %v; want %v, %v", ack, nack, wantAck[name], wantNack[name])
			}
		})
	}
}

func FuzzDecodeSettle(f *testing.F) {
	for _, data := range settleSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeSettle(t, data) })
}

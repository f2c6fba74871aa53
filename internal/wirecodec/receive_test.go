package wirecodec

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// received is a message as the server hands it out, i varying its fields.
func received(i int, body []byte) *hourglassv1.Message {
	id := fmt.Sprintf("0000019a1b2c3d4e%016x", i)
	return &hourglassv1.Message{
		Id: id, Topic: "orders", Body: body,
		DeliverAt:      &timestamppb.Timestamp{Seconds: 1_796_000_000 + int64(i), Nanos: 123_000_000},
		Attempt:        uint32(i % 3),
		ReceivedAt:     &timestamppb.Timestamp{Seconds: 1_796_000_001, Nanos: 5},
		LeaseExpiresAt: &timestamppb.Timestamp{Seconds: 1_796_000_031, Nanos: 999_999_999},
		OriginId:       id,
		Receipt:        id + "-" + fmt.Sprint(i*7919),
	}
}

// receiveMessages are ReceiveResponses of the shapes the fast encoder and
// decoder take and of those they leave to proto.
func receiveMessages() map[string]*hourglassv1.ReceiveResponse {
	common := &hourglassv1.ReceiveResponse{}
	for i := range 5 {
		common.Messages = append(common.Messages, received(i, []byte(fmt.Sprintf("body %d", i))))
	}
	common.Messages[1].Headers = []*hourglassv1.Header{{Key: "k", Value: "v"}, {Key: "", Value: "only value"}, {}}
	common.Messages[2].Body = nil
	common.Messages[3].Attempt = 1 << 31
	common.Messages[4].DeliverAt = &timestamppb.Timestamp{Seconds: -62135596800}
	sparse := &hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{{}, {Id: "x", ReceivedAt: &timestamppb.Timestamp{}}}}
	unknown := &hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{received(1, []byte("b"))}}
	unknown.Messages[0].ProtoReflect().SetUnknown([]byte{0x58, 0x01}) // field 11 = 1
	badUTF8 := &hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{received(1, nil)}}
	badUTF8.Messages[0].Topic = "\xff"
	badHeader := &hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{received(1, nil)}}
	badHeader.Messages[0].Headers = []*hourglassv1.Header{{Key: "k", Value: "\xfe"}}
	big := &hourglassv1.ReceiveResponse{}
	body := make([]byte, 256)
	for i := range 300 {
		big.Messages = append(big.Messages, received(i, body))
	}
	return map[string]*hourglassv1.ReceiveResponse{
		"common": common, "empty": {}, "sparse": sparse, "unknown_field": unknown,
		"bad_utf8_topic": badUTF8, "bad_utf8_header": badHeader, "300_messages": big,
	}
}

// receiveSeeds are encoded ReceiveResponses, including hand-made shapes
// proto.Marshal never writes.
func receiveSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, m := range receiveMessages() {
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(m)
		if err != nil {
			continue // invalid UTF-8: proto refuses to write it
		}
		out[name] = b
	}
	tag := protowire.AppendTag
	msg := func(inner []byte) []byte { return protowire.AppendBytes(tag(nil, 1, protowire.BytesType), inner) }
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	out["id_twice"] = msg(str(str(nil, 1, "a"), 1, "b"))
	out["header_key_twice"] = msg(protowire.AppendBytes(tag(nil, 3, protowire.BytesType), str(str(nil, 1, "a"), 1, "b")))
	out["attempt_as_bytes"] = msg(str(nil, 6, "x"))
	out["body_as_varint"] = msg(protowire.AppendVarint(tag(nil, 4, protowire.VarintType), 3))
	out["raw_bad_utf8_id"] = msg(protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{0xff}))
	out["raw_bad_utf8_header"] = msg(protowire.AppendBytes(tag(nil, 3, protowire.BytesType), protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0xc0})))
	out["truncated"] = out["common"][:len(out["common"])-5]
	out["empty_body"] = msg(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), nil))
	out["header_tag_in_body"] = msg(protowire.AppendBytes(tag(nil, 4, protowire.BytesType), []byte{0x1a, 0x1a, 0x1a}))
	out["big_attempt"] = msg(protowire.AppendVarint(tag(nil, 6, protowire.VarintType), 1<<40+7))
	return out
}

// checkDecodeReceive holds decodeReceiveResponse to proto.Unmarshal: where
// it decodes, proto.Unmarshal decodes the same, and the result does not
// change when data does.
func checkDecodeReceive(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	var std hourglassv1.ReceiveResponse
	stdErr := proto.Unmarshal(data, &std)
	in := append([]byte(nil), data...)
	msgs, ok := decodeReceiveResponse(in)
	if !ok {
		return false
	}
	if stdErr != nil {
		t.Fatalf("decodeReceiveResponse accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	got := &hourglassv1.ReceiveResponse{Messages: msgs}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeReceiveResponse(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeReceiveResponse(%x) kept a reference to its input", data)
	}
	// A body is the caller's to change: it must not share bytes with the
	// strings or another body.
	for _, m := range got.Messages {
		for i := range m.Body {
			m.Body[i] ^= 0xff
		}
	}
	for i, m := range got.Messages {
		if m.Id != std.Messages[i].Id || m.Receipt != std.Messages[i].Receipt || !headersEqual(m.Headers, std.Messages[i].Headers) {
			t.Fatalf("decodeReceiveResponse(%x): changing a body changed message %d's strings", data, i)
		}
	}
	return true
}

func headersEqual(a, b []*hourglassv1.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestReceiveResponseEncodeMatchesProto(t *testing.T) {
	for name, m := range receiveMessages() {
		t.Run(name, func(t *testing.T) { checkEncode(t, name, m) })
	}
}

func TestDecodeReceiveResponse(t *testing.T) {
	want := map[string]bool{ // whether the fast decoder takes it
		"common": true, "sparse": true, "300_messages": true, "empty_body": true, "header_tag_in_body": true, "big_attempt": true,
		"empty": false, "unknown_field": false, "id_twice": false, "header_key_twice": false, "attempt_as_bytes": false,
		"body_as_varint": false, "raw_bad_utf8_id": false, "raw_bad_utf8_header": false, "truncated": false,
	}
	seeds := receiveSeeds(t)
	for name, fast := range want {
		data, ok := seeds[name]
		if !ok {
			t.Fatalf("no seed %q", name)
		}
		t.Run(name, func(t *testing.T) {
			if got := checkDecodeReceive(t, data); got != fast {
				t.Errorf("fast decoder took it: %v, want %v", got, fast)
			}
			// Through the codec it always decodes as proto.Unmarshal does.
			var std, viaCodec hourglassv1.ReceiveResponse
			stdErr := proto.Unmarshal(data, &std)
			err := Codec{}.Unmarshal(data, &viaCodec)
			if (err != nil) != (stdErr != nil) || (err == nil && !proto.Equal(&std, &viaCodec)) {
				t.Errorf("Codec.Unmarshal = %v, %v; proto.Unmarshal = %v, %v", &viaCodec, err, &std, stdErr)
			}
		})
	}
}

// FuzzReceiveResponse decodes the input both ways, and encodes what
// proto.Unmarshal made of it both ways.
func FuzzReceiveResponse(f *testing.F) {
	for _, data := range receiveSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeReceive(t, data)
		var m hourglassv1.ReceiveResponse
		if proto.Unmarshal(data, &m) == nil {
			checkEncode(t, "receive response", &m)
		}
	})
}

// BenchmarkReceiveResponse encodes and decodes a ReceiveResponse of 100
// messages of 256 bytes, as the server writes and the client reads it,
// with the codec and with proto.
func BenchmarkReceiveResponse(b *testing.B) {
	m := &hourglassv1.ReceiveResponse{}
	for i := range 100 {
		m.Messages = append(m.Messages, received(i, make([]byte, 256)))
	}
	data, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, len(data))
	b.Run("encode/codec", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			buf, _ = Codec{}.MarshalAppend(buf[:0], m)
		}
	})
	b.Run("encode/proto", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], m)
		}
	})
	b.Run("decode/codec", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out hourglassv1.ReceiveResponse
			if err := (Codec{}).Unmarshal(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/proto", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out hourglassv1.ReceiveResponse
			if err := proto.Unmarshal(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

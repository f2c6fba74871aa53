package wirecodec

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// singleSeeds are encoded ScheduleResponses of the shapes decodeResponse
// takes and of those it must leave to proto.Unmarshal.
func singleSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	enc := func(r *hourglassv1.ScheduleResponse) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tag := protowire.AppendTag
	id := func(b []byte, s string) []byte { return protowire.AppendString(tag(b, 1, protowire.BytesType), s) }
	ts := func(b []byte, inner []byte) []byte {
		return protowire.AppendBytes(tag(b, 2, protowire.BytesType), inner)
	}
	server := AppendResponse(nil, message.ID{DeliverAt: 1_796_000_000_123, Seq: 4096})
	return map[string][]byte{
		"server":       server,
		"server_epoch": AppendResponse(nil, message.ID{}),
		"before_epoch": AppendResponse(nil, message.ID{DeliverAt: -1500, Seq: 1}),
		"proto":        enc(&hourglassv1.ScheduleResponse{Id: "abc", DeliverAt: &timestamppb.Timestamp{Seconds: -5, Nanos: 7}}),
		"empty":        {},
		"id_only":      id(nil, "x"),
		"time_only":    ts(nil, nil),
		"id_twice":     id(id(nil, "a"), "b"),
		"time_twice":   ts(ts(nil, nil), protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 9)),
		"time_first":   id(ts(nil, protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 9)), "z"),
		"bad_utf8_id":  id(nil, "\xff"),
		"unknown":      protowire.AppendVarint(tag(id(nil, "a"), 3, protowire.VarintType), 1),
		"varint_id":    protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1),
		"truncated":    server[:len(server)-2],
		"big_nanos":    ts(nil, protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1<<40)),
		"secs_twice": ts(nil, protowire.AppendVarint(tag(protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1),
			1, protowire.VarintType), 2)),
	}
}

// checkDecodeSingle holds decodeResponse, and Codec.Unmarshal of a
// ScheduleResponse, to proto.Unmarshal: where decodeResponse decodes, the
// message is equal and keeps no reference to the input; Codec.Unmarshal
// gives what proto.Unmarshal gives, errors included.
func checkDecodeSingle(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.ScheduleResponse
	stdErr := proto.Unmarshal(data, &std)
	var viaCodec hourglassv1.ScheduleResponse
	viaCodec.Id = "left over"
	codecErr := Codec{}.Unmarshal(data, &viaCodec)
	if (codecErr != nil) != (stdErr != nil) || (stdErr == nil && !proto.Equal(&viaCodec, &std)) {
		t.Fatalf("Codec.Unmarshal(%x) = %v, %v; proto.Unmarshal %v, %v", data, &viaCodec, codecErr, &std, stdErr)
	}
	in := append([]byte(nil), data...)
	got, ok := decodeResponse(in)
	if !ok {
		return false
	}
	if stdErr != nil {
		t.Fatalf("decodeResponse accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeResponse(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeResponse(%x) kept a reference to its input", data)
	}
	return true
}

func TestDecodeResponse(t *testing.T) {
	wantFast := map[string]bool{"server": true, "server_epoch": true, "before_epoch": true, "proto": true,
		"empty": true, "id_only": true, "time_only": true, "time_first": true, "big_nanos": true}
	for name, data := range singleSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeSingle(t, data); fast != wantFast[name] {
				t.Errorf("decodeResponse took it: %v, want %v", fast, wantFast[name])
			}
		})
	}
}

func FuzzDecodeResponse(f *testing.F) {
	for _, data := range singleSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeSingle(t, data) })
}

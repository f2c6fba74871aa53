package wirecodec

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// responseSeeds are encoded ScheduleBatchResponses of the shapes
// decodeBatchResponse takes and of those it must leave to proto.Unmarshal.
func responseSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	enc := func(rs ...*hourglassv1.ScheduleResponse) []byte {
		b, err := proto.Marshal(&hourglassv1.ScheduleBatchResponse{Results: rs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	common := enc(
		&hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e0000000000000100", DeliverAt: &timestamppb.Timestamp{Seconds: 1_796_000_000, Nanos: 123_000_000}},
		&hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e0000000000000200", DeliverAt: &timestamppb.Timestamp{Seconds: -5, Nanos: 0}},
		&hourglassv1.ScheduleResponse{DeliverAt: &timestamppb.Timestamp{}},
		&hourglassv1.ScheduleResponse{Id: "x"},
	)
	tag := protowire.AppendTag
	result := func(inner []byte) []byte { return protowire.AppendBytes(tag(nil, 1, protowire.BytesType), inner) }
	return map[string][]byte{
		"common":            common,
		"empty":             {},
		"one_zero":          enc(&hourglassv1.ScheduleResponse{}),
		"unknown_in_result": result(protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1)),
		"id_twice":          result(protowire.AppendString(tag(protowire.AppendString(tag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b")),
		"time_twice": result(protowire.AppendBytes(tag(protowire.AppendBytes(tag(nil, 2, protowire.BytesType),
			protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1)), 2, protowire.BytesType), protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 2))),
		"bad_utf8_id": result(protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{0xff})),
		"truncated":   common[:len(common)-3],
		"big_nanos":   result(protowire.AppendBytes(tag(nil, 2, protowire.BytesType), protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1<<40))),
	}
}

// checkDecodeResponse holds decodeBatchResponse to proto.Unmarshal.
func checkDecodeResponse(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.ScheduleBatchResponse
	stdErr := proto.Unmarshal(data, &std)
	in := append([]byte(nil), data...)
	results, ok := decodeBatchResponse(in)
	if !ok {
		return false
	}
	if stdErr != nil {
		t.Fatalf("decodeBatchResponse accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	got := &hourglassv1.ScheduleBatchResponse{Results: results}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeBatchResponse(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeBatchResponse(%x) kept a reference to its input", data)
	}
	return true
}

func TestDecodeBatchResponse(t *testing.T) {
	wantFast := map[string]bool{"common": true, "one_zero": true, "big_nanos": true}
	for name, data := range responseSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeResponse(t, data); fast != wantFast[name] {
				t.Errorf("decodeBatchResponse took it: %v, want %v", fast, wantFast[name])
			}
		})
	}
}

func TestCodecUnmarshalResponse(t *testing.T) {
	for name, data := range responseSeeds(t) {
		var std, got hourglassv1.ScheduleBatchResponse
		stdErr := proto.Unmarshal(data, &std)
		err := Codec{}.Unmarshal(data, &got)
		if (err != nil) != (stdErr != nil) || (err == nil && !proto.Equal(&got, &std)) {
			t.Errorf("%s: codec gave %v, %v; proto.Unmarshal %v, %v", name, &got, err, &std, stdErr)
		}
	}
}

func FuzzDecodeBatchResponse(f *testing.F) {
	for _, data := range responseSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeResponse(t, data) })
}

// BenchmarkDecodeBatchResponse decodes the answer to a ScheduleBatch of
// 100 messages both ways.
func BenchmarkDecodeBatchResponse(b *testing.B) {
	rs := make([]*hourglassv1.ScheduleResponse, 100)
	for i := range rs {
		rs[i] = &hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e00000000000001" + string(rune('a'+i%26)) + "0", DeliverAt: &timestamppb.Timestamp{Seconds: 1_796_000_000 + int64(i), Nanos: 5_000_000}}
	}
	data, err := proto.Marshal(&hourglassv1.ScheduleBatchResponse{Results: rs})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m hourglassv1.ScheduleBatchResponse
			if err := proto.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m hourglassv1.ScheduleBatchResponse
			if err := (Codec{}).Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

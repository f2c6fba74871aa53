package wirecodec

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// batchSeeds are encoded ScheduleBatchRequests of the shapes decodeBatch
// takes and of those it must leave to proto.Unmarshal.
func batchSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	enc := func(msgs ...*hourglassv1.ScheduleRequest) []byte {
		b, err := proto.Marshal(&hourglassv1.ScheduleBatchRequest{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	delay := func(ms int64) *hourglassv1.ScheduleRequest_DelayMs {
		return &hourglassv1.ScheduleRequest_DelayMs{DelayMs: ms}
	}
	common := enc(
		&hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("a"), When: delay(3_600_000)},
		&hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("bb"), When: delay(-5)},
		&hourglassv1.ScheduleRequest{Topic: "payments", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 3}, IdempotencyKey: "k1"},
		&hourglassv1.ScheduleRequest{Topic: "orders"},
	)
	return map[string][]byte{
		"common":      common,
		"empty":       {},
		"one_empty":   enc(&hourglassv1.ScheduleRequest{}),
		"headers":     enc(&hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}}}),
		"deliver_at":  enc(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(timestamppb.Now().AsTime())}}),
		"topic_twice": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendString(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b")),
		"unknown_top": protowire.AppendVarint(protowire.AppendTag(common, 9, protowire.VarintType), 1),
		"truncated":   common[:len(common)-1],
		"level_and_delay": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 7), 6, protowire.VarintType), 2)),
		"invalid_utf8_topic": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xc3, 0x28})),
	}
}

// checkDecodeBatch holds decodeBatch to proto.Unmarshal: where it decodes,
// the standard decoder must succeed with an equal message, and the result
// must not share memory with data.
func checkDecodeBatch(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.ScheduleBatchRequest
	stdErr := proto.Unmarshal(data, &std)
	in := append([]byte(nil), data...)
	msgs, ok := decodeBatch(in)
	if !ok {
		return false
	}
	if stdErr != nil {
		t.Fatalf("decodeBatch accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	got := &hourglassv1.ScheduleBatchRequest{Messages: msgs}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeBatch(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	for i := range in {
		in[i] ^= 0xff // connect reuses its buffer: the result must not change
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeBatch(%x) kept a reference to its input", data)
	}
	return true
}

func TestDecodeBatch(t *testing.T) {
	wantFast := map[string]bool{"common": true, "one_empty": true, "deliver_at": true}
	for name, data := range batchSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeBatch(t, data); fast != wantFast[name] {
				t.Errorf("decodeBatch took it: %v, want %v", fast, wantFast[name])
			}
		})
	}
}

func TestCodecUnmarshalFallsBack(t *testing.T) {
	for name, data := range batchSeeds(t) {
		var std, got hourglassv1.ScheduleBatchRequest
		stdErr := proto.Unmarshal(data, &std)
		err := Codec{}.Unmarshal(data, &got)
		if (err != nil) != (stdErr != nil) || (err == nil && !proto.Equal(&got, &std)) {
			t.Errorf("%s: codec gave %v, %v; proto.Unmarshal %v, %v", name, &got, err, &std, stdErr)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, data := range batchSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeBatch(t, data) })
}

// BenchmarkDecodeBatch decodes a ScheduleBatch of 100 messages of 256
// bytes (bench server's batch scenario) both ways.
func BenchmarkDecodeBatch(b *testing.B) {
	msgs := make([]*hourglassv1.ScheduleRequest, 100)
	for i := range msgs {
		msgs[i] = &hourglassv1.ScheduleRequest{Topic: "bench", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	}
	data, err := proto.Marshal(&hourglassv1.ScheduleBatchRequest{Messages: msgs})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var m hourglassv1.ScheduleBatchRequest
			if err := proto.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var m hourglassv1.ScheduleBatchRequest
			if err := (Codec{}).Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzVarint holds varint and lengthPrefixed to protowire's
// ConsumeVarint and ConsumeBytes: the same results, and failing on the
// same input.
func FuzzVarint(f *testing.F) {
	for _, b := range [][]byte{{}, {0x00}, {0x7f}, {0x01, 'x'}, {0x80, 0x01}, {0xff, 0x7f}, {0x80, 0x80, 0x01}, {0x80}, {0x05}, {0x02, 'a'}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x1, rest1, ok1 := varint(b)
		x2, n2 := protowire.ConsumeVarint(b)
		if ok1 != (n2 >= 0) || (ok1 && (x1 != x2 || len(rest1) != len(b)-n2)) {
			t.Fatalf("varint(%x) = %d, %d left, %v; protowire %d, %d", b, x1, len(rest1), ok1, x2, n2)
		}
		v1, rest1, ok1 := lengthPrefixed(b)
		v2, n2 := protowire.ConsumeBytes(b)
		if ok1 != (n2 >= 0) || (ok1 && (string(v1) != string(v2) || len(rest1) != len(b)-n2)) {
			t.Fatalf("lengthPrefixed(%x) = %x, %d left, %v; protowire %x, %d", b, v1, len(rest1), ok1, v2, n2)
		}
	})
}

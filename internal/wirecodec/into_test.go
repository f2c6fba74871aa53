package wirecodec

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// requestSeeds are encoded ScheduleRequests of the shapes decodeRequest
// takes and of those it must leave to proto.Unmarshal.
func requestSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	enc := func(m *hourglassv1.ScheduleRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tag := protowire.AppendTag
	return map[string][]byte{
		"common":       enc(&hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("abc"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}),
		"level_key":    enc(&hourglassv1.ScheduleRequest{Topic: "pay", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 3}, IdempotencyKey: "k1"}),
		"negative":     enc(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: -5}}),
		"empty":        {},
		"headers":      enc(&hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}}}),
		"deliver_at":   enc(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: &timestamppb.Timestamp{Seconds: 5}}}),
		"body_twice":   protowire.AppendBytes(tag(protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte("a")), 2, protowire.BytesType), []byte("b")),
		"key_twice":    protowire.AppendString(tag(protowire.AppendString(tag(nil, 7, protowire.BytesType), "a"), 7, protowire.BytesType), "b"),
		"bad_utf8_key": protowire.AppendBytes(tag(nil, 7, protowire.BytesType), []byte{0xff}),
		"unknown":      protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1),
		"truncated":    []byte{0x0a, 0x05, 'a'},
	}
}

// checkDecodeRequest holds decodeRequest to proto.Unmarshal, as
// checkDecodeBatch does decodeBatch.
func checkDecodeRequest(t *testing.T, data []byte) (fast bool) {
	var std hourglassv1.ScheduleRequest
	stdErr := proto.Unmarshal(data, &std)
	in := append([]byte(nil), data...)
	got, ok := decodeRequest(in)
	if !ok {
		return false
	}
	if stdErr != nil {
		t.Fatalf("decodeRequest accepted %x, which proto.Unmarshal refuses: %v", data, stdErr)
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeRequest(%x) = %v, proto.Unmarshal = %v", data, got, &std)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	if !proto.Equal(got, &std) {
		t.Fatalf("decodeRequest(%x) kept a reference to its input", data)
	}
	var viaCodec hourglassv1.ScheduleRequest
	if err := (Codec{}).Unmarshal(data, &viaCodec); err != nil || !proto.Equal(&viaCodec, &std) {
		t.Fatalf("Codec.Unmarshal(%x) = %v, %v; proto.Unmarshal %v", data, &viaCodec, err, &std)
	}
	return true
}

func TestDecodeRequest(t *testing.T) {
	wantFast := map[string]bool{"common": true, "level_key": true, "negative": true, "empty": true, "deliver_at": true, "deliver_at_nanos": true, "deliver_at_empty": true}
	for name, data := range requestSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if fast := checkDecodeRequest(t, data); fast != wantFast[name] {
				t.Errorf("decodeRequest took it: %v, want %v", fast, wantFast[name])
			}
			var std, got hourglassv1.ScheduleRequest
			stdErr := proto.Unmarshal(data, &std)
			err := Codec{}.Unmarshal(data, &got)
			if (err != nil) != (stdErr != nil) || (err == nil && !proto.Equal(&got, &std)) {
				t.Errorf("codec gave %v, %v; proto.Unmarshal %v, %v", &got, err, &std, stdErr)
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, data := range requestSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeRequest(t, data) })
}

// checkDecodeInto decodes first and then second into the same Requests
// (as the server does with pooled memory) and holds the second result to
// proto.Unmarshal: nothing of the first may stay. Bodies alias the input;
// topics come from the Strings function and do not.
func checkDecodeInto(t *testing.T, first, second []byte, batch bool) {
	var r Requests
	calls := 0
	topic := func(b []byte) string { calls++; return string(b) }
	decode := func(data []byte) bool {
		if batch {
			return DecodeBatchInto(data, &r, topic)
		}
		return DecodeRequestInto(data, &r, topic)
	}
	decode(append([]byte(nil), first...))
	in := append([]byte(nil), second...)
	calls = 0
	if !decode(in) {
		return
	}
	var want []*hourglassv1.ScheduleRequest
	if batch {
		var std hourglassv1.ScheduleBatchRequest
		if err := proto.Unmarshal(second, &std); err != nil {
			t.Fatalf("DecodeBatchInto accepted %x, which proto.Unmarshal refuses: %v", second, err)
		}
		want = std.Messages
	} else {
		var std hourglassv1.ScheduleRequest
		if err := proto.Unmarshal(second, &std); err != nil {
			t.Fatalf("DecodeRequestInto accepted %x, which proto.Unmarshal refuses: %v", second, err)
		}
		want = []*hourglassv1.ScheduleRequest{&std}
	}
	if len(r.Msgs) != len(want) {
		t.Fatalf("decoded %d messages of %x after %x, want %d", len(r.Msgs), second, first, len(want))
	}
	runs := 0
	for i, m := range r.Msgs {
		if !proto.Equal(m, want[i]) {
			t.Fatalf("message %d of %x after %x: %v, want %v", i, second, first, m, want[i])
		}
		if i == 0 || m.Topic != r.Msgs[i-1].Topic {
			runs++
		}
		if len(m.Body) > 0 && !bytes.Contains(in, m.Body) {
			t.Fatalf("message %d: body %x is not in the input", i, m.Body)
		}
	}
	if calls > runs {
		t.Errorf("%d calls of the topic function for %d runs of equal topics", calls, runs)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	for i, m := range r.Msgs {
		if m.Topic != want[i].Topic || m.IdempotencyKey != want[i].IdempotencyKey {
			t.Fatalf("message %d: a string aliases the input", i)
		}
		if len(m.Body) > 0 && bytes.Equal(m.Body, want[i].Body) {
			t.Fatalf("message %d: the body does not alias the input", i)
		}
	}
}

func TestDecodeInto(t *testing.T) {
	batches, requests := batchSeeds(t), requestSeeds(t)
	for a, first := range batches {
		for b, second := range batches {
			t.Run("batch/"+a+"/"+b, func(t *testing.T) { checkDecodeInto(t, first, second, true) })
		}
	}
	for a, first := range requests {
		for b, second := range requests {
			t.Run("request/"+a+"/"+b, func(t *testing.T) { checkDecodeInto(t, first, second, false) })
		}
	}
	// A long batch, then a short one: the short one must not see the rest.
	var r Requests
	if !DecodeBatchInto(batches["common"], &r, copyString) || len(r.Msgs) != 4 {
		t.Fatal("common batch not decoded")
	}
	if !DecodeBatchInto(batches["one_empty"], &r, copyString) || len(r.Msgs) != 1 || r.Msgs[0].Topic != "" || r.Msgs[0].When != nil {
		t.Fatalf("after a batch of 4, one empty message decoded as %v", r.Msgs)
	}
}

func FuzzDecodeInto(f *testing.F) {
	for _, a := range batchSeeds(f) {
		for _, b := range requestSeeds(f) {
			f.Add(a, b)
			f.Add(b, a)
		}
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		checkDecodeInto(t, first, second, true)
		checkDecodeInto(t, first, second, false)
	})
}

// checkAppendResponses holds AppendResponse and AppendResponses to
// proto.Marshal of the messages the server builds for the same IDs.
func checkAppendResponses(t *testing.T, ids ...message.ID) {
	t.Helper()
	want := &hourglassv1.ScheduleBatchResponse{}
	for _, id := range ids {
		one := &hourglassv1.ScheduleResponse{Id: id.String(), DeliverAt: timestamppb.New(time.UnixMilli(id.DeliverAt))}
		w, err := proto.Marshal(one)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendResponse([]byte("p"), id); !bytes.Equal(got, append([]byte("p"), w...)) {
			t.Fatalf("AppendResponse(%v) = %x, proto.Marshal %x", id, got[1:], w)
		}
		if n := responseSize(id); n != len(w) {
			t.Fatalf("responseSize(%v) = %d, encoded %d", id, n, len(w))
		}
		want.Results = append(want.Results, one)
	}
	w, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendResponses([]byte("p"), ids); !bytes.Equal(got, append([]byte("p"), w...)) {
		t.Fatalf("AppendResponses(%v) = %x, proto.Marshal %x", ids, got[1:], w)
	}
}

func TestAppendResponses(t *testing.T) {
	checkAppendResponses(t)
	checkAppendResponses(t, message.ID{})
	checkAppendResponses(t,
		message.ID{DeliverAt: 1_796_014_801_500, Seq: 42},
		message.ID{DeliverAt: 1_796_014_801_000, Seq: 1 << 40},
		message.ID{DeliverAt: 999, Seq: 0},
		message.ID{DeliverAt: -1, Seq: 1<<64 - 1},
		message.ID{DeliverAt: -1 << 63, Seq: 7},
		message.ID{DeliverAt: 1<<63 - 1, Seq: 8},
		message.ID{DeliverAt: 253_402_300_799_999, Seq: 9}, // 9999-12-31T23:59:59.999Z
	)
}

func FuzzAppendResponses(f *testing.F) {
	f.Add(int64(1_796_014_801_500), uint64(42), int64(-1), uint64(0))
	f.Fuzz(func(t *testing.T, at1 int64, seq1 uint64, at2 int64, seq2 uint64) {
		checkAppendResponses(t, message.ID{DeliverAt: at1, Seq: seq1}, message.ID{DeliverAt: at2, Seq: seq2})
	})
}

// BenchmarkDecodeBatchInto decodes a ScheduleBatch of 100 messages of 256
// bytes into reused memory, as the server's fast path does.
func BenchmarkDecodeBatchInto(b *testing.B) {
	msgs := make([]*hourglassv1.ScheduleRequest, 100)
	for i := range msgs {
		msgs[i] = &hourglassv1.ScheduleRequest{Topic: "bench", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	}
	data, err := proto.Marshal(&hourglassv1.ScheduleBatchRequest{Messages: msgs})
	if err != nil {
		b.Fatal(err)
	}
	var r Requests
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if !DecodeBatchInto(data, &r, copyString) {
			b.Fatal("not decoded")
		}
	}
}

// BenchmarkAppendResponses encodes the answer to a ScheduleBatch of 100.
func BenchmarkAppendResponses(b *testing.B) {
	ids := make([]message.ID, 100)
	for i := range ids {
		ids[i] = message.ID{DeliverAt: 1_796_014_801_500 + int64(i)*7, Seq: 1<<30 + uint64(i)*300}
	}
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		out = AppendResponses(out[:0], ids)
	}
}

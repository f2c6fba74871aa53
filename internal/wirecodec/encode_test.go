package wirecodec

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// checkEncode holds Codec.MarshalAppend to proto.Marshal: the same bytes,
// or both fail; and what is in dst stays.
func checkEncode(t *testing.T, name string, m proto.Message) {
	t.Helper()
	want, wantErr := proto.Marshal(m)
	got, err := Codec{}.MarshalAppend([]byte("prefix"), m)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s: codec error %v, proto.Marshal error %v", name, err, wantErr)
	}
	if err != nil {
		return
	}
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[6:], want) {
		t.Fatalf("%s: codec wrote\n%x\nproto.Marshal\n%x", name, got, want)
	}
}

func TestEncodeMatchesProto(t *testing.T) {
	ts := &timestamppb.Timestamp{Seconds: 1_796_000_000, Nanos: 123_000_000}
	withUnknown := &hourglassv1.ScheduleRequest{Topic: "t"}
	withUnknown.ProtoReflect().SetUnknown([]byte{0x48, 0x01}) // field 9 = 1
	for name, m := range map[string]proto.Message{
		"request_common": &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "orders", Body: []byte("abc"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}},
			{Topic: "orders", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 0}},
			{Topic: "orders", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: -1}},
			{Topic: "pay", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: -3}, IdempotencyKey: "k"},
			{When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: ts}},
			{When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: &timestamppb.Timestamp{Nanos: -1}}},
			{Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}, {}, {Value: "only"}}},
			{},
		}},
		"request_empty":          &hourglassv1.ScheduleBatchRequest{},
		"request_nil_message":    &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{nil}},
		"request_bad_utf8_topic": &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{Topic: "\xff"}}},
		"request_bad_utf8_header": &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "\xc3\x28"}}}}},
		"request_nil_deliver_at": &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{When: &hourglassv1.ScheduleRequest_DeliverAt{}}}},
		"request_unknown":        &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{withUnknown}},
		"response_common": &hourglassv1.ScheduleBatchResponse{Results: []*hourglassv1.ScheduleResponse{
			{Id: "0000019a1b2c3d4e0000000000000100", DeliverAt: ts},
			{Id: "x", DeliverAt: &timestamppb.Timestamp{}},
			{Id: "y"},
			{},
		}},
		"response_empty":    &hourglassv1.ScheduleBatchResponse{},
		"response_nil":      &hourglassv1.ScheduleBatchResponse{Results: []*hourglassv1.ScheduleResponse{nil}},
		"response_bad_utf8": &hourglassv1.ScheduleBatchResponse{Results: []*hourglassv1.ScheduleResponse{{Id: "\xff"}}},
	} {
		checkEncode(t, name, m)
	}
}

// TestEncodeRequestMatchesProto holds the single ScheduleRequest encoder
// to proto.Marshal, and what it writes to proto.Unmarshal: the bytes decode
// to an equal message.
func TestEncodeRequestMatchesProto(t *testing.T) {
	withUnknown := &hourglassv1.ScheduleRequest{Topic: "t"}
	withUnknown.ProtoReflect().SetUnknown([]byte{0x48, 0x01})
	for name, m := range map[string]*hourglassv1.ScheduleRequest{
		"common":         {Topic: "orders", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}},
		"empty":          {},
		"zero_delay":     {Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{}},
		"negative_delay": {Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: -1}},
		"level":          {Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 3}, IdempotencyKey: "key-1"},
		"negative_level": {Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: -2}},
		"deliver_at":     {Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: &timestamppb.Timestamp{Seconds: 1_796_000_000, Nanos: 5}}},
		"zero_time":      {Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: &timestamppb.Timestamp{}}},
		"headers":        {Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}, {}, {Value: "only"}}},
		"big_body":       {Topic: "t", Body: make([]byte, 70_000)},
		"nil":            nil,
		"nil_header":     {Topic: "t", Headers: []*hourglassv1.Header{nil}},
		"nil_time":       {Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{}},
		"bad_utf8_topic": {Topic: "\xff"},
		"bad_utf8_key":   {Topic: "t", IdempotencyKey: "\xc3\x28"},
		"unknown":        withUnknown,
	} {
		checkEncode(t, name, m)
		got, ok := AppendRequest([]byte("x"), m)
		if !ok {
			if string(got) != "x" {
				t.Errorf("%s: AppendRequest refused it but changed its buffer to %q", name, got)
			}
			continue
		}
		var back hourglassv1.ScheduleRequest
		if err := proto.Unmarshal(got[1:], &back); err != nil || !proto.Equal(&back, m) {
			t.Errorf("%s: AppendRequest wrote bytes that decode to %v, %v", name, &back, err)
		}
	}
}

// FuzzEncode decodes the input as either message with proto.Unmarshal
// and encodes it both ways.
func FuzzEncode(f *testing.F) {
	for _, data := range batchSeeds(f) {
		f.Add(data)
	}
	for _, data := range responseSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req hourglassv1.ScheduleBatchRequest
		if proto.Unmarshal(data, &req) == nil {
			checkEncode(t, "request", &req)
		}
		var res hourglassv1.ScheduleBatchResponse
		if proto.Unmarshal(data, &res) == nil {
			checkEncode(t, "response", &res)
		}
		var one hourglassv1.ScheduleRequest
		if proto.Unmarshal(data, &one) == nil {
			checkEncode(t, "single request", &one)
		}
	})
}

// BenchmarkEncode encodes a ScheduleBatch of 100 messages of 256 bytes
// and its answer, both ways.
func BenchmarkEncode(b *testing.B) {
	msgs := make([]*hourglassv1.ScheduleRequest, 100)
	rs := make([]*hourglassv1.ScheduleResponse, 100)
	for i := range msgs {
		msgs[i] = &hourglassv1.ScheduleRequest{Topic: "bench", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
		rs[i] = &hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e0000000000000100", DeliverAt: &timestamppb.Timestamp{Seconds: 1_796_000_000, Nanos: 5_000_000}}
	}
	for name, m := range map[string]proto.Message{
		"request":  &hourglassv1.ScheduleBatchRequest{Messages: msgs},
		"response": &hourglassv1.ScheduleBatchResponse{Results: rs},
	} {
		buf := make([]byte, 0, 64<<10)
		b.Run(name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (proto.MarshalOptions{}).MarshalAppend(buf[:0], m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (Codec{}).MarshalAppend(buf[:0], m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package vtcodec

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func samples() []proto.Message {
	at := timestamppb.New(time.Date(2030, 1, 2, 9, 0, 0, 123_000_000, time.UTC))
	big := bytes.Repeat([]byte("x"), 64<<10) // above grpc-go's pooling threshold
	return []proto.Message{
		&hourglassv1.ScheduleRequest{},
		&hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("hello"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 1500},
			Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}}, IdempotencyKey: "order-42"},
		&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "a", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: at}}, {Topic: "b", Body: big, When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 3}}}},
		&hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{{Id: "0123", Topic: "t", Body: []byte{0, 1, 2}, DeliverAt: at, Attempt: 2, Receipt: "r"}}},
		&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{Ref: 7, Acks: []*hourglassv1.SeqRange{{First: 1, Count: 3}}, Nacks: []*hourglassv1.ConsumeNack{{Seq: 9, DelayMs: 5}}}}},
		&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: &hourglassv1.ConsumeBatch{Topic: "t", FirstSeq: 1, Ids: make([]byte, 32),
			Bodies: [][]byte{{1}, {}}, DeliverAtMs: 1, DeliverAtDeltas: []int64{0, -1}, HeaderCounts: []uint32{0, 1}, HeaderKeys: []string{"k"}, HeaderValues: []string{"v"}}}},
		&grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, // no vtproto methods: the library's path
	}
}

// TestSameBytes: both codecs write what the protobuf library writes and
// read it back to an equal message, for messages with and without
// vtprotobuf's methods.
func TestSameBytes(t *testing.T) {
	for _, m := range samples() {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := GRPC{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := bs.Materialize()
		bs.Free()
		c, err := Connect{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || !bytes.Equal(c, want) {
			t.Errorf("%T: gRPC %d bytes, Connect %d, the library %d; want the same bytes", m, len(got), len(c), len(want))
		}
		back := m.ProtoReflect().New().Interface()
		if err := (GRPC{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%T: gRPC read back %v, %v", m, back, err)
		}
		back = m.ProtoReflect().New().Interface()
		if err := (Connect{}).Unmarshal(want, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%T: Connect read back %v, %v", m, back, err)
		}
		back = m.ProtoReflect().New().Interface()
		if err := (GRPCShared{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%T: GRPCShared read back %v, %v", m, back, err)
		}
	}
}

// TestSharedOwnsItsCopy: grpc-go reuses the buffers a message arrived in
// once Unmarshal returns, so a message GRPCShared decoded must not share
// them: it is unchanged after they are overwritten.
func TestSharedOwnsItsCopy(t *testing.T) {
	m := &hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: &hourglassv1.ConsumeBatch{
		Topic: "orders", FirstSeq: 1, Ids: bytes.Repeat([]byte{7}, 32), Bodies: [][]byte{bytes.Repeat([]byte("b"), 40<<10), []byte("second")},
		DeliverAtDeltas: []int64{0, 1}, HeaderCounts: []uint32{1, 0}, HeaderKeys: []string{"k"}, HeaderValues: []string{"v"},
	}}}
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range []int{16 << 10, len(want)} { // in pieces, and in one buffer
		var in mem.BufferSlice
		for b := bytes.Clone(want); len(b) > 0; b = b[min(len(b), piece):] {
			in = append(in, mem.SliceBuffer(b[:min(len(b), piece)]))
		}
		back := &hourglassv1.ConsumeResponse{}
		if err := (GRPCShared{}).Unmarshal(in, back); err != nil {
			t.Fatal(err)
		}
		for _, b := range in {
			clear(b.ReadOnlyData())
		}
		if !proto.Equal(back, m) {
			t.Errorf("%d buffers: the message changed when the buffers it arrived in were overwritten: %v", len(in), back)
		}
	}
}

// FuzzUnmarshal holds vtprotobuf's decoders of the requests the server
// reads to the protobuf library's: no panic on any input, equal messages
// when both accept it, and vtprotobuf refuses what the library accepts
// only for a field with a wire type the schema does not give it (the
// library keeps that as an unknown field). vtprotobuf is more lenient
// the other way (strings that are not UTF-8, over-long varints, field
// numbers out of range in unknown fields): the server checks every field
// it uses (server/validate.go), so that leniency admits no value the
// checks would not.
func FuzzUnmarshal(f *testing.F) {
	for _, m := range samples() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&hourglassv1.ScheduleRequest{}, &hourglassv1.ScheduleBatchRequest{},
			&hourglassv1.ScheduleStreamRequest{}, &hourglassv1.ConsumeRequest{}, &hourglassv1.ReceiveRequest{}, &hourglassv1.AckBatchRequest{}} {
			lib := m.ProtoReflect().New().Interface()
			libErr := proto.Unmarshal(b, lib)
			vt := m.ProtoReflect().New().Interface()
			vtErr := Connect{}.Unmarshal(b, vt)
			switch {
			case libErr == nil && vtErr != nil && !strings.Contains(vtErr.Error(), "wrong wireType"):
				t.Fatalf("%T: the library accepts it, vtprotobuf says %v", m, vtErr)
			}
			// Unknown fields are left out: the server never reads them, and
			// vtprotobuf drops those of the well-known Timestamp.
			if libErr == nil && vtErr == nil && !proto.Equal(known(lib), known(vt)) {
				t.Fatalf("%T: library %v, vtprotobuf %v", m, lib, vt)
			}
		}
	})
}

// FuzzUnmarshalShared holds GRPCShared's decoders of what the client
// reads (vtprotobuf's UnmarshalVTUnsafe) to the protobuf library's, as
// FuzzUnmarshal does for the server's requests.
func FuzzUnmarshalShared(f *testing.F) {
	for _, m := range samples() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&hourglassv1.ConsumeResponse{}, &hourglassv1.ReceiveResponse{}, &hourglassv1.ScheduleBatchResponse{},
			&hourglassv1.ScheduleStreamResponse{}, &hourglassv1.ScheduleResponse{}, &hourglassv1.AckBatchResponse{}} {
			lib := m.ProtoReflect().New().Interface()
			libErr := proto.Unmarshal(b, lib)
			vt := m.ProtoReflect().New().Interface()
			vtErr := GRPCShared{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, vt)
			if libErr == nil && vtErr != nil && !strings.Contains(vtErr.Error(), "wrong wireType") {
				t.Fatalf("%T: the library accepts it, vtprotobuf says %v", m, vtErr)
			}
			if libErr == nil && vtErr == nil && !proto.Equal(known(lib), known(vt)) {
				t.Fatalf("%T: library %v, vtprotobuf %v", m, lib, vt)
			}
		}
	})
}

// known drops m's unknown fields, in every message within it.
func known(m proto.Message) proto.Message {
	dropUnknown(m.ProtoReflect())
	return m
}

func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				dropUnknown(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			dropUnknown(v.Message())
		}
		return true
	})
}

// TestPoolReuse: messages of sizes across the pool's tiers and beyond its
// largest (4 MiB) encode to the library's bytes when the buffers are
// reused, the larger one freed before each smaller one, and decode from
// pooled buffers joined from many pieces.
func TestPoolReuse(t *testing.T) {
	var want [][]byte
	var msgs []proto.Message
	for _, n := range []int{5 << 20, 600 << 10, 40 << 10, 3 << 10, 300} {
		m := &hourglassv1.ReceiveResponse{Messages: []*hourglassv1.Message{{Id: "id", Topic: "t", Body: bytes.Repeat([]byte{byte(n)}, n)}}}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		msgs, want = append(msgs, m), append(want, b)
	}
	for round := range 3 {
		for i, m := range msgs {
			bs, err := GRPC{}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := bs.Materialize(); !bytes.Equal(got, want[i]) {
				t.Fatalf("round %d, message of %d bytes: encoded %d bytes unlike the library's", round, len(want[i]), len(got))
			}
			bs.Free()
			// As received: in 16 KiB pieces.
			var in mem.BufferSlice
			for b := want[i]; len(b) > 0; b = b[min(len(b), 16<<10):] {
				in = append(in, mem.SliceBuffer(b[:min(len(b), 16<<10)]))
			}
			back := &hourglassv1.ReceiveResponse{}
			if err := (GRPC{}).Unmarshal(in, back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("round %d, message of %d bytes: read back unequal (%v)", round, len(want[i]), err)
			}
		}
	}
}

// BenchmarkUnmarshalConsume decodes 100 messages of 256 bytes with an
// ID, two headers and their times, as received (16 KiB pieces), with GRPC
// and with GRPCShared: as a ReceiveResponse (a receipt, an origin ID and
// three times each) and as the ConsumeBatch a Consume stream pushes.
func BenchmarkUnmarshalConsume(b *testing.B) {
	at := timestamppb.New(time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC))
	rr := &hourglassv1.ReceiveResponse{}
	cb := &hourglassv1.ConsumeBatch{FirstSeq: 1, ReceivedAtMs: 1_900_000_000_000, LeaseExpiresAtMs: 1_900_000_030_000, DeliverAtMs: 1_900_000_000_000,
		HeaderCounts: make([]uint32, 100)}
	for i := range 100 {
		body := bytes.Repeat([]byte{byte(i)}, 256)
		rr.Messages = append(rr.Messages, &hourglassv1.Message{Id: "0123456789abcdef0123456789abcdef", OriginId: "0123456789abcdef0123456789abcdef",
			Topic: "orders", Body: body, DeliverAt: at, ReceivedAt: at, LeaseExpiresAt: at,
			Receipt: "0123456789abcdef0123456789abcdef.1f", Headers: []*hourglassv1.Header{{Key: "hourglass-idempotency-key", Value: "msg-000123"}, {Key: "hourglass-idempotency-at", Value: "1700000000000"}}})
		cb.Ids = append(cb.Ids, bytes.Repeat([]byte{0x01}, 16)...)
		cb.Bodies = append(cb.Bodies, body)
		cb.DeliverAtDeltas = append(cb.DeliverAtDeltas, -int64(i))
		cb.HeaderCounts[i] = 2
		cb.HeaderKeys = append(cb.HeaderKeys, "hourglass-idempotency-key", "hourglass-idempotency-at")
		cb.HeaderValues = append(cb.HeaderValues, "msg-000123", "1700000000000")
	}
	for _, form := range []struct {
		name string
		m    proto.Message
		new  func() any
	}{
		{"Receive", rr, func() any { return &hourglassv1.ReceiveResponse{} }},
		{"ConsumeBatch", &hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: cb}}, func() any { return &hourglassv1.ConsumeResponse{} }},
	} {
		want, err := proto.Marshal(form.m)
		if err != nil {
			b.Fatal(err)
		}
		var in mem.BufferSlice
		for p := want; len(p) > 0; p = p[min(len(p), 16<<10):] {
			in = append(in, mem.SliceBuffer(p[:min(len(p), 16<<10)]))
		}
		for _, c := range []struct {
			name  string
			codec interface {
				Unmarshal(mem.BufferSlice, any) error
			}
		}{{"GRPC", GRPC{}}, {"GRPCShared", GRPCShared{}}} {
			b.Run(form.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(want)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.codec.Unmarshal(in, form.new()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

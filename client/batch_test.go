package client

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/vtcodec"
	"github.com/hourglassmq/hourglass/message"
)

// testBatch is a batch of n messages of 256 bytes as the server pushes it;
// with headers, each has two, and message 1 is a retry of message 0.
func testBatch(n int, headers bool) *hourglassv1.ConsumeBatch {
	b := &hourglassv1.ConsumeBatch{Topic: "orders", FirstSeq: 41, ReceivedAtMs: 1_900_000_000_500, LeaseExpiresAtMs: 1_900_000_030_500, DeliverAtMs: 1_900_000_000_000}
	for i := range n {
		b.Ids = message.ID{DeliverAt: 1_900_000_000_000 + int64(i), Seq: uint64(i)}.AppendBinary(b.Ids)
		b.Bodies = append(b.Bodies, bytes.Repeat([]byte{byte(i)}, 256))
		b.DeliverAtDeltas = append(b.DeliverAtDeltas, int64(i))
	}
	if headers {
		b.Attempts = make([]uint32, n)
		b.Attempts[1] = 2
		b.OriginIds = make([]byte, 16*n)
		message.ID{DeliverAt: 1_900_000_000_000, Seq: 0}.AppendBinary(b.OriginIds[16:16])
		for range n {
			b.HeaderCounts = append(b.HeaderCounts, 2)
			b.HeaderKeys = append(b.HeaderKeys, "hourglass-idempotency-key", "trace")
			b.HeaderValues = append(b.HeaderValues, "msg-000123", "t1")
		}
	}
	return b
}

// TestBatchDeliveries: a pushed batch becomes one Delivery per message
// with what the batch shares and what each has; batches whose fields
// disagree are refused.
func TestBatchDeliveries(t *testing.T) {
	b := testBatch(3, true)
	ds, err := batchDeliveries(nil, "orders", b)
	if err != nil || len(ds) != 3 {
		t.Fatalf("batchDeliveries = %d, %v", len(ds), err)
	}
	id0 := ID{m: message.ID{DeliverAt: 1_900_000_000_000, Seq: 0}, ok: true}
	for i, d := range ds {
		if d.Topic != "orders" || d.Body[0] != byte(i) || d.ID.m.Seq != uint64(i) || !d.DeliverAt.Equal(time.UnixMilli(1_900_000_000_000+int64(i))) ||
			!d.ReceivedAt.Equal(time.UnixMilli(1_900_000_000_500)) || !d.LeaseExpiresAt.Equal(time.UnixMilli(1_900_000_030_500)) ||
			d.Headers["trace"] != "t1" || len(d.Headers) != 2 || d.Receipt != "" {
			t.Errorf("delivery %d: %+v", i, d)
		}
	}
	if ds[1].Attempt != 2 || ds[1].OriginID != id0 || ds[0].OriginID != ds[0].ID || ds[2].OriginID != ds[2].ID {
		t.Errorf("retry: attempt %d origin %v; others' origins %v %v", ds[1].Attempt, ds[1].OriginID, ds[0].OriginID, ds[2].OriginID)
	}
	plain, err := batchDeliveries(nil, "orders", testBatch(2, false))
	if err != nil || plain[0].Headers != nil || plain[1].Attempt != 0 || plain[1].OriginID != plain[1].ID {
		t.Errorf("a batch without headers, attempts or origins: %+v, %v", plain, err)
	}
	for _, tc := range []struct {
		name   string
		break_ func(b *hourglassv1.ConsumeBatch)
	}{
		{"no_messages", func(b *hourglassv1.ConsumeBatch) { b.Bodies = nil }},
		{"first_seq_zero", func(b *hourglassv1.ConsumeBatch) { b.FirstSeq = 0 }},
		{"short_ids", func(b *hourglassv1.ConsumeBatch) { b.Ids = b.Ids[:40] }},
		{"negative_id", func(b *hourglassv1.ConsumeBatch) { b.Ids[0] = 0x80 }},
		{"few_times", func(b *hourglassv1.ConsumeBatch) { b.DeliverAtDeltas = b.DeliverAtDeltas[:2] }},
		{"few_attempts", func(b *hourglassv1.ConsumeBatch) { b.Attempts = b.Attempts[:1] }},
		{"short_origins", func(b *hourglassv1.ConsumeBatch) { b.OriginIds = b.OriginIds[:16] }},
		{"header_counts_beyond", func(b *hourglassv1.ConsumeBatch) { b.HeaderCounts[2] = 3 }},
		{"headers_beyond", func(b *hourglassv1.ConsumeBatch) { b.HeaderCounts[2] = 1 }},
		{"keys_without_values", func(b *hourglassv1.ConsumeBatch) { b.HeaderValues = b.HeaderValues[:5] }},
		{"few_receipts", func(b *hourglassv1.ConsumeBatch) { b.Receipts = []string{"r"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBatch(3, true)
			tc.break_(b)
			if ds, err := batchDeliveries(nil, "orders", b); err == nil || len(ds) != 0 {
				t.Errorf("batchDeliveries = %d deliveries, %v; want an error and none", len(ds), err)
			}
		})
	}
}

// FuzzBatchDeliveries: whatever a pushed response holds, decoding it and
// its deliveries never panics, and a batch accepted gives one delivery
// per body.
func FuzzBatchDeliveries(f *testing.F) {
	for _, b := range []*hourglassv1.ConsumeBatch{testBatch(3, true), testBatch(1, false)} {
		wire, err := proto.Marshal(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: b}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		res := &hourglassv1.ConsumeResponse{}
		if err := res.UnmarshalVT(wire); err != nil || res.GetBatch() == nil {
			return
		}
		ds, err := batchDeliveries(nil, "t", res.GetBatch())
		if err == nil && len(ds) != len(res.GetBatch().Bodies) {
			t.Fatalf("%d deliveries of %d bodies", len(ds), len(res.GetBatch().Bodies))
		}
	})
}

// BenchmarkConsumeBatch decodes a pushed batch of 100 messages of 256
// bytes as the client does (vtcodec's shared decode, then the
// deliveries), without headers and with two each. The allocations per
// batch are what to compare: without headers they do not grow with the
// messages (the repeated fields' growth only); each message with
// headers adds its map.
func BenchmarkConsumeBatch(b *testing.B) {
	for _, headers := range []bool{false, true} {
		name := "plain"
		if headers {
			name = "headers"
		}
		wire, err := proto.Marshal(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: testBatch(100, headers)}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			var ds []Delivery
			for b.Loop() {
				res := &hourglassv1.ConsumeResponse{}
				if err := (vtcodec.GRPCShared{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, res); err != nil {
					b.Fatal(err)
				}
				if ds, err = batchDeliveries(ds[:0], "orders", res.GetBatch()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/msg")
		})
	}
}

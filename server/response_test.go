package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

func TestScheduleBatchResponseMatchesEachResponse(t *testing.T) {
	ids := []message.ID{
		{DeliverAt: 1_796_000_000_123, Seq: 7},
		{DeliverAt: 0, Seq: 0},
		{DeliverAt: -1_500, Seq: 1 << 63},
		{DeliverAt: -1_000, Seq: 42},
		{DeliverAt: 253_402_300_799_999, Seq: 1<<64 - 1},
	}
	got := scheduleBatchResponse(ids)
	if len(got.Results) != len(ids) {
		t.Fatalf("%d results for %d IDs", len(got.Results), len(ids))
	}
	for i, id := range ids {
		if want := scheduleResponse(id); !proto.Equal(got.Results[i], want) {
			t.Errorf("ID %v: got %v, want %v", id, got.Results[i], want)
		}
	}
	// The answer survives a round trip through the wire format.
	b, err := proto.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var back hourglassv1.ScheduleBatchResponse
	if err := proto.Unmarshal(b, &back); err != nil || !proto.Equal(&back, got) {
		t.Fatalf("round trip: %v", err)
	}
}

func BenchmarkScheduleBatchResponse(b *testing.B) {
	ids := make([]message.ID, 100)
	for i := range ids {
		ids[i] = message.ID{DeliverAt: 1_796_000_000_000 + int64(i), Seq: uint64(i) * 300}
	}
	b.ReportAllocs()
	for b.Loop() {
		scheduleBatchResponse(ids)
	}
}

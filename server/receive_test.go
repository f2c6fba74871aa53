package server

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// TestToMessages holds toMessages, which shares allocations between the
// messages of a Receive, to the plain field-by-field conversion.
func TestToMessages(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 678_901_234, time.UTC)
	id := message.ID{DeliverAt: now.UnixMilli() - 20, Seq: 42}
	origin := message.ID{DeliverAt: now.UnixMilli() - 60_000, Seq: 7}
	msgs := []queue.Message{
		{ID: id, Topic: "orders", Body: []byte("a"), DeliverAt: id.DeliverAt, ReceivedAt: now, LeaseUntil: now.Add(30 * time.Second), Receipt: "r1"},
		{ID: id, Topic: "orders", DeliverAt: id.DeliverAt, Origin: id, Attempt: 1, ReceivedAt: now, LeaseUntil: now, Receipt: "r2",
			Headers: []message.Header{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("bad"), Value: []byte{0xff}}, {Key: []byte("empty")}}},
		{ID: id, Topic: "orders", Body: []byte("b"), DeliverAt: id.DeliverAt, ReceivedAt: now, LeaseUntil: now, Receipt: "r2b",
			Headers: []message.Header{{Key: []byte("hourglass-idempotency-key"), Value: []byte("ключ-1")}}},
		{ID: id, Topic: "orders", Body: []byte("c"), DeliverAt: id.DeliverAt, Origin: origin, Attempt: 3, ReceivedAt: now, LeaseUntil: now.Add(time.Hour), Receipt: "r3"},
	}
	got := toMessages(msgs)
	if len(got) != len(msgs) {
		t.Fatalf("%d messages, want %d", len(got), len(msgs))
	}
	for i, q := range msgs {
		o := q.Origin
		if o.IsZero() {
			o = q.ID
		}
		want := &hourglassv1.Message{
			Id: q.ID.String(), Topic: q.Topic, Body: q.Body, Attempt: q.Attempt, OriginId: o.String(), Receipt: q.Receipt,
			DeliverAt: timestamppb.New(time.UnixMilli(q.DeliverAt)), ReceivedAt: timestamppb.New(q.ReceivedAt),
			LeaseExpiresAt: timestamppb.New(q.LeaseUntil),
		}
		for _, h := range q.Headers {
			want.Headers = append(want.Headers, &hourglassv1.Header{Key: string(h.Key), Value: string(h.Value)})
		}
		if i == 1 {
			want.Headers[1].Value = "\uFFFD" // not UTF-8: replaced
		}
		if !proto.Equal(got[i], want) {
			t.Errorf("message %d:\n got %v\nwant %v", i, got[i], want)
		}
	}
}

// BenchmarkToMessages converts a Receive of 100 messages that carry an
// idempotency key (two headers each, as the engine stores a key), the
// peers' W2 load, into the response's messages, and encodes them;
// BenchmarkToBatch does the same as a Consume stream's batch.
func BenchmarkToMessages(b *testing.B) {
	msgs := benchMessages()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (&hourglassv1.ReceiveResponse{Messages: toMessages(msgs)}).MarshalVT(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkToBatch(b *testing.B) {
	msgs := benchMessages()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: toBatch(msgs, 1, false)}}).MarshalVT(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestToBatch: a batch says what each message has, as Receive's messages
// do (expandBatch reads it as a client does).
func TestToBatch(t *testing.T) {
	msgs := benchMessages()[:3]
	msgs[1].Attempt, msgs[1].Origin, msgs[1].DeliverAt = 2, msgs[0].ID, msgs[0].DeliverAt-5000
	msgs[2].Headers = append(msgs[2].Headers, message.Header{Key: []byte(queue.DeadLetterReasonHeader), Value: []byte("nacked")},
		message.Header{Key: []byte("bad"), Value: []byte{0xff}})
	got := expandBatch(t, toBatch(msgs, 7, false))
	for i, m := range toMessages(msgs) {
		g := got[i]
		if g.Seq != uint64(7+i) || g.Id != m.Id || g.OriginId != m.OriginId || g.Attempt != m.Attempt || string(g.Body) != string(m.Body) ||
			!g.DeliverAt.Equal(m.DeliverAt.AsTime()) || g.ReceivedAt.UnixMilli() != m.ReceivedAt.AsTime().UnixMilli() ||
			g.LeaseExpiresAt.UnixMilli() != m.LeaseExpiresAt.AsTime().UnixMilli() || len(g.Headers) != len(m.Headers) ||
			(g.DeadLetter == nil) != (m.DeadLetter == nil) {
			t.Errorf("message %d: batch %+v, Receive %v", i, g, m)
		}
		for _, h := range m.Headers {
			if g.Headers[h.Key] != h.Value {
				t.Errorf("message %d header %q: %q, want %q", i, h.Key, g.Headers[h.Key], h.Value)
			}
		}
	}
	if got[2].DeadLetter.GetReason() != "nacked" || got[2].Headers["bad"] != "\uFFFD" {
		t.Errorf("message 2: dead letter %v, header %q", got[2].DeadLetter, got[2].Headers["bad"])
	}
	if b := toBatch(msgs, 1, true); !slices.Equal(b.Receipts, []string{msgs[0].Receipt, msgs[1].Receipt, msgs[2].Receipt}) {
		t.Errorf("receipts %q", b.Receipts)
	}
}

func benchMessages() []queue.Message {
	now := time.Now()
	msgs := make([]queue.Message, 100)
	for i := range msgs {
		id := message.ID{DeliverAt: now.UnixMilli(), Seq: uint64(i)}
		msgs[i] = queue.Message{ID: id, Topic: "orders", Body: make([]byte, 256), DeliverAt: id.DeliverAt, ReceivedAt: now, LeaseUntil: now.Add(time.Minute),
			Receipt: "0123456789abcdef0123456789abcdef.1f", Headers: []message.Header{
				{Key: []byte("hourglass-idempotency-key"), Value: []byte("1234567")},
				{Key: []byte("hourglass-idempotency-at"), Value: []byte("1796263200000")},
			}}
	}
	return msgs
}

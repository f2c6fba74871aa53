package cluster

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// recordSink records every delivery with the time it was handed over.
type recordSink struct {
	mu   sync.Mutex
	got  map[message.ID]int       // guarded by mu: deliveries per ID
	at   map[message.ID]time.Time // guarded by mu: the first delivery's time
	hdrs map[message.ID][]message.Header
}

func newRecordSink() *recordSink {
	return &recordSink{got: map[message.ID]int{}, at: map[message.ID]time.Time{}, hdrs: map[message.ID][]message.Header{}}
}

func (s *recordSink) Deliver(_ context.Context, _ string, batch []engine.Delivery) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range batch {
		if s.got[d.ID] == 0 {
			s.at[d.ID] = now
			// A Delivery's Message is valid only during the call (the
			// engine reuses its bytes): keep a copy.
			hs := make([]message.Header, len(d.Message.Headers))
			for i, h := range d.Message.Headers {
				hs[i] = message.Header{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)}
			}
			s.hdrs[d.ID] = hs
		}
		s.got[d.ID]++
	}
	return nil
}

func (s *recordSink) count(id message.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[id]
}

// TestManage: on a one-node cluster, Get tells pending, rescheduled,
// cancelled, delivered and not found; a key is found on its own partition
// and, for a later message of a batch, on the batch's; Reschedule moves a
// message (the old ID is never delivered, the new one once, not early) and
// a key then names the replacement; a replacement whose old message is
// still pending (an owner stopped between the two writes) cancels the old
// one, and one whose old message was delivered is never delivered; a node
// that takes the partitions over answers the same.
func TestManage(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	sink := newRecordSink()
	a, err := openNode(t, ns.ClientURL(), "a", 4, sink)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node never owned its 4 partitions", func() bool { return len(a.Owned()) == 4 })

	now := time.Now()
	ids, err := a.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Body: []byte("one"), At: now.Add(time.Second), IdempotencyKey: "k1",
		Headers: []message.Header{{Key: []byte("h"), Value: []byte("v")}}}})
	if err != nil {
		t.Fatal(err)
	}
	m1 := ids[0]
	// A batch: both land on kA's partition. Find a second key whose own
	// partition is another one, so that its lookup must fan out.
	kB := ""
	for i := 0; kB == ""; i++ {
		if k := "kB" + string(rune('a'+i)); KeyPartition("t", k, 4) != KeyPartition("t", "kA", 4) {
			kB = k
		}
	}
	batch, err := a.ScheduleBatch(ctx, []engine.Request{
		{Topic: "t", Body: []byte("a"), At: now.Add(time.Hour), IdempotencyKey: "kA"},
		{Topic: "t", Body: []byte("b"), At: now.Add(time.Hour), IdempotencyKey: kB},
		{Topic: "t", Body: []byte("c"), At: now.Add(1500 * time.Millisecond), IdempotencyKey: "kC"},
	})
	if err != nil {
		t.Fatal(err)
	}

	f, _, err := a.Get(ctx, m1, false)
	if err != nil || f.State != engine.StatePending || string(f.Message.Body) != "one" || string(f.Message.Topic) != "t" ||
		message.HeaderValue(f.Message.Headers, "h") != "v" || message.HeaderValue(f.Message.Headers, idHeader) != "" || f.Message.DeliverAt != m1.DeliverAt {
		t.Fatalf("Get(m1) = %+v, %v; want pending with its message and no cluster header", f, err)
	}
	p, seq, _ := SplitID(batch[0])
	if f, _, err := a.Get(ctx, MakeID(p, seq, 3, batch[0].DeliverAt), false); err != nil || f.State != engine.StateNotFound {
		t.Errorf("Get of an index past the batch = %v, %v; want not found", f.State, err)
	}
	if f, _, err := a.Get(ctx, MakeID(p, seq+1000, 0, batch[0].DeliverAt), false); err != nil || f.State != engine.StateNotFound {
		t.Errorf("Get of a sequence past the stream = %v, %v; want not found", f.State, err)
	}
	for key, want := range map[string]message.ID{"k1": m1, "kA": batch[0], kB: batch[1]} {
		if id, ok, err := a.Lookup(ctx, "t", key, false); err != nil || !ok || id != want {
			t.Errorf("Lookup(%s) = %v, %v, %v; want %v", key, id, ok, err, want)
		}
	}
	if _, ok, err := a.Lookup(ctx, "t", "nope", false); ok || err != nil {
		t.Errorf("Lookup of a key never used = %v, %v; want not found", ok, err)
	}
	if _, ok, err := a.Lookup(ctx, "other", "k1", false); ok || err != nil {
		t.Errorf("Lookup of k1 on another topic = %v, %v; want not found", ok, err)
	}

	// Reschedule m1 one second later.
	if _, _, err := a.Reschedule(ctx, m1, time.Now().Add(engine.DefaultMaxDelay+time.Hour), false); !errors.Is(err, engine.ErrTooFar) {
		t.Errorf("Reschedule beyond the max delay: %v; want ErrTooFar", err)
	}
	newAt := time.UnixMilli(m1.DeliverAt).Add(time.Second)
	res, nid, err := a.Reschedule(ctx, m1, newAt, false)
	if err != nil || res != engine.Rescheduled || nid.DeliverAt != newAt.UnixMilli() {
		t.Fatalf("Reschedule(m1) = %v, %v, %v; want rescheduled to %d", res, nid, err, newAt.UnixMilli())
	}
	if q, _, _ := SplitID(nid); q != KeyPartition("t", "k1", 4) {
		t.Errorf("the replacement is on partition %d; want m1's, %d", q, KeyPartition("t", "k1", 4))
	}
	if res, _, err := a.Reschedule(ctx, m1, newAt, false); res != engine.RescheduleCancelled || err != nil {
		t.Errorf("second Reschedule(m1) = %v, %v; want already cancelled", res, err)
	}
	if f, moved, err := a.Get(ctx, m1, false); err != nil || f.State != engine.StateRescheduled || moved != nid {
		t.Errorf("Get(m1) = %v moved to %v, %v; want rescheduled to %v", f.State, moved, err, nid)
	}
	if f, _, err := a.Get(ctx, nid, false); err != nil || f.State != engine.StatePending || f.Message.Origin != m1 ||
		string(f.Message.Body) != "one" || message.HeaderValue(f.Message.Headers, replacesHeader) != "" {
		t.Errorf("Get(new) = %+v, %v; want pending, origin m1, no replaces header", f, err)
	}
	if id, ok, err := a.Lookup(ctx, "t", "k1", false); err != nil || !ok || id != nid {
		t.Errorf("Lookup(k1) after the reschedule = %v, %v, %v; want the replacement %v", id, ok, err, nid)
	}

	// Cancel by key: look up, then cancel.
	id, _, _ := a.Lookup(ctx, "t", kB, false)
	if res, err := a.Cancel(ctx, id, false); res != engine.Cancelled || err != nil {
		t.Fatalf("Cancel(kB) = %v, %v", res, err)
	}
	if f, _, err := a.Get(ctx, batch[1], false); err != nil || f.State != engine.StateCancelled || string(f.Message.Body) != "b" {
		t.Errorf("Get(kB's) = %+v, %v; want cancelled, with its message", f, err)
	}

	// A replacement stored without its old message's record (an owner
	// stopped in between): the old one is cancelled when it is read.
	kC := batch[2]
	orphan := message.Message{DeliverAt: time.Now().Add(2 * time.Second).UnixMilli(), Topic: []byte("t"), Body: []byte("c2"), Origin: kC,
		Headers: []message.Header{{Key: []byte(replacesHeader), Value: appendIDBytes(nil, kC)}}}
	cp, _, _ := SplitID(kC)
	oids, err := a.publishIntake(ctx, cp, []message.Message{orphan}, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the rescheduled message and the orphan replacement were not delivered", func() bool {
		return sink.count(nid) > 0 && sink.count(oids[0]) > 0
	})
	sink.mu.Lock()
	if sink.at[nid].UnixMilli() < nid.DeliverAt || sink.at[oids[0]].UnixMilli() < oids[0].DeliverAt {
		t.Errorf("delivered early: %v before %d, or %v before %d", sink.at[nid], nid.DeliverAt, sink.at[oids[0]], oids[0].DeliverAt)
	}
	if message.HeaderValue(sink.hdrs[oids[0]], replacesHeader) != "" {
		t.Errorf("the replaces header was delivered: %v", sink.hdrs[oids[0]])
	}
	sink.mu.Unlock()
	if f, _, err := a.Get(ctx, nid, false); err != nil || f.State != engine.StateDelivered {
		t.Errorf("Get(new) after its time = %v, %v; want delivered", f.State, err)
	}
	// A replacement of a delivered message is never delivered.
	late := message.Message{DeliverAt: time.Now().Add(300 * time.Millisecond).UnixMilli(), Topic: []byte("t"), Body: []byte("late"),
		Headers: []message.Header{{Key: []byte(replacesHeader), Value: appendIDBytes(nil, nid)}}}
	np, _, _ := SplitID(nid)
	lids, err := a.publishIntake(ctx, np, []message.Message{late}, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the late replacement was not settled", func() bool {
		f, _, err := a.Get(ctx, lids[0], false)
		return err == nil && f.State == engine.StateCancelled
	})

	// Another node takes over and answers the same.
	a.Close()
	b, err := openNode(t, ns.ClientURL(), "b", 4, sink)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node b never owned the 4 partitions", func() bool { return len(b.Owned()) == 4 })
	checks := []struct {
		name  string
		id    message.ID
		want  engine.State
		moved message.ID
	}{
		{"m1", m1, engine.StateRescheduled, nid},
		{"m1's replacement", nid, engine.StateDelivered, message.ID{}},
		{"kA", batch[0], engine.StatePending, message.ID{}},
		{"kB", batch[1], engine.StateCancelled, message.ID{}},
		{"kC", kC, engine.StateRescheduled, oids[0]},
		{"kC's replacement", oids[0], engine.StateDelivered, message.ID{}},
		{"late replacement", lids[0], engine.StateCancelled, message.ID{}},
	}
	for _, c := range checks {
		if f, moved, err := b.Get(ctx, c.id, false); err != nil || f.State != c.want || moved != c.moved {
			t.Errorf("after the takeover, Get(%s) = %v moved to %v, %v; want %v moved to %v", c.name, f.State, moved, err, c.want, c.moved)
		}
	}
	if id, ok, err := b.Lookup(ctx, "t", "k1", false); err != nil || !ok || id != nid {
		t.Errorf("after the takeover, Lookup(k1) = %v, %v, %v; want %v", id, ok, err, nid)
	}
	for _, id := range []message.ID{m1, kC, lids[0], batch[1]} {
		if n := sink.count(id); n != 0 {
			t.Errorf("%v was delivered %d times; want never", id, n)
		}
	}
	for _, id := range []message.ID{nid, oids[0]} {
		if n := sink.count(id); n != 1 {
			t.Errorf("%v was delivered %d times; want once", id, n)
		}
	}
}

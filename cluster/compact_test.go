package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

func TestIntakeID(t *testing.T) {
	own := MakeID(3, 77, 5, 1000)
	hdr := func(v []byte) message.Header { return message.Header{Key: []byte(idHeader), Value: v} }
	other := message.Header{Key: []byte("k"), Value: []byte("v")}
	for _, tc := range []struct {
		name    string
		headers []message.Header
		want    message.ID
		err     string
	}{
		{"original", []message.Header{other}, MakeID(3, 9, 2, 1000), ""},
		{"copy", []message.Header{other, hdr(appendIDBytes(nil, own))}, own, ""},
		{"short_header", []message.Header{hdr([]byte{1, 2, 3})}, message.ID{}, "of 3 bytes; want 16"},
		{"other_partition", []message.Header{hdr(appendIDBytes(nil, MakeID(4, 77, 5, 1000)))}, message.ID{}, "names partition 4"},
		{"other_deliverAt", []message.Header{hdr(appendIDBytes(nil, MakeID(3, 77, 5, 999)))}, message.ID{}, "names deliverAt 999"},
		{"twice", []message.Header{hdr(appendIDBytes(nil, own)), hdr(appendIDBytes(nil, own))}, message.ID{}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := message.Message{DeliverAt: 1000, Topic: []byte("t"), Headers: tc.headers}
			id, hs, err := intakeID(3, 9, 2, &m)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || id != tc.want {
				t.Fatalf("intakeID = %v, %v; want %v", id, err, tc.want)
			}
			if len(hs) != 1 || string(hs[0].Key) != "k" {
				t.Fatalf("headers %q; want only the k header", hs)
			}
		})
	}
}

// FuzzIntakeID: whatever decodes as an intake message, intakeID either
// refuses or returns an ID of the partition, due when the message is, and
// the headers without the ID header; a copy made from that ID reads back
// the same ID.
func FuzzIntakeID(f *testing.F) {
	copyOf := message.Message{DeliverAt: 5, Topic: []byte("t"), Headers: []message.Header{{Key: []byte(idHeader), Value: appendIDBytes(nil, MakeID(1, 2, 3, 5))}}}
	f.Add(AppendIntake(nil, []message.Message{{DeliverAt: 5, Topic: []byte("t")}, copyOf}))
	f.Add(AppendIntake(nil, []message.Message{{DeliverAt: 5, Topic: []byte("t"), Headers: []message.Header{{Key: []byte(idHeader), Value: []byte("short")}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := DecodeIntake(data, nil)
		if err != nil {
			return
		}
		for i := range ms {
			id, hs, err := intakeID(1, 7, i, &ms[i])
			if err != nil {
				continue
			}
			if p, _, _ := SplitID(id); p != 1 || id.DeliverAt != ms[i].DeliverAt {
				t.Fatalf("ID %v: partition %d, deliverAt %d; message due at %d", id, p, id.DeliverAt, ms[i].DeliverAt)
			}
			for _, h := range hs {
				if string(h.Key) == idHeader {
					t.Fatal("the ID header is still in the headers")
				}
			}
			c := ms[i]
			c.Headers = append(hs[:len(hs):len(hs)], message.Header{Key: []byte(idHeader), Value: appendIDBytes(nil, id)})
			back, _, err := intakeID(1, 99, 0, &c)
			if err != nil || back != id {
				t.Fatalf("copy of %v reads back %v, %v", id, back, err)
			}
		}
	})
}

// TestPacker: copies are packed into intake messages that decode to the
// same messages in order, of at most MaxBatch messages and about the limit.
func TestPacker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int // body sizes
		limit int
	}{
		{"many_small", repeat(3000, 1), 1 << 20},
		{"bytes_bound", repeat(100, 300), 4000},
		{"one_over_limit", []int{10, 9000, 10}, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []message.Message
			for i, n := range tc.sizes {
				in = append(in, message.Message{DeliverAt: int64(i), Topic: []byte("t"), Body: bytes.Repeat([]byte{byte(i)}, n)})
			}
			var out []message.Message
			pk := &packer{limit: tc.limit, publish: func(data []byte, count int) error {
				ms, err := DecodeIntake(data, nil)
				if err != nil || len(ms) != count {
					t.Fatalf("published %d messages that decode to %d, %v", count, len(ms), err)
				}
				if count > 1 && len(data) > tc.limit+8 {
					t.Fatalf("intake message of %d messages is %d bytes; limit %d", count, len(data), tc.limit)
				}
				for _, m := range ms {
					m.Body = bytes.Clone(m.Body)
					out = append(out, m)
				}
				return nil
			}}
			for _, m := range in {
				if err := pk.add(m); err != nil {
					t.Fatal(err)
				}
			}
			if err := pk.flush(); err != nil {
				t.Fatal(err)
			}
			if len(out) != len(in) {
				t.Fatalf("%d messages out of %d", len(out), len(in))
			}
			for i := range in {
				if out[i].DeliverAt != in[i].DeliverAt || !bytes.Equal(out[i].Body, in[i].Body) {
					t.Fatalf("message %d changed", i)
				}
			}
		})
	}
}

func repeat(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// recorder is a sink that counts deliveries per ID and notes early ones.
type recorder struct {
	mu    sync.Mutex
	got   map[message.ID]int
	early []message.ID
	leak  bool
	log   []string
}

func newRecorder() *recorder { return &recorder{got: map[message.ID]int{}} }

func (r *recorder) Deliver(_ context.Context, _ string, b []engine.Delivery) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range b {
		r.got[d.ID]++
		r.log = append(r.log, fmt.Sprintf("%v at %v", d.ID, now.Format("15:04:05.000")))
		if now.Before(d.ID.Time()) {
			r.early = append(r.early, d.ID)
		}
		for _, h := range d.Message.Headers {
			if string(h.Key) == idHeader {
				r.leak = true
			}
		}
	}
	return nil
}

func (r *recorder) count(id message.ID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

func (r *recorder) all(ids []message.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.got[id] == 0 {
			return false
		}
	}
	return true
}

// openCompacting opens a one-partition node that compacts as soon as 20
// messages more than twice the pending ones were consumed, keeping no
// recent intake messages (unless h says otherwise).
func openCompacting(t *testing.T, url, id string, sink engine.Sink, h *testHooks) *Node {
	t.Helper()
	if h.keepRecent == nil {
		var none time.Duration
		h.keepRecent = &none
	}
	n, err := Open(ctxT(t), Options{IdempotencyWindow: 10 * time.Minute, URL: url, NodeID: id, Advertise: "http://127.0.0.1:1", Partitions: 1,
		LeaseTTL: 2 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: sink, Logger: quiet, Engine: EngineOptions{SegmentDuration: 10 * time.Second},
		Compaction: CompactionOptions{Margin: 20, Interval: 20 * time.Millisecond}, hooks: h})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, id+" never owned the partition", func() bool { return len(n.Owned()) == 1 })
	return n
}

func streamState(t testing.TB, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	st, err := js.Stream(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func compactions(n *Node) []compactStats {
	pt := n.partition(0)
	if pt == nil {
		return nil
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return append([]compactStats(nil), pt.mu.compactions...)
}

// scheduleMix schedules rounds × (a batch of farPer messages due at far,
// then a batch of 20 due in 100 ms) and returns the far and short IDs.
func scheduleMix(t *testing.T, n *Node, rounds, farPer int, far time.Time) (farIDs, shortIDs []message.ID) {
	t.Helper()
	ctx := ctxT(t)
	for r := range rounds {
		fb := make([]engine.Request, farPer)
		for i := range fb {
			fb[i] = engine.Request{Topic: "t", Body: fmt.Appendf(nil, "far %d/%d", r, i), At: far}
		}
		ids, err := n.ScheduleBatch(ctx, fb)
		if err != nil {
			t.Fatal(err)
		}
		farIDs = append(farIDs, ids...)
		sb := make([]engine.Request, 20)
		for i := range sb {
			sb[i] = engine.Request{Topic: "t", Body: fmt.Appendf(nil, "short %d/%d", r, i), Delay: 100 * time.Millisecond}
		}
		if ids, err = n.ScheduleBatch(ctx, sb); err != nil {
			t.Fatal(err)
		}
		shortIDs = append(shortIDs, ids...)
	}
	return farIDs, shortIDs
}

// TestCompaction: far-future messages among many short ones; once the
// short ones are delivered a compaction keeps only what is pending (and a
// message scheduled while it ran), shrinks the done stream and the done
// set; a new owner then delivers every far message once, on time, with
// its original ID, and cancels before and after the compaction hold.
func TestCompaction(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	js := jsConnect(t, ns.ClientURL())
	rec := newRecorder()
	var allow atomic.Bool
	var a *Node
	var during []message.ID
	var duringErr error
	far := time.Now().Add(6 * time.Second)
	hooks := &testHooks{allowCompact: allow.Load, compactStage: func(_ int, stage string) error {
		if stage == "copied" && during == nil && duringErr == nil {
			// A Schedule stored while the compaction runs, after its
			// copies, and due at once: the compaction waits here until
			// the owner consumed it (Get finds it) and delivered it.
			// Consuming must go on beside a compaction.
			during, duringErr = a.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Body: []byte("during"), IdempotencyKey: "during"}})
			if duringErr != nil {
				return nil
			}
			deadline := time.Now().Add(10 * time.Second)
			for !rec.all(during) {
				if time.Now().After(deadline) {
					duringErr = errors.New("the message stored during the compaction was not delivered while it ran")
					return duringErr
				}
				time.Sleep(20 * time.Millisecond) // polling a delivery, not waiting for time
			}
			if f, _, err := a.Get(ctx, during[0], false); err != nil || f.State != engine.StateDelivered {
				duringErr = fmt.Errorf("Get of the message stored during the compaction while it runs: %v, %v; want delivered", f.State, err)
			}
		}
		return nil
	}}
	a = openCompacting(t, ns.ClientURL(), "a", rec, hooks)
	farIDs, shortIDs := scheduleMix(t, a, 10, 4, far)
	waitFor(t, 10*time.Second, "short messages not delivered", func() bool { return rec.all(shortIDs) })
	for _, id := range farIDs[:2] {
		if res, err := a.Cancel(ctx, id, false); err != nil || res != engine.Cancelled {
			t.Fatalf("cancel %v before the compaction: %v, %v", id, res, err)
		}
	}
	if _, err := a.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Headers: []message.Header{{Key: []byte(idHeader), Value: make([]byte, 16)}}}}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a Schedule with the header %s: %v; want ErrInvalid", idHeader, err)
	}
	inBefore := streamState(t, js, inStream(0))
	doneBefore := streamState(t, js, doneStream(0))

	allow.Store(true)
	waitFor(t, 10*time.Second, "no compaction", func() bool { return len(compactions(a)) > 0 })
	if duringErr != nil || len(during) != 1 {
		t.Fatalf("Schedule during the compaction: %v, %v", during, duringErr)
	}
	cs := compactions(a)[0]
	if cs.L0 != inBefore.LastSeq || cs.Copied != len(farIDs)-2 || cs.CopyMsgs != 1 || cs.KeptCancels != 2 {
		t.Fatalf("compaction %+v; want L0 %d, %d copied in 1 intake message, 2 cancels kept", cs, inBefore.LastSeq, len(farIDs)-2)
	}
	in := streamState(t, js, inStream(0))
	if in.FirstSeq != inBefore.LastSeq+1 || in.Msgs != 2 {
		t.Fatalf("intake stream after: first %d, %d messages; want first %d (past the old head %d) and 2 (the copies, the Schedule made meanwhile)",
			in.FirstSeq, in.Msgs, inBefore.LastSeq+1, inBefore.FirstSeq)
	}
	done := streamState(t, js, doneStream(0))
	if done.FirstSeq <= doneBefore.LastSeq || done.Msgs != 2 || doneBefore.Msgs < 3 {
		t.Fatalf("done stream: %d messages from %d before, %d from %d after; want 2 (the delivery during it, the kept cancels) after the old last %d",
			doneBefore.Msgs, doneBefore.FirstSeq, done.Msgs, done.FirstSeq, doneBefore.LastSeq)
	}
	pt := a.partition(0)
	pt.mu.Lock()
	left := len(pt.mu.done)
	pt.mu.Unlock()
	if left != 3 {
		t.Fatalf("done set holds %d entries after the compaction; want the 2 cancels and the delivery during it", left)
	}
	if res, err := a.Cancel(ctx, farIDs[1], false); err != nil || res != engine.AlreadyCancelled {
		t.Fatalf("second cancel of %v: %v, %v; want already cancelled", farIDs[1], res, err)
	}
	// The copies' own (sequence, index) is no message's ID.
	if res, err := a.Cancel(ctx, MakeID(0, cs.CopyLast, 0, far.UnixMilli()), false); err != nil || res != engine.Unknown {
		t.Fatalf("cancel of the ID made from a copy's sequence: %v, %v; want unknown", res, err)
	}
	t.Logf("compaction: %d messages consumed, %d copied in %d intake messages, intake stream %d -> %d messages, done stream %d -> %d, %d done entries forgotten, in %v",
		cs.Held, cs.Copied, cs.CopyMsgs, cs.IntakeBefore, cs.IntakeAfter, cs.DoneBefore, cs.DoneAfter, cs.PrunedDone, cs.Took)

	// A new owner.
	a.Close()
	b := openCompacting(t, ns.ClientURL(), "b", rec, hooks)
	defer b.Close()
	_, seq2, _ := SplitID(farIDs[2])
	if seq2 >= in.FirstSeq {
		t.Fatalf("far message 2 at sequence %d, not compacted (first %d)", seq2, in.FirstSeq)
	}
	if res, err := b.Cancel(ctx, farIDs[2], false); err != nil || res != engine.Cancelled {
		t.Fatalf("cancel of compacted %v after the takeover: %v, %v; want cancelled", farIDs[2], res, err)
	}
	if res, err := b.Cancel(ctx, farIDs[0], false); err != nil || res != engine.AlreadyCancelled {
		t.Fatalf("cancel of %v, cancelled before the compaction, after the takeover: %v, %v; want already cancelled", farIDs[0], res, err)
	}
	if res, err := b.Cancel(ctx, MakeID(0, seq2, 30, far.UnixMilli()), false); err != nil || res != engine.Unknown {
		t.Fatalf("cancel of a compacted sequence's index that never existed: %v, %v; want unknown", res, err)
	}
	want := append(append([]message.ID(nil), farIDs[3:]...), during...)
	waitFor(t, 15*time.Second, "far messages not delivered after the takeover", func() bool { return rec.all(want) })
	b.Close()
	for _, id := range append(want, shortIDs...) {
		if c := rec.count(id); c != 1 {
			for _, l := range rec.log {
				if strings.HasPrefix(l, id.String()) {
					t.Log(l)
				}
			}
			t.Fatalf("%v delivered %d times", id, c)
		}
	}
	for _, id := range farIDs[:3] {
		if c := rec.count(id); c != 0 {
			t.Fatalf("cancelled %v delivered %d times", id, c)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.early) > 0 || rec.leak {
		t.Fatalf("early deliveries %v; ID header leaked: %v", rec.early, rec.leak)
	}
	if len(rec.got) != len(want)+len(shortIDs) {
		t.Fatalf("%d IDs delivered; want %d", len(rec.got), len(want)+len(shortIDs))
	}
}

// TestCompactionInterrupted: a compaction that stops after storing its
// copies (as a crash would) leaves originals and copies; the next owner
// takes each ID once, and its own compaction copies each pending message
// once.
func TestCompactionInterrupted(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	js := jsConnect(t, ns.ClientURL())
	rec := newRecorder()
	var allow, crashed atomic.Bool
	hooks := &testHooks{allowCompact: allow.Load, compactStage: func(_ int, stage string) error {
		if stage == "copied" && !crashed.Load() {
			crashed.Store(true)
			allow.Store(false)
			return errors.New("crash after the copies")
		}
		return nil
	}}
	a := openCompacting(t, ns.ClientURL(), "a", rec, hooks)
	farIDs, shortIDs := scheduleMix(t, a, 5, 2, time.Now().Add(5*time.Second))
	waitFor(t, 10*time.Second, "short messages not delivered", func() bool { return rec.all(shortIDs) })
	if res, err := a.Cancel(ctx, farIDs[0], false); err != nil || res != engine.Cancelled {
		t.Fatalf("cancel: %v, %v", res, err)
	}
	before := streamState(t, js, inStream(0))
	allow.Store(true)
	waitFor(t, 10*time.Second, "no compaction started", crashed.Load)
	// The copies are stored; nothing was purged.
	waitFor(t, 5*time.Second, "copies not stored", func() bool {
		s := streamState(t, js, inStream(0))
		return s.LastSeq == before.LastSeq+1 && s.FirstSeq == before.FirstSeq
	})
	if len(compactions(a)) != 0 {
		t.Fatal("the interrupted compaction counted as done")
	}
	a.Close()

	allow.Store(true)
	b := openCompacting(t, ns.ClientURL(), "b", rec, hooks)
	defer b.Close()
	waitFor(t, 10*time.Second, "the new owner did not compact", func() bool { return len(compactions(b)) > 0 })
	if cs := compactions(b)[0]; cs.Copied != len(farIDs)-1 || cs.L0 < before.LastSeq+1 {
		t.Fatalf("the new owner's compaction copied %d messages below %d; want each of the %d pending once, and not before it read the stream it took over (to %d)",
			cs.Copied, cs.L0+1, len(farIDs)-1, before.LastSeq+1)
	}
	waitFor(t, 15*time.Second, "far messages not delivered", func() bool { return rec.all(farIDs[1:]) })
	b.Close()
	for _, id := range append(farIDs[1:], shortIDs...) {
		if c := rec.count(id); c != 1 {
			for _, l := range rec.log {
				if strings.HasPrefix(l, id.String()) {
					t.Log(l)
				}
			}
			t.Fatalf("%v delivered %d times", id, c)
		}
	}
	if c := rec.count(farIDs[0]); c != 0 {
		t.Fatalf("cancelled %v delivered %d times", farIDs[0], c)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.early) > 0 {
		t.Fatalf("early deliveries %v", rec.early)
	}
}

// TestCompactionKeepsRecent: intake messages above the snapshot point
// (stored within the duplicate window) are kept, and so are the done
// records of their delivered messages: a new owner delivers none of them
// again.
func TestCompactionKeepsRecent(t *testing.T) {
	ns := startNATS(t)
	js := jsConnect(t, ns.ClientURL())
	rec := newRecorder()
	var allow atomic.Bool
	var cut atomic.Uint64
	hooks := &testHooks{allowCompact: allow.Load, capL0: func(l0 uint64) uint64 { return min(l0, cut.Load()) }}
	a := openCompacting(t, ns.ClientURL(), "a", rec, hooks)
	// One message through first: the owner notes its horizon (the
	// stream's end) when it starts consuming, and the cut below must not
	// be under it.
	warm, err := a.ScheduleBatch(ctxT(t), []engine.Request{{Topic: "t", Body: []byte("warm up")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "first message not delivered", func() bool { return rec.all(warm) })
	farIDs, shortIDs := scheduleMix(t, a, 10, 1, time.Now().Add(4*time.Second))
	waitFor(t, 10*time.Second, "short messages not delivered", func() bool { return rec.all(shortIDs) })
	// Cut after round 5: intake messages 1..10 go, 11..20 stay.
	_, fifth, _ := SplitID(shortIDs[5*20-1])
	cut.Store(fifth)
	allow.Store(true)
	waitFor(t, 10*time.Second, "no compaction", func() bool { return len(compactions(a)) > 0 })
	cs := compactions(a)[0]
	if cs.L0 != fifth || cs.Copied != 5 || cs.KeptDelivered != 100 || cs.PrunedDone != 101 {
		t.Fatalf("compaction %+v; want L0 %d, the 5 far messages below it copied, 100 delivered records kept and 101 forgotten", cs, fifth)
	}
	if in := streamState(t, js, inStream(0)); in.FirstSeq != fifth+1 || in.Msgs != 11 {
		t.Fatalf("intake stream from %d with %d messages; want from %d with the 10 above the cut and 1 of copies", in.FirstSeq, in.Msgs, fifth+1)
	}
	a.Close()
	b := openCompacting(t, ns.ClientURL(), "b", rec, hooks)
	defer b.Close()
	waitFor(t, 15*time.Second, "far messages not delivered", func() bool { return rec.all(farIDs) })
	b.Close()
	for _, id := range append(farIDs, shortIDs...) {
		if c := rec.count(id); c != 1 {
			t.Fatalf("%v delivered %d times", id, c)
		}
	}
}

func TestSnapshotPoint(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := compactState{keep: 2 * time.Minute}
	for i := range 5 {
		c.consumed(uint64(10*(i+1)), t0.Add(time.Duration(i)*time.Minute), 3, t0.Add(time.Duration(i)*time.Minute))
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		want uint64
		left int
	}{
		// Consumed as they were stored: by t0+4m, 10, 20 and 30 are old.
		{"as_consumed", t0.Add(4 * time.Minute), 30, 2},
		{"stays_when_nothing_new_is_old", t0.Add(4*time.Minute + time.Second), 30, 2},
		{"old_at_the_edge", t0.Add(5 * time.Minute), 40, 1},
		{"all_old", t0.Add(time.Hour), 50, 0},
	} {
		if got := c.snapshotPoint(tc.now); got != tc.want || len(c.recent) != tc.left {
			t.Fatalf("%s: snapshot point %d with %d recent batches; want %d with %d", tc.name, got, len(c.recent), tc.want, tc.left)
		}
	}
	if c.held != 15 {
		t.Fatalf("held %d; want 15", c.held)
	}
	// Batches consumed while below the threshold do not pile up: each
	// consumed call drops what became old.
	c.consumed(60, t0.Add(time.Hour), 1, t0.Add(3*time.Hour))
	if len(c.recent) != 0 || c.old != 60 {
		t.Fatalf("after an old batch: %d recent, old %d; want 0 and 60", len(c.recent), c.old)
	}
}

func TestNegativeCompactIntervalRefused(t *testing.T) {
	sink := engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })
	_, err := Open(ctxT(t), Options{IdempotencyWindow: 10 * time.Minute, URL: "nats://127.0.0.1:1", NodeID: "a", Advertise: "http://127.0.0.1:1", DataDir: t.TempDir(),
		Sink: sink, Logger: quiet, Compaction: CompactionOptions{Interval: -time.Second}})
	if err == nil || !strings.Contains(err.Error(), "compaction interval -1s") {
		t.Fatalf("Open with a negative compaction interval: %v; want an error naming it", err)
	}
}

// TestResizedFreesTables: a done set that a compaction emptied but for a
// few entries keeps its tables as a Go map does after deletes; resized
// keeps the entries and lets the tables go (about 50 MiB for 1 M entries).
func TestResizedFreesTables(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 1 << 20
	done := make(map[message.ID]Reason)
	for i := range n {
		done[MakeID(0, uint64(i+1), 0, int64(i))] = Delivered
	}
	for i := range n - 2 {
		delete(done, MakeID(0, uint64(i+1), 0, int64(i)))
	}
	full := heap()
	done = resized(done)
	small := heap()
	if len(done) != 2 || done[MakeID(0, n, 0, n-1)] != Delivered {
		t.Fatalf("resized holds %d entries %v; want the 2 left", len(done), done)
	}
	if full < small+16<<20 {
		t.Fatalf("heap %d B with the emptied map, %d B after resized: want at least 16 MiB freed", full, small)
	}
	t.Logf("an emptied map of %d entries: %.1f MiB freed by resized", n, float64(full-small)/(1<<20))
}

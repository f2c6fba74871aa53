package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

func counting(o *Options) { o.CountPending = true }

func pendingOf(t *testing.T, e *Engine, topic string) Pending {
	t.Helper()
	p, err := e.PendingOf(context.Background(), func(s string) bool { return s == topic })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func size(topic, body string) int64 {
	return int64(message.ScheduleSize(&message.Message{Topic: []byte(topic), Body: []byte(body)}))
}

// TestPendingCounts: each topic's pending count and bytes follow
// Schedule, Cancel, Reschedule, Edit and delivery, and hold after a clean
// restart (the counts file) and after a crash (counted from the segments).
func TestPendingCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, counting)
		schedule(t, e, "a", time.Second, "soon")      // delivered below
		far := schedule(t, e, "a", time.Hour, "far")  // cancelled below
		schedule(t, e, "a", 2*time.Hour, "stays")     // pending throughout
		moved := schedule(t, e, "b", time.Hour, "mv") // rescheduled, then edited
		schedule(t, e, "b", 3*time.Hour, "b2")
		want := map[string]Pending{
			"a": {3, size("a", "soon") + size("a", "far") + size("a", "stays")},
			"b": {2, size("b", "mv") + size("b", "b2")},
		}
		check := func(when string, e *Engine) {
			t.Helper()
			for topic, w := range want {
				if got := pendingOf(t, e, topic); got != w {
					t.Errorf("%s: topic %s: pending %+v, want %+v", when, topic, got, w)
				}
			}
		}
		check("scheduled", e)

		time.Sleep(2 * time.Second)
		synctest.Wait()
		if len(sink.snapshot()) != 1 {
			t.Fatalf("delivered %d, want 1", len(sink.snapshot()))
		}
		want["a"] = Pending{2, want["a"].Bytes - size("a", "soon")}
		if res, err := e.Cancel(context.Background(), far); err != nil || res != Cancelled {
			t.Fatalf("Cancel = %v, %v", res, err)
		}
		want["a"] = Pending{1, want["a"].Bytes - size("a", "far")}
		res, nid, err := e.Reschedule(context.Background(), moved, time.Now().Add(4*time.Hour))
		if err != nil || res != Rescheduled {
			t.Fatalf("Reschedule = %v, %v", res, err)
		}
		er, _, err := e.Edit(context.Background(), nid, Edit{SetBody: true, Body: []byte("a longer body")})
		if err != nil || er != Edited {
			t.Fatalf("Edit = %v, %v", er, err)
		}
		want["b"] = Pending{2, size("b", "a longer body") + size("b", "b2")}
		check("after delivery, cancel, reschedule, edit", e)

		crash := crashCopy(t, dir)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "schedule", PendingFileName)); err != nil {
			t.Fatalf("Close left no counts file: %v", err)
		}
		e = openEngine(t, dir, &recSink{}, counting)
		if _, err := os.Stat(filepath.Join(dir, "schedule", PendingFileName)); !os.IsNotExist(err) {
			t.Errorf("Open kept the counts file (a crash would reuse it): %v", err)
		}
		check("clean restart", e)
		schedule(t, e, "b", time.Hour, "new")
		want["b"] = Pending{3, want["b"].Bytes + size("b", "new")}
		check("scheduled after the restart", e)
		e.Close()

		e = openEngine(t, crash, &recSink{}, counting)
		want["b"] = Pending{2, want["b"].Bytes - size("b", "new")}
		check("after a crash (counted)", e)
		e.Close()
	})
}

// TestPendingFileThatDoesNotHold: a counts file that names another
// commitlog end, or does not decode, is not used: the counts come from the
// segments.
func TestPendingFileThatDoesNotHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, counting)
		schedule(t, e, "a", time.Hour, "x")
		e.Close()
		path := filepath.Join(dir, "schedule", PendingFileName)
		for _, content := range []string{
			pendingMagic + `{"version":1,"commitlog_end":1,"topics":{"a":{"Messages":7,"Bytes":9}}}`,
			"garbage",
		} {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			e = openEngine(t, dir, &recSink{}, counting)
			if got, want := pendingOf(t, e, "a"), (Pending{1, size("a", "x")}); got != want {
				t.Errorf("counts file %q: pending %+v, want %+v", content, got, want)
			}
			e.Close()
		}
	})
}

func FuzzDecodePending(f *testing.F) {
	f.Add([]byte(pendingMagic + `{"version":1,"commitlog_end":5,"topics":{"a":{"Messages":1,"Bytes":3}}}`))
	f.Add([]byte(pendingMagic + `{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePending(b)
		if err != nil {
			return
		}
		for topic, c := range p.Topics {
			if c.Messages <= 0 || c.Bytes < 0 {
				t.Fatalf("decoded topic %q with %+v", topic, c)
			}
		}
	})
}

// TestPendingNotCounted: without CountPending and without a counts file,
// PendingOf refuses rather than answer a count that misses what was on
// disk; a counts file left by a clean Close is used all the same.
func TestPendingNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, nil)
		schedule(t, e, "a", time.Hour, "x")
		if _, err := e.PendingOf(context.Background(), func(string) bool { return true }); !errors.Is(err, ErrNotCounted) {
			t.Errorf("PendingOf without CountPending: %v, want ErrNotCounted", err)
		}
		e.Close()
		e = openEngine(t, dir, &recSink{}, counting)
		schedule(t, e, "a", time.Hour, "y")
		e.Close()
		e = openEngine(t, dir, &recSink{}, nil)
		if got, want := pendingOf(t, e, "a"), (Pending{2, size("a", "x") + size("a", "y")}); got != want {
			t.Errorf("from the counts file: %+v, want %+v", got, want)
		}
		e.Close()
	})
}

// TestPendingBatch: a batch of several topics counts each message under
// its topic, and a request whose idempotency key was used is not counted
// again.
func TestPendingBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { counting(o); o.IdempotencyWindow = time.Hour })
		reqs := []Request{
			{Topic: "x", Delay: time.Hour, Body: []byte("1")},
			{Topic: "x", Delay: time.Hour, Body: []byte("2"), IdempotencyKey: "k"},
			{Topic: "y", Delay: time.Hour, Body: []byte("3")},
			{Topic: "x", Delay: time.Hour, Body: []byte("4"), IdempotencyKey: "k"}, // the same key: not stored again
			{Topic: "y", Delay: time.Hour, Body: []byte("5")},
		}
		if _, err := e.ScheduleBatch(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		x, y := pendingOf(t, e, "x"), pendingOf(t, e, "y")
		if x.Messages != 2 || y.Messages != 2 || y.Bytes != 2*size("y", "3") {
			t.Errorf("pending x %+v, y %+v; want 2 and 2 (y %d bytes)", x, y, 2*size("y", "3"))
		}
		e.Close()
	})
}

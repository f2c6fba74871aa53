package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// steppedClock is a wall clock (Options.Now) that an operator or NTP
// steps: time.Now plus an offset the test sets.
type steppedClock struct {
	mu   sync.Mutex
	step time.Duration
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.step)
}

// set steps the clock to time.Now plus d.
func (c *steppedClock) set(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

// recSink records every delivery with the engine-clock time it arrived.
type recSink struct {
	mu    sync.Mutex
	got   []got
	fail  map[string]int // topic -> failures left
	calls int
}

type got struct {
	id    message.ID
	topic string
	body  string
	at    time.Time
}

func (s *recSink) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail[topic] > 0 {
		s.fail[topic]--
		return errors.New("sink down")
	}
	now := time.Now()
	for _, d := range batch {
		s.got = append(s.got, got{id: d.ID, topic: topic, body: string(d.Message.Body), at: now})
	}
	return nil
}

func (s *recSink) snapshot() []got {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func openEngine(t *testing.T, dir string, sink Sink, mod func(*Options)) *Engine {
	t.Helper()
	opts := Options{Dir: dir, Sink: sink, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
		CommitlogSegmentSize: 1 << 20}
	if mod != nil {
		mod(&opts)
	}
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Fail rather than hang: under synctest a never-ready engine would
	// otherwise hold the test until the go test timeout.
	select {
	case <-e.Ready():
	case <-e.Refused():
		t.Fatalf("the engine refused to start: %v", e.RefusedErr())
	case <-time.After(time.Hour):
		t.Fatalf("the engine is not ready an hour after Open; health: %v", e.Health())
	}
	return e
}

func schedule(t *testing.T, e *Engine, topic string, delay time.Duration, body string) message.ID {
	t.Helper()
	id, err := e.Schedule(context.Background(), Request{Topic: topic, Delay: delay, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// checkDeliveries asserts each id was delivered exactly once, never before
// its deliverAt, and at most maxLate after it.
func checkDeliveries(t *testing.T, gots []got, ids []message.ID, maxLate time.Duration) {
	t.Helper()
	seen := map[message.ID]int{}
	for _, g := range gots {
		seen[g.id]++
		due := time.UnixMilli(g.id.DeliverAt)
		if g.at.Before(due) {
			t.Errorf("%v delivered %v early (I4)", g.id, due.Sub(g.at))
		}
		if late := g.at.Sub(due); late > maxLate {
			t.Errorf("%v delivered %v late", g.id, late)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%v delivered %d times", id, seen[id])
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("%d distinct deliveries, want %d", len(seen), len(ids))
	}
}

func TestFiresOnTimeAcrossBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		var ids []message.ID
		// Past, now, exact bucket edges, and several buckets ahead.
		delays := []time.Duration{-time.Hour, 0, time.Millisecond, 10 * time.Second, 9999 * time.Millisecond, 20 * time.Second}
		for i := range 200 {
			delays = append(delays, time.Duration(i)*173*time.Millisecond)
		}
		for i, d := range delays {
			ids = append(ids, schedule(t, e, "orders", d, fmt.Sprint(i)))
		}
		time.Sleep(45 * time.Second)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), ids, 0)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		ctx := context.Background()
		near := schedule(t, e, "t", 3*time.Second, "near") // loaded bucket
		far := schedule(t, e, "t", time.Hour, "far")       // future, unloaded bucket
		keep := schedule(t, e, "t", 3*time.Second, "keep")
		fired := schedule(t, e, "t", time.Second, "fired")
		far2 := schedule(t, e, "t", time.Hour, "far2")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for _, tc := range []struct {
			name string
			id   message.ID
			want CancelResult
		}{
			// A real message's seq with another time of its bucket names
			// no message: Unknown, and the real one is left alone.
			{"seq_of_a_loaded_one_another_time", message.ID{DeliverAt: keep.DeliverAt + 1, Seq: keep.Seq}, Unknown},
			{"seq_of_an_unloaded_one_another_time", message.ID{DeliverAt: far2.DeliverAt - 1, Seq: far2.Seq}, Unknown},
			{"loaded_pending", near, Cancelled},
			{"unloaded_future", far, Cancelled},
			{"again", near, AlreadyCancelled},
			{"already_delivered", fired, AlreadyDone},
			{"never_issued", message.ID{DeliverAt: near.DeliverAt, Seq: 1 << 40}, Unknown},
			{"no_segment", message.ID{DeliverAt: near.DeliverAt + 7*24*3600_000, Seq: near.Seq}, Unknown},
		} {
			res, err := e.Cancel(ctx, tc.id)
			if err != nil || res != tc.want {
				t.Errorf("%s: Cancel = %v, %v; want %v", tc.name, res, err, tc.want)
			}
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{keep, fired, far2}, 0)
		e.Close()
	})
}

// TestCancelRacesFiring cancels messages exactly as they come due: each
// answer must agree with what the sink saw (I7).
func TestCancelRacesFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		var ids []message.ID
		for i := range 300 {
			ids = append(ids, schedule(t, e, "race", time.Second+time.Duration(i%7)*time.Millisecond, fmt.Sprint(i)))
		}
		time.Sleep(time.Second)
		answers := make([]CancelResult, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				r, err := e.Cancel(context.Background(), id)
				if err != nil {
					t.Error(err)
				}
				answers[i] = r
			})
		}
		wg.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		delivered := map[message.ID]bool{}
		for _, g := range sink.snapshot() {
			delivered[g.id] = true
		}
		for i, id := range ids {
			if answers[i] == Cancelled && delivered[id] {
				t.Fatalf("%v answered cancelled but was delivered (I7)", id)
			}
			if answers[i] != Cancelled && !delivered[id] {
				t.Fatalf("%v answered %v but was never delivered", id, answers[i])
			}
		}
		e.Close()
	})
}

func TestRestartNeitherLosesNorReplays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		var ids []message.ID
		for i := range 100 {
			ids = append(ids, schedule(t, e, "r", time.Duration(i)*300*time.Millisecond, fmt.Sprint(i)))
		}
		cancelled := schedule(t, e, "r", 25*time.Second, "cancel me")
		if r, _ := e.Cancel(context.Background(), cancelled); r != Cancelled {
			t.Fatalf("cancel: %v", r)
		}
		time.Sleep(12 * time.Second)
		synctest.Wait()
		before := len(sink.snapshot())
		if before == 0 || before == len(ids) {
			t.Fatalf("%d delivered before the restart; want some", before)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// Down for a minute: everything left is overdue at restart.
		time.Sleep(time.Minute)
		e = openEngine(t, dir, sink, nil)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		gots := sink.snapshot()
		checkDeliveries(t, gots, ids, 2*time.Minute)
		// Overdue messages come in deliverAt order.
		for i := before + 1; i < len(gots); i++ {
			if gots[i].id.DeliverAt < gots[i-1].id.DeliverAt {
				t.Fatalf("backlog out of order: %v after %v", gots[i].id, gots[i-1].id)
			}
		}
		e.Close()
	})
}

func TestFailingTopicDoesNotStallOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{fail: map[string]int{"down": 5}}
		e := openEngine(t, t.TempDir(), sink, nil)
		a := schedule(t, e, "down", time.Second, "a")
		b := schedule(t, e, "up", time.Second, "b")
		time.Sleep(time.Second + 10*time.Millisecond)
		synctest.Wait()
		gots := sink.snapshot()
		if len(gots) != 1 || gots[0].id != b {
			t.Fatalf("healthy topic not delivered on time while the other fails: %v", gots)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{a, b}, time.Minute)
		if st := e.Stats(); st.Retries != 5 || st.Delivered != 2 {
			t.Fatalf("stats %+v", st)
		}
		e.Close()
	})
}

func TestRetiresFinishedSegments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		for i := range 30 {
			schedule(t, e, "x", time.Duration(i)*time.Second, "")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(sink.snapshot()); n != 30 {
			t.Fatalf("%d delivered", n)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "schedule", "*.sched"))
		if len(left) != 0 {
			t.Fatalf("segments left after every entry was done: %v", left)
		}
		e.Close()
	})
}

func TestScheduleErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { o.MaxDelay = 24 * time.Hour })
		ctx := context.Background()
		_, err := e.Schedule(ctx, Request{Topic: "t", Delay: 48 * time.Hour})
		if !errors.Is(err, ErrTooFar) || !strings.Contains(err.Error(), "2d ahead") || !strings.Contains(err.Error(), "maximum delay is 1d") {
			t.Fatalf("too far: %v", err)
		}
		if _, err := e.Schedule(ctx, Request{Delay: time.Second}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty topic: %v", err)
		}
		// A batch with one bad message writes nothing.
		end := e.log.EndOffset()
		_, err = e.ScheduleBatch(ctx, []Request{{Topic: "ok"}, {Topic: "t", Delay: 1000 * time.Hour}})
		if err == nil || e.log.EndOffset() != end {
			t.Fatalf("bad batch: %v, log grew %d", err, e.log.EndOffset()-end)
		}
		e.Close()
		if _, err := e.Schedule(ctx, Request{Topic: "t"}); !errors.Is(err, ErrClosed) {
			t.Fatalf("after close: %v", err)
		}
	})
}

func TestOptionErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no_sink", Options{Dir: dir}, "Sink is nil"},
		{"lead_too_long", Options{Dir: dir, Sink: &recSink{}, SegmentDuration: time.Minute, PreloadLead: time.Minute}, "shorter than the segment duration"},
		{"bad_duration", Options{Dir: dir, Sink: &recSink{}, SegmentDuration: 1500 * time.Millisecond}, "duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	os.RemoveAll(dir)
}

// TestBacklogLoadsOneBucketAtATime: after downtime, overdue buckets load
// oldest first and the next only once the previous one has drained, so a
// backlog of any size holds one bucket in memory.
func TestBacklogLoadsOneBucketAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		var ids []message.ID
		for i := range 50 {
			// Five buckets of 10 s, from 20 s ahead.
			ids = append(ids, schedule(t, e, "b", 20*time.Second+time.Duration(i)*time.Second, fmt.Sprint(i)))
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		release := make(chan struct{})
		var blocked sync.Once
		gate := SinkFunc(func(ctx context.Context, topic string, batch []Delivery) error {
			blocked.Do(func() { <-release })
			return sink.Deliver(ctx, topic, batch)
		})
		e, err := Open(Options{Dir: dir, Sink: gate, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second, CommitlogSegmentSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first overdue bucket is loaded and its first delivery blocks
		if n := e.Stats().Loaded; n != 1 {
			t.Fatalf("%d buckets loaded while the oldest overdue one drains; want 1", n)
		}
		close(release)
		time.Sleep(time.Second)
		synctest.Wait()
		gots := sink.snapshot()
		checkDeliveries(t, gots, ids, 6*time.Minute)
		for i := 1; i < len(gots); i++ {
			if gots[i].id.DeliverAt < gots[i-1].id.DeliverAt {
				t.Fatalf("backlog out of order at %d", i)
			}
		}
		e.Close()
	})
}

// TestCancelWhoseRecordFailsStillDelivers: Cancel decides, the message
// comes due while its cancel record is being appended, and the append
// fails. The message must still be delivered, not silently dropped.
func TestCancelWhoseRecordFailsStillDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		id := schedule(t, e, "c", time.Second, "keep")
		time.Sleep(500 * time.Millisecond)
		boom := errors.New("injected: disk gone")
		e.appendCancel = func(offs []int64, recs ...commitlog.Record) ([]int64, error) {
			// The message comes due while the append is in progress.
			time.Sleep(time.Second)
			synctest.Wait()
			return offs, boom
		}
		if r, err := e.Cancel(context.Background(), id); !errors.Is(err, boom) || r == Cancelled {
			t.Fatalf("Cancel = %v, %v; want the append's error", r, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{id}, time.Second)
		e.Close()
	})
}

// slowSink takes lag (of the bubble's clock) per Deliver call, like a sink
// that fsyncs, and records what it got.
type slowSink struct {
	recSink
	lag time.Duration
	max int // largest batch
}

func (s *slowSink) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	time.Sleep(s.lag)
	s.mu.Lock()
	s.max = max(s.max, len(batch))
	s.mu.Unlock()
	return s.recSink.Deliver(ctx, topic, batch)
}

// TestSlowSinkGetsMergedBatches: messages due one per millisecond fire in
// batches of about one; a sink that takes 5 ms per call must get what piled
// up meanwhile in one call, or delivery falls behind by 4 ms per message.
func TestSlowSinkGetsMergedBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &slowSink{lag: 5 * time.Millisecond}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) { o.fireBatch = 64 })
		start := time.Now().Add(time.Second)
		var ids []message.ID
		for i := range 2000 {
			id, err := e.Schedule(context.Background(), Request{Topic: "t", At: start.Add(time.Duration(i) * time.Millisecond), Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// One call in flight (5 ms) plus the one that waits for it.
		checkDeliveries(t, sink.snapshot(), ids, 12*time.Millisecond)
		if sink.calls > 2000/3 {
			t.Errorf("%d sink calls for 2000 messages: batches were not merged", sink.calls)
		}
		if sink.max > 64 {
			t.Errorf("a sink call carried %d messages, more than the fire batch 64", sink.max)
		}
		e.Close()
	})
}

// TestHandoffLead: with a lead, messages reach the sink that much before
// their deliverAt, never more, and none is lost or repeated.
func TestHandoffLead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lead = 20 * time.Millisecond
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) { o.HandoffLead = lead })
		var ids []message.ID
		for i := range 300 {
			ids = append(ids, schedule(t, e, "t", time.Duration(i)*37*time.Millisecond, fmt.Sprint(i)))
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		gots := sink.snapshot()
		seen := map[message.ID]bool{}
		for _, g := range gots {
			due := time.UnixMilli(g.id.DeliverAt)
			if early := due.Sub(g.at); early > lead {
				t.Errorf("%v handed over %v early, more than the lead %v", g.id, early, lead)
			} else if early < lead/2 && g.id.DeliverAt > ids[0].DeliverAt {
				// The driver hands over in steps of half the lead: once the
				// earliest entry is within half of it, all within the lead.
				t.Errorf("%v handed over %v early, less than half the lead %v", g.id, early, lead)
			}
			if seen[g.id] {
				t.Errorf("%v handed over twice", g.id)
			}
			seen[g.id] = true
		}
		if len(seen) != len(ids) {
			t.Errorf("%d of %d messages handed over", len(seen), len(ids))
		}
		e.Close()
	})
}

// TestHandoffLeadSteps: with a lead, messages due a millisecond apart are
// handed over in steps of half the lead, not one hand-over (a queue fsync
// and a dispatch-log fsync) per millisecond.
func TestHandoffLeadSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lead, n = 20 * time.Millisecond, 400
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) { o.HandoffLead = lead })
		for i := range n {
			schedule(t, e, "t", time.Second+time.Duration(i)*time.Millisecond, fmt.Sprint(i))
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		at := map[time.Time]bool{}
		for _, g := range sink.snapshot() {
			at[g.at] = true
		}
		// 400 ms of messages in steps of 10 ms: about 40 hand-over times.
		if want := int(n*time.Millisecond/(lead/2)) + 2; len(sink.snapshot()) != n || len(at) > want {
			t.Errorf("%d messages handed over at %d distinct times; want %d at no more than %d", len(sink.snapshot()), len(at), n, want)
		}
		e.Close()
	})
}

// TestRoutedWhileLoadingFiresAfterTheLoad: messages due at once into a
// bucket whose loader is still running reach the sink in deliverAt order:
// those routed meanwhile wait for the loader's chunks, which hold the
// earlier ones (e2e TestListForgedPageToken saw c, a, b).
func TestRoutedWhileLoadingFiresAfterTheLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		watched, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) {
			o.afterWatch = func(int64) { once.Do(func() { close(watched); <-release }) }
		})
		var ids []message.ID
		ids = append(ids, schedule(t, e, "t", 0, "a"))
		<-watched // a's bucket is loading; a is in its segment
		ids = append(ids, schedule(t, e, "t", time.Millisecond, "b"), schedule(t, e, "t", 2*time.Millisecond, "c"))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		close(release)
		time.Sleep(time.Second)
		synctest.Wait()
		var got []string
		for _, g := range sink.snapshot() {
			got = append(got, g.body)
		}
		if strings.Join(got, ",") != "a,b,c" {
			t.Errorf("handed over %v (IDs %v); want a, b, c", got, ids)
		}
		e.Close()
	})
}

func TestHandoffLeadBounds(t *testing.T) {
	for _, lead := range []time.Duration{-time.Millisecond, MaxHandoffLead + time.Millisecond} {
		_, err := Open(Options{Dir: t.TempDir(), Sink: &recSink{}, HandoffLead: lead})
		if err == nil || !strings.Contains(err.Error(), "handoff lead") {
			t.Errorf("lead %v: got %v, want an error naming the handoff lead", lead, err)
		}
	}
}

// gateSink holds every Deliver call until release is closed.
type gateSink struct {
	recSink
	release chan struct{}
}

func (s *gateSink) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.recSink.Deliver(ctx, topic, batch)
}

// TestNoBusyLoopAtMaxInflight: while the sink holds MaxInflight messages
// and more are overdue in the wheel, the driver must wait for the sink to
// confirm, not poll the overdue deadline. In a synctest bubble a busy loop
// keeps the fake clock from moving, so the first Sleep would never return:
// the watchdog, on the real clock, turns that into a failure.
func TestNoBusyLoopAtMaxInflight(t *testing.T) {
	watchdog := time.AfterFunc(2*time.Minute, func() {
		panic("TestNoBusyLoopAtMaxInflight: the bubble's clock stopped: the engine's driver busy-loops while MaxInflight messages are in the sink")
	})
	defer watchdog.Stop()
	synctest.Test(t, func(t *testing.T) {
		sink := &gateSink{release: make(chan struct{})}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) { o.MaxInflight = 8; o.fireBatch = 4 })
		var ids []message.ID
		for i := range 40 {
			ids = append(ids, schedule(t, e, "t", time.Second, fmt.Sprint(i)))
		}
		time.Sleep(3 * time.Second) // all 40 are due; the sink holds 8
		synctest.Wait()
		if st := e.Stats(); st.Inflight != 8 {
			t.Fatalf("in flight %d, want MaxInflight 8", st.Inflight)
		}
		loops := e.d.n.loops.Load()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		// It wakes once a second to follow the wall clock (maxSleepMs),
		// and for nothing else.
		if n, limit := e.d.n.loops.Load()-loops, int64(10*time.Minute/(maxSleepMs*time.Millisecond))+10; n > limit {
			t.Errorf("the driver looped %d times in 10 minutes while the sink held MaxInflight messages, want at most %d (once a second)", n, limit)
		}
		close(sink.release)
		time.Sleep(time.Second)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), ids, 10*time.Minute+2*time.Second)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

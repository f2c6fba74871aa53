package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// TestRefusedStartHandsNothingOver: a start that refuses for a held
// bucket due at start (a damaged or lost dispatch log) hands nothing to
// the sink, also of the other buckets due then, older or newer than the
// held one, and records nothing done: the start-up checks come before the
// first hand-over, and a refused start never makes one. Ready stays open.
func TestRefusedStartHandsNothingOver(t *testing.T) {
	const seg = 10 * time.Second
	for _, tc := range []struct {
		name string
		// heldFirst: the held bucket is [20 s, 30 s), before the overdue
		// one [30 s, 40 s); else it is [30 s, 40 s), after [20 s, 30 s).
		heldFirst bool
		damage    func(t *testing.T, done string)
		wantWhy   string
	}{
		{"done_flip_held_first", true, flipDoneRecord, "is damaged"},
		{"done_flip_held_last", false, flipDoneRecord, "is damaged"},
		{"done_delete_held_last", false, func(t *testing.T, done string) {
			if err := os.Remove(done); err != nil {
				t.Fatal(err)
			}
		}, "is missing and the bucket has started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				sink := &recSink{}
				e := openEngine(t, dir, sink, nil)
				t0 := time.Now()
				at := func(d time.Duration) time.Time { return t0.Add(d) }
				// The held bucket gets done-records before the stop at
				// 21 s: deliveries of messages due at its start (held
				// first), or cancels of messages due at its end.
				held, over := 20*time.Second, 30*time.Second
				if !tc.heldFirst {
					held, over = over, held
				}
				var heldIDs, overIDs []message.ID
				for i := range 6 {
					due := at(held + 9*time.Second)
					if tc.heldFirst && i < 3 {
						due = at(held + time.Duration(i)*time.Millisecond)
					}
					heldIDs = append(heldIDs, scheduleAt(t, e, due, fmt.Sprint("held-", i)))
					overIDs = append(overIDs, scheduleAt(t, e, at(over+5*time.Second), fmt.Sprint("overdue-", i)))
				}
				if !tc.heldFirst {
					for _, id := range heldIDs[:3] {
						if res, err := e.Cancel(t.Context(), id); err != nil || res != Cancelled {
							t.Fatalf("Cancel(%v) = %v, %v", id, res, err)
						}
					}
				}
				time.Sleep(time.Until(at(21 * time.Second)))
				synctest.Wait()
				before := len(sink.snapshot())
				if want := map[bool]int{true: 3, false: 0}[tc.heldFirst]; before != want {
					t.Fatalf("%d delivered before the stop, want %d", before, want)
				}
				if lag := e.Stats().ReputLag; lag != 0 {
					t.Fatalf("reput is %d bytes behind with everything idle", lag)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				sdir := filepath.Join(dir, "schedule")
				heldDone := filepath.Join(sdir, dispatchlog.Name(schedulelog.BucketStart(heldIDs[0].DeliverAt, seg)))
				overDone := filepath.Join(sdir, dispatchlog.Name(schedulelog.BucketStart(overIDs[0].DeliverAt, seg)))
				tc.damage(t, heldDone)
				overBefore, err := os.ReadFile(overDone)
				if err != nil {
					t.Fatal(err)
				}

				// Both buckets due: the overdue one's messages at 35 s or
				// 25 s, the held one's started at 20 s or 30 s.
				time.Sleep(time.Until(at(36 * time.Second)))
				var logs syncBuffer
				e, err = Open(Options{Dir: dir, Sink: sink, SegmentDuration: seg, PreloadLead: 2 * time.Second,
					CommitlogSegmentSize: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				select {
				case <-e.Refused():
				case <-e.Ready():
					t.Fatalf("ready with a held bucket due at start:\n%s", logs.String())
				case <-time.After(time.Minute):
					t.Fatalf("neither refused nor ready a minute after the start:\n%s", logs.String())
				}
				why := e.RefusedErr().Error()
				for _, want := range []string{filepath.Base(heldDone), tc.wantWhy, "hourglass repair"} {
					if !strings.Contains(why, want) {
						t.Errorf("the refusal does not say %q: %s", want, why)
					}
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if got := sink.snapshot()[before:]; len(got) != 0 {
					t.Errorf("a refused start handed %d messages to the sink, the first %v (%s)", len(got), got[0].id, got[0].body)
				}
				if st := e.Stats(); st.Fired != 0 || st.Delivered != 0 {
					t.Errorf("a refused start fired %d, recorded %d done", st.Fired, st.Delivered)
				}
				if after, err := os.ReadFile(overDone); err != nil || !bytes.Equal(after[segfile.HeaderSize:], overBefore[segfile.HeaderSize:]) {
					t.Errorf("the overdue bucket's dispatch log changed in a refused start (%d bytes, was %d; %v)", len(after), len(overBefore), err)
				}
				select {
				case <-e.Ready():
					t.Error("Ready closed after the refusal")
				default:
				}
			})
		})
	}
}

// TestLostDoneNotRecoveredPastDamage: the loader recreates the lost
// dispatch log of a bucket that has not started from the cancels it reads
// back from the commitlog; when that read stops at damage (which refuses
// the start: checkRetained), the log gets no Recovered marker, so the
// start after `hourglass repair` reads the cancels again instead of
// taking the ones before the damage for all of them.
func TestLostDoneNotRecoveredPastDamage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, nil)
		t0 := time.Now()
		// 1 MiB commitlog segments: 1.25 MiB an hour ahead, then in the
		// bucket [10 s, 20 s) one message, cancelled, then more an hour
		// ahead, so that the segment holding the cancel is sealed and the
		// newest sealed one (which the commitlog retains).
		body := strings.Repeat("x", 64<<10)
		fill := func(n int) []message.ID {
			var ids []message.ID
			for i := range n {
				ids = append(ids, scheduleAt(t, e, t0.Add(time.Hour), fmt.Sprint(i, body)))
			}
			return ids
		}
		fill(20)
		victim := scheduleAt(t, e, t0.Add(12*time.Second), "victim")
		if res, err := e.Cancel(t.Context(), victim); err != nil || res != Cancelled {
			t.Fatalf("Cancel = %v, %v", res, err)
		}
		after := fill(3)
		fill(20)
		synctest.Wait()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		bucket := schedulelog.BucketStart(victim.DeliverAt, 10*time.Second)
		done := filepath.Join(dir, "schedule", dispatchlog.Name(bucket))
		if err := os.Remove(done); err != nil {
			t.Fatal(err)
		}
		// A record after the cancel, in the same sealed segment.
		segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
		bases := make([]int64, len(segs))
		for i, sg := range segs {
			fmt.Sscanf(filepath.Base(sg), "%020d.log", &bases[i])
		}
		i := len(bases) - 1
		for i > 0 && bases[i] > int64(victim.Seq) {
			i--
		}
		if bases[i] > int64(victim.Seq) || i+1 >= len(bases) || bases[i+1] <= int64(after[1].Seq) {
			t.Fatalf("the victim at %d and a record after its cancel at %d are not in one sealed segment of %v", victim.Seq, after[1].Seq, segs)
		}
		flipAt(t, segs[i], commitlog.SegmentHeaderSize+int64(after[1].Seq)-bases[i]+100)

		// 9 s: the bucket is in the preload window and has not started.
		time.Sleep(time.Until(t0.Add(9 * time.Second)))
		var logs syncBuffer
		e, err := Open(Options{Dir: dir, Sink: &recSink{}, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
			CommitlogSegmentSize: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.Refused():
		case <-e.Ready():
			t.Fatalf("ready on a damaged commitlog:\n%s", logs.String())
		}
		synctest.Wait() // the bucket's load
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "could not be read to its end for cancels") {
			t.Fatalf("the bucket was not loaded, or its log recreated whole:\n%s", logs.String())
		}
		sal, err := dispatchlog.LoadSalvage(done)
		if err != nil || !(sal.Missing || sal.Lost) {
			t.Errorf("the recreated dispatch log: missing %v, lost %v, %v; want it still lost, to be decided again", sal.Missing, sal.Lost, err)
		}
	})
}

// flipDoneRecord flips a byte of the second done-record of the dispatch log
// done, which has valid records after it: damage, not a torn tail.
func flipDoneRecord(t *testing.T, done string) {
	t.Helper()
	st, err := os.Stat(done)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < segfile.HeaderSize+3*dispatchlog.RecordSize {
		t.Fatalf("%s holds %d bytes: want 3 done-records", done, st.Size())
	}
	flipByte(t, done, segfile.HeaderSize+dispatchlog.RecordSize+10)
}

func scheduleAt(t *testing.T, e *Engine, at time.Time, body string) message.ID {
	t.Helper()
	id, err := e.Schedule(t.Context(), Request{Topic: "t", At: at, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

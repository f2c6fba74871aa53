package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/wheel"
)

// entryOffsets returns the offsets and seqs of the entries of the segment
// at path.
func entryOffsets(t *testing.T, path string) (offs []int64, seqs []uint64) {
	t.Helper()
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	it := rd.Iter()
	for it.Next() {
		offs = append(offs, it.Offset())
		seqs = append(seqs, it.Seq())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return offs, seqs
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func truncateBy(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedBucketLoads damages the files of a stopped engine's bucket
// and restarts it: a damaged entry costs that entry only (it is rebuilt
// from the commitlog, which holds it), and a damaged or missing dispatch
// log delivers nothing it cannot prove pending (I3), holds the rest,
// reports it and refuses the start (the bucket is due then).
func TestDamagedBucketLoads(t *testing.T) {
	const n = 40
	for _, tc := range []struct {
		name string
		// delivered: how many messages (the first ones) are delivered
		// before the damage.
		delivered int
		damage    func(t *testing.T, sched, done string)
		// alsoCommitlog, when set, damages the commitlog too, after
		// damage, given the engine's directory and the messages' IDs.
		alsoCommitlog func(t *testing.T, dir string, ids []message.ID)
		// gone: messages (indexes) that are not delivered, with wantAll.
		gone []int
		// wantAll: every message not delivered before is delivered once
		// after; otherwise none is (held).
		wantAll bool
		wantLog string
		corrupt bool // Stats.Corrupt counts it
		rebuilt int64
		lost    int // done-records the damage hides (held entries: n - delivered + lost)
		// reputMayStop: reput's routing may refuse the damaged file
		// (its side of the case is another change).
		reputMayStop bool
	}{
		{name: "flip_in_entry", wantAll: true, corrupt: true, rebuilt: 1,
			wantLog: "rebuilt from the commitlog",
			damage: func(t *testing.T, sched, _ string) {
				offs, _ := entryOffsets(t, sched)
				flipByte(t, sched, offs[n/2]+20)
			}},
		{name: "flip_in_first_entry", wantAll: true, corrupt: true, rebuilt: 1,
			wantLog: "rebuilt from the commitlog",
			damage: func(t *testing.T, sched, _ string) {
				offs, _ := entryOffsets(t, sched)
				flipByte(t, sched, offs[0]+20)
			}},
		{name: "flip_in_two_entries", wantAll: true, corrupt: true, rebuilt: 2,
			wantLog: "rebuilt from the commitlog",
			damage: func(t *testing.T, sched, _ string) {
				offs, _ := entryOffsets(t, sched)
				flipByte(t, sched, offs[3]+2) // a length byte: the resync must find the next entry
				flipByte(t, sched, offs[n-10]+30)
			}},
		{name: "flip_in_entry_lost_from_commitlog", wantAll: true, corrupt: true, rebuilt: 0, gone: []int{n / 2},
			wantLog: "damaged schedule entries skipped and lost",
			damage: func(t *testing.T, sched, _ string) {
				offs, _ := entryOffsets(t, sched)
				flipByte(t, sched, offs[n/2]+20)
			},
			// As after a repair that lost the commitlog's span holding it
			// (the crash harness's --damage found this): the commitlog
			// has no record of the bucket between the damaged entry's
			// neighbours.
			alsoCommitlog: func(t *testing.T, dir string, ids []message.ID) {
				moveOutOfBucket(t, filepath.Join(dir, "commitlog"), ids[n/2].DeliverAt, fmt.Sprint(n/2))
			}},
		{name: "truncated_sched", wantAll: true, corrupt: true, rebuilt: 1, reputMayStop: true,
			wantLog: "rebuilt from the commitlog",
			damage:  func(t *testing.T, sched, _ string) { truncateBy(t, sched, 5) }},
		{name: "truncated_done", delivered: 10, lost: 1, wantLog: "held back",
			damage: func(t *testing.T, _, done string) { truncateBy(t, done, 3) }},
		{name: "torn_done", delivered: 10, wantAll: true,
			damage: func(t *testing.T, _, done string) {
				f, err := os.OpenFile(done, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Half a done-record after the synced length: a crash
				// during a write. Nothing durable is lost.
				f.Write([]byte{9, 0, 0, 0, 'D', 0, 0, 0, 1, 2})
				f.Close()
			}},
		{name: "flip_in_done", delivered: 10, lost: 1, wantLog: "held back",
			damage: func(t *testing.T, _, done string) {
				flipByte(t, done, 104+5*dispatchlog.RecordSize+10)
			}},
		{name: "missing_done", delivered: 10, lost: 10, wantLog: "is missing and the bucket has started",
			damage: func(t *testing.T, _, done string) {
				if err := os.Remove(done); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skip := ""
			defer func() {
				if skip != "" {
					t.Skip(skip)
				}
			}()
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				sink := &recSink{}
				e := openEngine(t, dir, sink, nil)
				// Buckets of 10 s: n messages in [20 s, 30 s), the first
				// `delivered` of them due at once at 20 s, delivered before
				// the damage.
				start := time.Now()
				var ids []message.ID
				for i := range n {
					at := start.Add(20*time.Second + time.Duration(i)*200*time.Millisecond)
					if i < tc.delivered {
						at = start.Add(20*time.Second + time.Duration(i)*time.Millisecond)
					}
					id, err := e.Schedule(t.Context(), Request{Topic: "t", At: at, Body: []byte(fmt.Sprint(i))})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				if tc.delivered > 0 {
					time.Sleep(20*time.Second + 100*time.Millisecond)
					synctest.Wait()
					if got := len(sink.snapshot()); got != tc.delivered {
						t.Fatalf("%d delivered before the damage, want %d", got, tc.delivered)
					}
				}
				// Every message in the segment before the damage: Close
				// does not wait for reput to reach the commitlog's end (the
				// rest is routed at the next start), and under -race it
				// once had routed 20 of the 40.
				synctest.Wait()
				if lag := e.Stats().ReputLag; lag != 0 {
					t.Fatalf("reput is %d bytes behind with everything idle", lag)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				bucket := schedulelog.BucketStart(ids[0].DeliverAt, 10*time.Second)
				sched := filepath.Join(dir, "schedule", schedulelog.Name(bucket))
				done := filepath.Join(dir, "schedule", dispatchlog.Name(bucket))
				tc.damage(t, sched, done)
				if tc.alsoCommitlog != nil {
					tc.alsoCommitlog(t, dir, ids)
				}

				var logs syncBuffer
				e, err := Open(Options{Dir: dir, Sink: sink, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
					CommitlogSegmentSize: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case <-e.Ready():
				case <-e.Refused():
					// Held while due at start: the start is refused, and
					// nothing at all is handed over.
					if tc.wantAll {
						t.Fatalf("refused: %v\n%s", e.RefusedErr(), logs.String())
					}
				case <-time.After(time.Minute):
					e.Close()
					if tc.reputMayStop && strings.Contains(logs.String(), "reput: routing stopped") {
						// TODO(issue 19, case 3): reput's writer refuses a
						// segment cut below its synced length and routing
						// stops; the loader side is tested in schedulelog
						// (TestScanDamage/truncated_sched).
						skip = "reput stops routing on a segment cut below its synced length:\n" + logs.String()
						return
					}
					t.Fatalf("not ready a minute after the restart:\n%s", logs.String())
				}
				if !tc.wantAll && e.RefusedErr() == nil {
					t.Errorf("ready with a held bucket due at start; want a refusal:\n%s", logs.String())
				}
				time.Sleep(40 * time.Second)
				synctest.Wait()
				seen := map[message.ID]int{}
				for _, g := range sink.snapshot() {
					seen[g.id]++
					if g.at.Before(time.UnixMilli(g.id.DeliverAt)) {
						t.Errorf("%v delivered early", g.id)
					}
				}
				for i, id := range ids {
					want := 1
					if i >= tc.delivered && (!tc.wantAll || slices.Contains(tc.gone, i)) {
						want = 0
					}
					if seen[id] != want {
						t.Errorf("message %d (%v) delivered %d times, want %d", i, id, seen[id], want)
					}
				}
				st := e.Stats()
				if tc.corrupt && st.Corrupt == 0 {
					t.Error("Stats.Corrupt is 0 after damage")
				}
				if st.Rebuilt != tc.rebuilt {
					t.Errorf("Stats.Rebuilt = %d, want %d", st.Rebuilt, tc.rebuilt)
				}
				if !tc.wantAll {
					if want := int64(n - tc.delivered + tc.lost); st.Held != want {
						t.Errorf("Stats.Held = %d, want %d", st.Held, want)
					}
					time.Sleep(DefaultStallAfter)
					if err := e.Health(); err == nil || !strings.Contains(err.Error(), "hourglass repair") {
						t.Errorf("Health() = %v, want the held bucket and `hourglass repair`", err)
					}
				} else if err := e.Health(); err != nil {
					t.Errorf("Health() = %v", err)
				}
				if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
					t.Errorf("the log does not say %q:\n%s", tc.wantLog, logs.String())
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// moveOutOfBucket finds the commitlog record of the message due at
// deliverAt with body (topic "t", no headers) in the segment files of dir
// and moves its deliverAt an hour later, sealing the record again: the
// commitlog then holds no record of that message's bucket there.
func moveOutOfBucket(t *testing.T, dir string, deliverAt int64, body string) {
	t.Helper()
	payload := message.AppendSchedule(nil, &message.Message{DeliverAt: deliverAt, Topic: []byte("t"), Body: []byte(body)})
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, payload)
		if i < record.HeaderSize || int(binary.LittleEndian.Uint32(b[i-record.HeaderSize:])) != len(payload) {
			continue
		}
		rec := b[i-record.HeaderSize : i+len(payload)+record.TrailerSize]
		binary.LittleEndian.PutUint64(b[i+1:], uint64(deliverAt+time.Hour.Milliseconds()))
		record.Seal(rec)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		found++
	}
	if found != 1 {
		t.Fatalf("found the record of the message due at %d in %d commitlog files, want 1", deliverAt, found)
	}
}

// syncBuffer is a log destination safe for the engine's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEntryRefs: references reach entries of any offset in a segment
// (past 32 GiB included), each offset its own ref, and say so when the
// slots run out instead of pointing at a wrong entry.
func TestEntryRefs(t *testing.T) {
	d := &driver{buckets: map[int64]*bucket{}}
	b := &bucket{start: 0}
	other := &bucket{start: 3600_000}
	const gib = int64(1) << 30
	offs := []int64{schedulelog.FirstOffset, 32*gib - 8, 32 * gib, 32*gib + 8, 64*gib - 8, 64 * gib, 1<<40 + 8, 1 << 50, -1, -2}
	seen := map[wheel.Ref]int64{}
	for _, off := range append(offs, offs...) {
		for _, bk := range []*bucket{b, other} {
			ref, err := d.entryRef(bk, off)
			if err != nil {
				t.Fatalf("entryRef(%d): %v", off, err)
			}
			if ref > wheel.MaxRef {
				t.Fatalf("ref %#x for %d is above wheel.MaxRef", ref, off)
			}
			gb, goff := d.resolve(ref)
			if gb != bk || goff != off {
				t.Fatalf("offset %d resolves to bucket %v offset %d", off, gb.start, goff)
			}
			key := ref
			if prev, ok := seen[key]; ok && (prev != off) {
				t.Fatalf("offsets %d and %d share ref %#x", prev, off, ref)
			}
			seen[key] = off
		}
	}
	for _, bad := range []int64{0, schedulelog.FirstOffset + 1} {
		if _, err := d.entryRef(b, bad); err == nil {
			t.Errorf("entryRef(%d) accepted an offset that is not an entry offset", bad)
		}
	}
	// Run the slots out: one bucket, 256 regions.
	d2 := &driver{}
	big := &bucket{}
	var err error
	for i := int64(0); i <= 256 && err == nil; i++ {
		_, err = d2.entryRef(big, i<<regionShift+schedulelog.FirstOffset)
	}
	if err == nil {
		t.Fatal("257 regions referenced without an error")
	}
	d2.freeSlots(big)
	if _, err := d2.entryRef(&bucket{}, 64*gib); err != nil {
		t.Fatalf("after freeing the slots: %v", err)
	}
}

// TestWallClockStepFiresWithinASecond: a forward step of the wall clock
// (Options.Now) makes what is now due fire within a second, not after the
// timer the driver slept on; a backward step never fires early.
func TestWallClockStepFiresWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &steppedClock{}
		now := clock.now
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) {
			o.Now = now
			o.SegmentDuration = time.Hour
			o.PreloadLead = 10 * time.Minute
		})
		// Due in 30 min on the wall clock; the driver sleeps toward it on
		// the monotonic clock.
		due := now().Add(30 * time.Minute)
		id, err := e.Schedule(t.Context(), Request{Topic: "t", At: due, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		clock.set(-time.Hour) // backward: nothing may fire early
		time.Sleep(40 * time.Minute)
		synctest.Wait()
		if got := sink.snapshot(); len(got) != 0 {
			t.Fatalf("delivered %d messages after the clock stepped back, before deliverAt", len(got))
		}
		clock.set(29 * time.Minute) // forward: it is now due (wall clock 70 min after the start)
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		got := sink.snapshot()
		if len(got) != 1 || got[0].id != id {
			t.Fatalf("deliveries %v a second after the clock stepped forward past deliverAt, want %v", got, id)
		}
		e.Close()
	})
}

// TestRepairHeldBucket: a bucket held for a damaged dispatch log stays
// held until RepairDispatchLogs is given a decision; it keeps a copy of
// the log it replaces; after it the bucket loads again.
func TestRepairHeldBucket(t *testing.T) {
	const n, delivered = 20, 5
	for _, tc := range []struct {
		name   string
		assume Assumption
		want   int // deliveries after the repair
	}{
		{"assume_pending", AssumePending, n - delivered + 1}, // the hidden one again
		{"assume_delivered", AssumeDelivered, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				sink := &recSink{}
				e := openEngine(t, dir, sink, nil)
				start := time.Now()
				var ids []message.ID
				for i := range n {
					at := start.Add(20*time.Second + time.Duration(i)*200*time.Millisecond)
					if i < delivered {
						at = start.Add(20*time.Second + time.Duration(i)*time.Millisecond)
					}
					id, err := e.Schedule(t.Context(), Request{Topic: "t", At: at, Body: []byte(fmt.Sprint(i))})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				time.Sleep(20*time.Second + 100*time.Millisecond)
				synctest.Wait()
				e.Close()
				bucket := schedulelog.BucketStart(ids[0].DeliverAt, 10*time.Second)
				sdir := filepath.Join(dir, "schedule")
				done := filepath.Join(sdir, dispatchlog.Name(bucket))
				flipByte(t, done, 104+2*dispatchlog.RecordSize+10)

				var kept []string
				keep := func(p string) error { kept = append(kept, p); return nil }
				if _, err := RepairDispatchLogs(sdir, DoneRepairOptions{Keep: keep}); !errors.Is(err, ErrNeedsDecision) {
					t.Fatalf("repair without a decision: %v, want ErrNeedsDecision", err)
				}
				if len(kept) != 0 {
					t.Fatalf("repair without a decision kept %v: it must change nothing", kept)
				}
				var out strings.Builder
				nch, err := RepairDispatchLogs(sdir, DoneRepairOptions{Keep: keep, Assume: tc.assume, Out: &out})
				if err != nil || nch != 1 || len(kept) != 1 || kept[0] != done {
					t.Fatalf("repair: %d changes, kept %v, %v\n%s", nch, kept, err, out.String())
				}
				before := len(sink.snapshot())
				e = openEngine(t, dir, sink, nil)
				time.Sleep(20 * time.Second)
				synctest.Wait()
				if got := len(sink.snapshot()) - before; got != tc.want {
					t.Errorf("%d deliveries after the repair, want %d", got, tc.want)
				}
				if st := e.Stats(); st.Held != 0 {
					t.Errorf("Stats.Held = %d after the repair", st.Held)
				}
				e.Close()
			})
		})
	}
}

// TestLoadRetriesTransientFailure: a bucket whose segment cannot be
// opened for a while (too many open files) is retried with backoff and
// reported through Health, and loads and fires once it can be opened.
func TestLoadRetriesTransientFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failing := true
		openSegment = func(path string) (*schedulelog.MappedReader, error) {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
			}
			return schedulelog.OpenMapped(path)
		}
		defer func() { openSegment = schedulelog.OpenMapped }()
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		id := schedule(t, e, "t", 5*time.Second, "x")
		time.Sleep(8 * time.Second) // loads from 3 s on: failing
		synctest.Wait()
		var se *StallError
		if err := e.Health(); !errors.As(err, &se) || se.Stage != StageLoad || !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("Health() = %v while the segment cannot be opened, want a load stall with EMFILE", err)
		}
		if len(sink.snapshot()) != 0 {
			t.Fatal("delivered while its segment could not be opened")
		}
		mu.Lock()
		failing = false
		mu.Unlock()
		time.Sleep(6 * time.Second) // the backoff is at most 5 s
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{id}, 6*time.Second)
		if err := e.Health(); err != nil {
			t.Errorf("Health() = %v after the segment loaded", err)
		}
		e.Close()
	})
}

// TestDoneRecordRetried: when recording deliveries fails for a while (a
// full disk), the lane retries with backoff and reports through Health,
// and the done-records are written once it works: nothing is counted
// unconfirmed, and a restart delivers nothing again (I3).
func TestDoneRecordRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		var mu sync.Mutex
		failing := true
		orig := e.d.markDone
		e.d.markDone = func(b int64, recs ...dispatchlog.Done) error {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return &os.PathError{Op: "write", Path: "x.done", Err: syscall.ENOSPC}
			}
			return orig(b, recs...)
		}
		id := schedule(t, e, "t", time.Second, "x")
		time.Sleep(4 * time.Second)
		synctest.Wait()
		var se *StallError
		if err := e.Health(); !errors.As(err, &se) || se.Stage != StageFire || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Health() = %v while done-records fail, want a fire stall with ENOSPC", err)
		}
		mu.Lock()
		failing = false
		mu.Unlock()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if st := e.Stats(); st.Delivered != 1 || st.Unconfirmed != 0 {
			t.Errorf("Stats %+v: want 1 delivered, 0 unconfirmed", st)
		}
		if err := e.Health(); err != nil {
			t.Errorf("Health() = %v after the done-records were written", err)
		}
		e.Close()
		e = openEngine(t, dir, sink, nil)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{id}, 2*time.Second)
		e.Close()
	})
}

// TestDamagedHeaderSkipsOneBucket: a segment whose header is damaged is
// reported when its bucket comes near, and the buckets after it load and
// fire.
func TestDamagedHeaderSkipsOneBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		bad := schedule(t, e, "t", 25*time.Second, "in the damaged segment")
		good := schedule(t, e, "t", 35*time.Second, "after it")
		// Both routed (and so checkpointed by Close) before the damage:
		// a restart that had to route into the damaged segment again
		// stops routing there until an operator acts (reput's
		// TestCorruptionStopsAndReports), and this engine would never be
		// ready.
		if err := e.WaitRouted(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.Close()
		sched := filepath.Join(dir, "schedule", schedulelog.Name(schedulelog.BucketStart(bad.DeliverAt, 10*time.Second)))
		flipByte(t, sched, 20) // inside the header's bucket start
		var logs syncBuffer
		e = openEngine(t, dir, sink, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		time.Sleep(40 * time.Second)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{good}, 0)
		if !strings.Contains(logs.String(), "cannot be read") || !strings.Contains(logs.String(), sched) {
			t.Errorf("the damaged segment is not reported with its file:\n%s", logs.String())
		}
		if e.Stats().Corrupt == 0 {
			t.Error("Stats.Corrupt is 0")
		}
		e.Close()
	})
}

// TestLostDoneLogRecreatedByCancel: the dispatch log of a bucket that has
// not started is deleted, and a Cancel routed there afterwards recreates
// it. The recreated log says it replaces a lost one, so when the bucket
// loads (after a restart) the cancels of the lost log are read back from
// the commitlog: no message cancelled before the loss is delivered.
func TestLostDoneLogRecreatedByCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		start := time.Now()
		var ids []message.ID
		for i := range 10 {
			id, err := e.Schedule(t.Context(), Request{Topic: "t", At: start.Add(60*time.Second + time.Duration(i)*100*time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids[:3] {
			if r, err := e.Cancel(t.Context(), id); err != nil || r != Cancelled {
				t.Fatalf("Cancel(%v) = %v, %v", id, r, err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		bucket := schedulelog.BucketStart(ids[0].DeliverAt, 10*time.Second)
		done := filepath.Join(dir, "schedule", dispatchlog.Name(bucket))
		if err := os.Remove(done); err != nil {
			t.Fatal(err)
		}
		e = openEngine(t, dir, sink, nil)
		if r, err := e.Cancel(t.Context(), ids[3]); err != nil || r != Cancelled {
			t.Fatalf("Cancel(%v) after the loss = %v, %v", ids[3], r, err)
		}
		// Routed before the Close (a Close routes nothing more: the next
		// start would).
		if err := e.WaitRouted(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if _, c, err := dispatchlog.Load(done); err != nil || !c.Lost {
			t.Fatalf("the recreated dispatch log: %+v, %v; want it marked lost", c, err)
		}
		var logs syncBuffer
		e = openEngine(t, dir, sink, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		time.Sleep(75 * time.Second)
		synctest.Wait()
		got := map[message.ID]int{}
		for _, g := range sink.snapshot() {
			got[g.id]++
		}
		for i, id := range ids {
			if want := map[bool]int{true: 0, false: 1}[i < 4]; got[id] != want {
				t.Errorf("message %d delivered %d times, want %d", i, got[id], want)
			}
		}
		if err := e.Health(); err != nil {
			t.Errorf("Health() = %v", err)
		}
		if !strings.Contains(logs.String(), "was lost and recreated after it; recreated, with the cancels read back") {
			t.Errorf("the log does not report the recreated dispatch log:\n%s", logs.String())
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// Every entry is done: the bucket is retired with its logs.
		if _, err := os.Stat(done); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dispatch log of the finished bucket is still there (%v)", err)
		}
	})
}

// TestRepairReadsCancelsBack: a dispatch log lost after its bucket
// started is repaired with --assume-pending; the cancels the commitlog
// still holds are recorded, so the cancelled messages stay cancelled and
// only the undecided ones are delivered.
func TestRepairReadsCancelsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		start := time.Now()
		var ids []message.ID
		for i := range 10 {
			id, err := e.Schedule(t.Context(), Request{Topic: "t", At: start.Add(20*time.Second + time.Duration(i)*500*time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids[6:] {
			if r, err := e.Cancel(t.Context(), id); err != nil || r != Cancelled {
				t.Fatalf("Cancel(%v) = %v, %v", id, r, err)
			}
		}
		// The bucket starts and its first two messages are delivered.
		time.Sleep(20*time.Second + 600*time.Millisecond)
		synctest.Wait()
		e.Close()
		if got := len(sink.snapshot()); got != 2 {
			t.Fatalf("%d delivered before the loss, want 2", got)
		}
		sdir := filepath.Join(dir, "schedule")
		if err := os.Remove(filepath.Join(sdir, dispatchlog.Name(schedulelog.BucketStart(ids[0].DeliverAt, 10*time.Second)))); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		keep := func(string) error { return nil }
		if _, err := RepairDispatchLogs(sdir, DoneRepairOptions{Keep: keep, Assume: AssumePending, Out: &out,
			Commitlog: filepath.Join(dir, "commitlog")}); err != nil {
			t.Fatalf("repair: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "4 cancels read back from the commitlog; 6 entries") {
			t.Errorf("repair output does not report the 4 cancels read back and 6 undecided:\n%s", out.String())
		}
		e = openEngine(t, dir, sink, nil)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		e.Close()
		got := map[message.ID]int{}
		for _, g := range sink.snapshot() {
			got[g.id]++
		}
		for i, id := range ids {
			want := 1 // the undecided are delivered; the first two again
			switch {
			case i < 2:
				want = 2
			case i >= 6:
				want = 0
			}
			if got[id] != want {
				t.Errorf("message %d delivered %d times, want %d", i, got[id], want)
			}
		}
	})
}

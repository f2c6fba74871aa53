package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// frozenFiles returns the paths of the FrozenAt bucket's segment and
// dispatch log in the schedule directory of the engine e.
func frozenFiles(t *testing.T, e *Engine) (sched, done string) {
	t.Helper()
	start := schedulelog.BucketStart(FrozenAt, e.opts.SegmentDuration)
	return filepath.Join(e.schedDir, schedulelog.Name(start)), e.donePath(start)
}

// exists reports whether path exists.
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// freezeAll schedules n messages an hour ahead and freezes them, waits
// until they are routed, and returns their frozen IDs.
func freezeAll(t *testing.T, e *Engine, tag string, n int) []message.ID {
	t.Helper()
	var out []message.ID
	for i := range n {
		id := schedule(t, e, "t", time.Hour, fmt.Sprint(tag, i))
		res, fid, _, err := e.Freeze(t.Context(), id)
		if err != nil || res != Frozen {
			t.Fatalf("Freeze(%s%d) = %v, %v", tag, i, res, err)
		}
		out = append(out, fid)
	}
	if err := e.WaitRouted(t.Context()); err != nil { // in the FrozenAt segment
		t.Fatal(err)
	}
	return out
}

// wantState fails unless Get says st for id.
func wantState(t *testing.T, e *Engine, when string, id message.ID, st State) {
	t.Helper()
	f, err := e.Get(t.Context(), id)
	if err != nil || f.State != st {
		t.Fatalf("%s: Get(%v) = %v, %v; want %v", when, id, f.State, err, st)
	}
}

// TestFrozenBucketRetires: the FrozenAt bucket stays while one message in
// it is frozen, and its files go once the last is thawed or cancelled; its
// retired entries are then unknown (not read from a new segment of the
// same name), a freeze after that makes a new segment that survives a
// crash, and the thawed messages are delivered once at their time while
// the cancelled one never is.
func TestFrozenBucketRetires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, nil)
		ctx := t.Context()
		frozen := freezeAll(t, e, "m", 3)
		sched, done := frozenFiles(t, e)
		if !exists(t, sched) || !exists(t, done) {
			t.Fatalf("no FrozenAt segment or dispatch log after three freezes")
		}
		var thawed []message.ID
		for _, fid := range frozen[:2] {
			res, tid, err := e.Thaw(ctx, fid)
			if err != nil || res != Thawed {
				t.Fatalf("Thaw = %v, %v", res, err)
			}
			thawed = append(thawed, tid)
		}
		time.Sleep(5 * time.Second) // checkpoints pass the thaws
		synctest.Wait()
		if !exists(t, sched) || !exists(t, done) {
			t.Fatal("the FrozenAt bucket retired while a message in it was still frozen")
		}
		wantState(t, e, "one still frozen", frozen[2], StatePending)
		wantState(t, e, "one still frozen", frozen[0], StateRescheduled)

		if res, err := e.Cancel(ctx, frozen[2]); err != nil || res != Cancelled {
			t.Fatalf("Cancel of the last frozen = %v, %v", res, err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if exists(t, sched) || exists(t, done) {
			t.Fatal("the FrozenAt bucket's files are still there with every entry in it done")
		}
		if st := e.reput.Stats(); st.Retired != 1 {
			t.Fatalf("reput retired %d buckets; want the FrozenAt one", st.Retired)
		}
		wantState(t, e, "retired", frozen[2], StateNotFound)

		// A freeze after the retirement: a new segment under its name,
		// which holds none of the retired entries.
		again := freezeAll(t, e, "again", 1)[0]
		if !exists(t, sched) || !exists(t, done) {
			t.Fatal("a freeze after the retirement made no new segment")
		}
		wantState(t, e, "frozen again", again, StatePending)
		for _, fid := range frozen {
			wantState(t, e, "after the new segment", fid, StateNotFound)
			if res, err := e.Cancel(ctx, fid); err != nil || res != Unknown {
				t.Fatalf("Cancel of a retired frozen entry = %v, %v; want %v", res, err, Unknown)
			}
			if res, _, err := e.Thaw(ctx, fid); err != nil || res != FreezeUnknown {
				t.Fatalf("Thaw of a retired frozen entry = %v, %v; want %v", res, err, FreezeUnknown)
			}
		}

		crashed := crashCopy(t, dir)
		e.Close()
		sink := &recSink{}
		e = openEngine(t, crashed, sink, nil)
		defer e.Close()
		wantState(t, e, "after a crash", again, StatePending)
		wantState(t, e, "after a crash", frozen[2], StateNotFound)
		time.Sleep(time.Hour + time.Minute)
		synctest.Wait()
		got := map[message.ID]int{}
		for _, g := range sink.snapshot() {
			got[g.id]++
		}
		if len(got) != 2 || got[thawed[0]] != 1 || got[thawed[1]] != 1 {
			t.Fatalf("delivered %v; want the two thawed (%v) once each, not the cancelled or the frozen one", got, thawed)
		}
	})
}

// TestFrozenBucketRefusesANewEntry: a freeze routed into the FrozenAt
// bucket after the check found every entry done and before reput retires
// it makes the retirement refuse; the new frozen message is kept, and the
// bucket retires once it is thawed.
func TestFrozenBucketRefusesANewEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, nil)
		defer e.Close()
		ctx := t.Context()
		first := freezeAll(t, e, "first", 1)[0]
		late := schedule(t, e, "t", time.Hour, "late")
		var once sync.Once
		froze := make(chan message.ID, 1)
		e.beforeEarlyRetire = func() {
			once.Do(func() {
				res, fid, _, err := e.Freeze(ctx, late)
				if err != nil || res != Frozen {
					t.Errorf("Freeze during the retirement = %v, %v", res, err)
				}
				if err := e.reput.WaitRouted(ctx, e.log.EndOffset()); err != nil {
					t.Error(err)
				}
				froze <- fid
			})
		}
		if res, _, err := e.Thaw(ctx, first); err != nil || res != Thawed {
			t.Fatalf("Thaw = %v, %v", res, err)
		}
		var lateFrozen message.ID
		select {
		case lateFrozen = <-froze:
		case <-time.After(time.Minute):
			t.Fatal("no check found the FrozenAt bucket done within a minute of the thaw")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		sched, _ := frozenFiles(t, e)
		if !exists(t, sched) {
			t.Fatal("the FrozenAt bucket retired with a freeze routed into it after the check")
		}
		wantState(t, e, "frozen during the retirement", lateFrozen, StatePending)
		if res, _, err := e.Thaw(ctx, lateFrozen); err != nil || res != Thawed {
			t.Fatalf("Thaw of the late one = %v, %v", res, err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if exists(t, sched) {
			t.Fatal("the FrozenAt bucket did not retire once its last entry was thawed")
		}
	})
}

// TestFrozenBucketCrashSteps: a crash at each step of the FrozenAt
// bucket's retirement leaves it whole or retired; the next start finishes
// it, and a freeze after that works.
func TestFrozenBucketCrashSteps(t *testing.T) {
	for _, step := range []string{"before_the_retired_log", "files_not_deleted", "dispatch_log_left"} {
		t.Run(step, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				e := openEngine(t, dir, &recSink{}, nil)
				ctx := t.Context()
				frozen := freezeAll(t, e, "m", 2)
				sched, _ := frozenFiles(t, e)
				reached, resume := make(chan struct{}), make(chan struct{})
				var once sync.Once
				e.beforeEarlyRetire = func() {
					once.Do(func() {
						close(reached)
						<-resume
					})
				}
				for _, fid := range frozen {
					if res, err := e.Cancel(ctx, fid); err != nil || res != Cancelled {
						t.Fatalf("Cancel = %v, %v", res, err)
					}
				}
				select {
				case <-reached:
				case <-time.After(time.Minute):
					t.Fatal("no check found the FrozenAt bucket done within a minute")
				}
				// What a crash just before reput retires it leaves.
				whole := crashCopy(t, dir)
				close(resume)
				time.Sleep(5 * time.Second)
				synctest.Wait()
				if exists(t, sched) {
					t.Fatal("the FrozenAt bucket did not retire")
				}
				e.Close()
				// What each step's crash leaves: the copy made before
				// Retire, with the files reput had changed by then.
				schedDir := filepath.Join(whole, "schedule")
				switch step {
				case "files_not_deleted":
					copyFile(t, filepath.Join(dir, "schedule", reput.RetiredName), filepath.Join(schedDir, reput.RetiredName))
					copyFile(t, filepath.Join(dir, "schedule", reput.CheckpointName), filepath.Join(schedDir, reput.CheckpointName))
				case "dispatch_log_left":
					copyFile(t, filepath.Join(dir, "schedule", reput.RetiredName), filepath.Join(schedDir, reput.RetiredName))
					copyFile(t, filepath.Join(dir, "schedule", reput.CheckpointName), filepath.Join(schedDir, reput.CheckpointName))
					if err := os.Remove(filepath.Join(schedDir, filepath.Base(sched))); err != nil {
						t.Fatal(err)
					}
				}
				e = openEngine(t, whole, &recSink{}, nil)
				defer e.Close()
				time.Sleep(5 * time.Second)
				synctest.Wait()
				wsched, wdone := frozenFiles(t, e)
				if exists(t, wsched) {
					t.Fatal("the start did not finish the retirement")
				}
				if step != "dispatch_log_left" && exists(t, wdone) {
					t.Fatal("the start left the dispatch log of the retired bucket")
				}
				for _, fid := range frozen {
					wantState(t, e, "after the crash", fid, StateNotFound)
				}
				again := freezeAll(t, e, "again", 1)[0]
				wantState(t, e, "frozen after the crash", again, StatePending)
				if res, err := e.Cancel(ctx, again); err != nil || res != Cancelled {
					t.Fatalf("Cancel of the new frozen message = %v, %v; want cancelled (the old dispatch log must not answer for it)", res, err)
				}
			})
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFrozenRetirementRacesAReader: a Get or Cancel that found a frozen
// entry's segment, and reads its fate after the FrozenAt bucket retired
// and a new freeze made a new segment under its name, does not take the
// new segment's dispatch log for the old one's: the entry is not found,
// not pending, and nothing is cancelled.
func TestFrozenRetirementRacesAReader(t *testing.T) {
	for _, op := range []string{"get", "cancel"} {
		t.Run(op, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := openEngine(t, t.TempDir(), &recSink{}, nil)
				defer e.Close()
				ctx := t.Context()
				gone := freezeAll(t, e, "gone", 1)[0]
				next := schedule(t, e, "t", time.Hour, "next")
				if res, err := e.Cancel(ctx, gone); err != nil || res != Cancelled {
					t.Fatalf("Cancel = %v, %v", res, err)
				}
				raced := false
				e.afterFind = func() {
					e.afterFind = nil // the Freeze below finds its own segment
					for range 60 {
						if _, ok := e.reput.FindSegment(FrozenAt); !ok {
							break
						}
						time.Sleep(time.Second)
					}
					if _, ok := e.reput.FindSegment(FrozenAt); ok {
						return // did not retire: the test says so below
					}
					if res, _, _, err := e.Freeze(ctx, next); err != nil || res != Frozen {
						t.Errorf("Freeze after the retirement = %v, %v", res, err)
					}
					if err := e.WaitRouted(ctx); err != nil {
						t.Error(err)
					}
					_, raced = e.reput.FindSegment(FrozenAt)
				}
				switch op {
				case "get":
					f, err := e.Get(ctx, gone)
					if err != nil || f.State != StateNotFound {
						t.Errorf("Get of an entry of a retired bucket read meanwhile = %v, %v; want not found", f.State, err)
					}
				case "cancel":
					res, err := e.Cancel(ctx, gone)
					if err != nil || res != Unknown {
						t.Errorf("Cancel of an entry of a retired bucket read meanwhile = %v, %v; want unknown", res, err)
					}
				}
				if !raced {
					t.Fatal("the FrozenAt bucket did not retire and come back while the call read it")
				}
			})
		})
	}
}

package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/internal/tdmanifest"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/inspect"
	"github.com/hourglassmq/hourglass/message"
)

func readManifest(t *testing.T) tdmanifest.Manifest {
	t.Helper()
	m, err := tdmanifest.Load(tdmanifest.Path)
	if err != nil {
		t.Fatal(err)
	}
	return m
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

// TestTestdataRecovery opens a copy of each testdata directory at the time
// it was left, runs the engine past the last delivery time, and checks
// what it delivered: every pending message exactly once and never early
// (I1, I4), nothing done before (I3), nothing cancelled (I7), and nothing
// from behind damage (I6), with the damage reported in the log.
func TestTestdataRecovery(t *testing.T) {
	man := readManifest(t)
	for _, tc := range []struct {
		dir     string
		maybe   func(bucket string, id message.ID) bool // pending messages delivered at most once
		wantLog string
		// refuses: the start is refused, and nothing at all is delivered.
		refuses bool
	}{
		{dir: "healthy"},
		{dir: "torn-tail", wantLog: "commitlog torn tail truncated"},
		// The damaged entry costs that entry only: the rest of its bucket
		// loads, and the entry is rebuilt from the commitlog, which still
		// holds it.
		{dir: "sched-bitflip", wantLog: "damaged schedule entries skipped; rebuilt from the commitlog"},
		// A damaged dispatch log could hide a done entry: none of its
		// segment may be delivered until repair decides. The bucket is due
		// at start, so the start is refused, and a refused start delivers
		// nothing, of the other buckets neither.
		{dir: "done-bitflip", wantLog: "held back", refuses: true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(filepath.Join("../testdata", tc.dir))); err != nil {
				t.Fatal(err)
			}
			want, maybe := map[message.ID]bool{}, map[message.ID]bool{}
			for _, m := range man.Messages {
				id, err := message.ParseID(m.ID)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case m.State != "pending" || tc.refuses:
				case tc.maybe != nil && tc.maybe(m.Bucket, id):
					maybe[id] = true
				default:
					want[id] = true
				}
			}
			if len(want) == 0 && !tc.refuses {
				t.Fatal("the manifest lists no pending message to deliver")
			}
			var logs syncBuffer
			type delivery struct {
				id message.ID
				at time.Time
			}
			var mu sync.Mutex
			var got []delivery
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(man.Now.Sub(time.Now()))
				e, err := engine.Open(engine.Options{Dir: dir, SegmentDuration: time.Hour, CommitlogSegmentSize: 4096,
					Logger: slog.New(slog.NewTextHandler(&logs, nil)),
					Sink: engine.SinkFunc(func(_ context.Context, _ string, batch []engine.Delivery) error {
						mu.Lock()
						defer mu.Unlock()
						for _, d := range batch {
							got = append(got, delivery{d.ID, time.Now()})
						}
						return nil
					})})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case <-e.Ready():
					if tc.refuses {
						t.Errorf("ready, not refused:\n%s", logs.String())
					}
				case <-e.Refused():
					if why := e.RefusedErr().Error(); !tc.refuses || !strings.Contains(why, filepath.Base(man.Damage[tc.dir].File)) {
						t.Errorf("refused: %s", why)
					}
				}
				time.Sleep(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).Sub(time.Now()))
				synctest.Wait()
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			})
			seen := map[message.ID]int{}
			for _, d := range got {
				seen[d.id]++
				if d.at.Before(d.id.Time()) {
					t.Errorf("%v delivered at %v, before its time (I4)", d.id, d.at)
				}
				if !want[d.id] && !maybe[d.id] {
					t.Errorf("%v delivered but the manifest says it must not be (done, cancelled or behind damage)", d.id)
				}
			}
			for id := range want {
				if seen[id] != 1 {
					t.Errorf("%v delivered %d times, want once", id, seen[id])
				}
			}
			for id := range maybe {
				if seen[id] > 1 {
					t.Errorf("%v delivered %d times, want at most once", id, seen[id])
				}
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("the log does not report the damage (%q):\n%s", tc.wantLog, logs.String())
			}
			if tc.dir == "torn-tail" {
				// The engine cut the commitlog's torn tail; inspect agrees.
				rep, err := inspect.Verify(inspect.Options{Dir: dir, Now: man.Now})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range rep.Problems {
					if strings.HasPrefix(p.File, "commitlog/") {
						t.Errorf("after recovery: %v", p)
					}
				}
			}
		})
	}
}

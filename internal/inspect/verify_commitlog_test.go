package inspect

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/reput"
)

// routedDir makes a data directory with n messages routed (the reput
// checkpoint covers them) in commitlog segments of 16 KiB, and returns it
// with the checkpoint and the commitlog's segment files.
func routedDir(t *testing.T, n int) (dir string, ckpt int64, segs []string) {
	t.Helper()
	dir = t.TempDir()
	opts := engine.Options{Dir: dir, CommitlogSegmentSize: 16 << 10, Fsync: commitlog.SyncNone, Logger: slog.New(slog.DiscardHandler),
		Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })}
	e, err := engine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]engine.Request, n)
	for i := range reqs {
		reqs[i] = engine.Request{Topic: "t", Body: []byte("body of a message"), Delay: time.Hour}
	}
	if _, err := e.ScheduleBatch(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e, err = engine.Open(opts) // routes what the first run left, checkpoints on Close
	if err != nil {
		t.Fatal(err)
	}
	<-e.Ready()
	e.Close()
	ckpt, ok, err := reput.ReadCheckpoint(filepath.Join(dir, ScheduleDir))
	if err != nil || !ok {
		t.Fatalf("checkpoint: %v %v", ok, err)
	}
	segs, _ = filepath.Glob(filepath.Join(dir, CommitlogDir, "*.log"))
	if len(segs) < 2 {
		t.Fatalf("want 2+ commitlog segments, got %v", segs)
	}
	return dir, ckpt, segs
}

func TestVerifyCommitlogDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, segs []string)
		kind   Kind
		detail string
	}{
		{name: "flip_with_valid_after", kind: Corruption, detail: "valid records follow", damage: func(t *testing.T, segs []string) {
			b, _ := os.ReadFile(segs[len(segs)-1])
			b[commitlog.SegmentHeaderSize+10] ^= 0x20
			os.WriteFile(segs[len(segs)-1], b, 0o644)
		}},
		{name: "end_below_checkpoint", kind: Corruption, detail: "below the reput checkpoint", damage: func(t *testing.T, segs []string) {
			b, _ := os.ReadFile(segs[len(segs)-1])
			clear(b[commitlog.SegmentHeaderSize:])
			os.WriteFile(segs[len(segs)-1], b, 0o644)
		}},
		{name: "deleted_active_segment", kind: Missing, detail: "a segment file is missing", damage: func(t *testing.T, segs []string) {
			os.Remove(segs[len(segs)-1])
		}},
		{name: "torn_tail_above_checkpoint", kind: TornTail, damage: func(t *testing.T, segs []string) {
			l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Dir(segs[0]), Sync: commitlog.SyncNone, SegmentSize: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			offs, err := l.Append(nil, commitlog.Record{Type: 200, Payload: make([]byte, 100)})
			if err != nil {
				t.Fatal(err)
			}
			bases := l.SegmentBases()
			l.Close()
			base := bases[len(bases)-1]
			path := filepath.Join(filepath.Dir(segs[0]), commitlog.SegmentName(base))
			b, _ := os.ReadFile(path)
			pos := commitlog.SegmentHeaderSize + offs[0] - base
			clear(b[pos+40 : pos+116])
			os.WriteFile(path, b, 0o644)
		}},
		{name: "gap", kind: Missing, damage: func(t *testing.T, segs []string) {
			os.Remove(segs[0+1])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _, segs := routedDir(t, 1500)
			tc.damage(t, segs)
			r, err := Verify(Options{Dir: dir, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range r.Problems {
				if p.Kind == tc.kind && strings.HasPrefix(p.File, CommitlogDir+"/") && strings.Contains(p.Detail, tc.detail) {
					if p.Kind == Corruption && p.Offset < commitlog.SegmentHeaderSize {
						t.Fatalf("%v: no file offset", p)
					}
					return
				}
			}
			t.Fatalf("verify found %v; want a %s problem in a commitlog file saying %q", r.Problems, tc.kind, tc.detail)
		})
	}
}

package repair_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/inspect"
	"github.com/hourglassmq/hourglass/internal/repair"
	"github.com/hourglassmq/hourglass/reput"
)

const segSize = 64 << 10

// damaged makes a data directory whose engine routed 800 messages and then
// got 50 commitlog records that were not routed, and flips a byte in the
// first routed record of the newest segment and in an unrouted one (valid
// records follow each: damage, not a torn tail). It returns the directory
// and the spans a repair must give up: the routed one, then the lost one.
func damaged(t *testing.T) (string, [2]commitlog.Span) {
	t.Helper()
	dir := t.TempDir()
	open := func() *engine.Engine {
		e, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, CommitlogSegmentSize: segSize,
			Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.Ready():
		case <-time.After(30 * time.Second):
			t.Fatal("engine not ready in 30s")
		}
		return e
	}
	e := open()
	for i := range 800 {
		if _, err := e.Schedule(context.Background(), engine.Request{Topic: "t", Body: bytes.Repeat([]byte{byte(i)}, 100), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.WaitRouted(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ckpt, _, err := reput.ReadCheckpoint(filepath.Join(dir, "schedule"))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "commitlog"), Sync: commitlog.SyncNone, SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for range 50 {
		o, err := l.Append(nil, commitlog.Record{Type: 200, Payload: []byte("not routed")})
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, o[0])
	}
	bases := l.SegmentBases()
	l.Close()
	active := bases[len(bases)-1]
	if active >= ckpt || offs[0] != ckpt {
		t.Fatalf("the newest segment (base %d) holds no routed record, or the unrouted ones do not start at the checkpoint %d (%d)", active, ckpt, offs[0])
	}
	path := filepath.Join(dir, "commitlog", commitlog.SegmentName(active))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[commitlog.SegmentHeaderSize+20] ^= 0x40                 // the first record of the segment, routed
	b[commitlog.SegmentHeaderSize+offs[10]-active+20] ^= 0x40 // an unrouted one
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The routed record's span ends where the next record starts.
	first, _, err := commitlog.Verify(filepath.Join(dir, "commitlog"), nil)
	if err != nil || len(first) != 2 {
		t.Fatalf("verify before the repair: %v, %v", first, err)
	}
	return dir, [2]commitlog.Span{{From: first[0].Offset, To: first[0].Offset + first[0].Len}, {From: offs[10], To: offs[11]}}
}

// errKilled stands for a kill at a repair's point.
var errKilled = errors.New("killed here")

// TestRunKilledAtEveryPoint: a repair stopped at each of its points in
// turn (as a kill would stop it: every change before is durable, nothing
// after runs) leaves its report in the journal: the next run prints what
// the stopped one gave up or was about to, finishes the repair, and
// inspect verify keeps reporting the loss until it is acknowledged.
func TestRunKilledAtEveryPoint(t *testing.T) {
	orig, spans := damaged(t)
	var points []string
	var out bytes.Buffer
	if err := repair.Run(repair.Options{Dir: copyDir(t, orig), Out: &out, At: func(p string) error { points = append(points, p); return nil }}); err != nil {
		t.Fatalf("an unstopped run: %v\n%s", err, &out)
	}
	if len(points) < 5 {
		t.Fatalf("points %q: want planned, copying, kept, ran and recorded", points)
	}
	for n, point := range points {
		t.Run(fmt.Sprintf("%d_%s", n+1, strings.ReplaceAll(point, "/", "_")), func(t *testing.T) {
			dir := copyDir(t, orig)
			seen := 0
			var out bytes.Buffer
			err := repair.Run(repair.Options{Dir: dir, Out: &out, At: func(p string) error {
				if seen++; seen == n+1 {
					return errKilled
				}
				return nil
			}})
			if !errors.Is(err, errKilled) {
				t.Fatalf("run stopped at %s: %v", point, err)
			}
			if tmp := tempFiles(t, filepath.Join(dir, repair.QuarantineDir)); strings.HasPrefix(point, "copying") && len(tmp) > 0 {
				t.Errorf("a copy cut short left %v", tmp) // (CreateAtomic removes it; a kill leaves a .tmp name, never the final one)
			}
			if dst := strings.TrimPrefix(point, "copying "); dst != point && len(quarantined(t, dir, dst)) > 0 {
				t.Errorf("a copy cut short left %v under its final name", quarantined(t, dir, dst))
			}
			out.Reset()
			if err := repair.Run(repair.Options{Dir: dir, Out: &out}); err != nil {
				t.Fatalf("the run after: %v\n%s", err, &out)
			}
			rerun := out.String()
			for _, sp := range spans {
				if !strings.Contains(rerun, fmt.Sprintf("offsets %d..%d", sp.From, sp.To)) {
					t.Errorf("the run after one stopped at %s does not name offsets %d..%d:\n%s", point, sp.From, sp.To, rerun)
				}
			}
			if !strings.Contains(rerun, "LOST") {
				t.Errorf("the run after one stopped at %s does not say what was lost:\n%s", point, rerun)
			}
			if point != "planned commitlog" && !strings.Contains(rerun, "INTERRUPTED") {
				t.Errorf("the run after one stopped at %s does not say it was interrupted:\n%s", point, rerun)
			}
			checkVerify(t, dir, spans[1])
		})
	}
}

// checkVerify runs inspect verify on dir: the commitlog is whole, and the
// journal's report of the loss of lost is a problem until acknowledged.
func checkVerify(t *testing.T, dir string, lost commitlog.Span) {
	t.Helper()
	rep, err := inspect.Verify(inspect.Options{Dir: dir, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	reported := false
	for _, p := range rep.Problems {
		switch {
		case p.Kind == inspect.RepairReport && strings.Contains(p.Detail, fmt.Sprintf("offsets %d..%d", lost.From, lost.To)):
			reported = true
		case p.Kind == inspect.RepairReport:
		default:
			t.Errorf("verify after the repair: %v", p)
		}
	}
	if !reported {
		t.Errorf("verify does not report the loss of offsets %d..%d: %v", lost.From, lost.To, rep.Problems)
	}
	var out bytes.Buffer
	if err := repair.Acknowledge(dir, time.Now(), &out); err != nil {
		t.Fatalf("acknowledge: %v", err)
	}
	if rep, err = inspect.Verify(inspect.Options{Dir: dir, Now: time.Now()}); err != nil || !rep.Clean() {
		t.Errorf("verify after --acknowledge: %v, %v", rep.Problems, err)
	}
	if kept, _ := filepath.Glob(filepath.Join(dir, repair.QuarantineDir, "*", repair.JournalName)); len(kept) != 1 {
		t.Errorf("the acknowledged journal is not kept in the quarantine: %v\n%s", kept, &out)
	}
}

// TestRunsInOneSecond: two repairs within one second each get their own
// quarantine directory (the second does not fail on the first's).
func TestRunsInOneSecond(t *testing.T) {
	dir, _ := damaged(t)
	now := func() time.Time { return time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC) }
	var out bytes.Buffer
	if err := repair.Run(repair.Options{Dir: dir, Out: &out, Now: now}); err != nil {
		t.Fatal(err)
	}
	// Damage again: the first record of the first segment.
	segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
	b, _ := os.ReadFile(segs[0])
	b[commitlog.SegmentHeaderSize+20] ^= 0x40
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := repair.Run(repair.Options{Dir: dir, Out: &out, Now: now}); err != nil {
		t.Fatalf("the second repair in the same second: %v\n%s", err, &out)
	}
	qs, _ := filepath.Glob(filepath.Join(dir, repair.QuarantineDir, "*"))
	if len(qs) != 2 || filepath.Base(qs[0]) != "20261205T180000Z" || filepath.Base(qs[1]) != "20261205T180000Z-2" {
		t.Fatalf("quarantine directories %v; want 20261205T180000Z and 20261205T180000Z-2", qs)
	}
	j, err := repair.ReadJournal(dir)
	if err != nil || len(j.Runs) != 2 || j.Runs[1].ID != "20261205T180000Z-2" || j.Runs[1].State != repair.RunComplete {
		t.Fatalf("journal %+v, %v", j, err)
	}
}

// TestAcknowledgeInterrupted: an interrupted run is not acknowledged
// before a repair finishes it.
func TestAcknowledgeInterrupted(t *testing.T) {
	dir, _ := damaged(t)
	err := repair.Run(repair.Options{Dir: dir, At: func(p string) error {
		if p == "ran commitlog" {
			return errKilled
		}
		return nil
	}})
	if !errors.Is(err, errKilled) {
		t.Fatal(err)
	}
	if err := repair.Acknowledge(dir, time.Now(), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("acknowledge of an interrupted run: %v", err)
	}
	if err := repair.Run(repair.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	j, _ := repair.ReadJournal(dir)
	if len(j.Runs) != 1 || !strings.Contains(j.Runs[0].FinishedBy, "nothing left to repair") || j.Runs[0].Interrupted() {
		t.Fatalf("journal after the run that finished it: %+v", j)
	}
	if err := repair.Acknowledge(dir, time.Now(), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunWritesNothing: a dry run writes no journal and no quarantine.
func TestDryRunWritesNothing(t *testing.T) {
	dir, _ := damaged(t)
	var out bytes.Buffer
	if err := repair.Run(repair.Options{Dir: dir, DryRun: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{repair.JournalName, repair.QuarantineDir} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a dry run made %s (%v)", name, err)
		}
	}
	if !strings.Contains(out.String(), "would be skip record") {
		t.Errorf("dry run:\n%s", &out)
	}
}

// copyDir copies the data directory src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// tempFiles lists the files under dir whose names end in .tmp.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// quarantined lists the copies of rel (relative to the data directory)
// under dir's quarantine.
func quarantined(t *testing.T, dir, rel string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, repair.QuarantineDir, "*", rel))
	return m
}

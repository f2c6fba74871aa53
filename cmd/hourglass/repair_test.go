package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// damagedDataDir makes a data directory whose engine routed n messages
// (below the reput checkpoint) and then got m more commitlog records that
// were not routed, and flips a byte inside the first routed record of the
// newest commitlog segment. It returns the directory and the damaged file.
func damagedDataDir(t *testing.T, n, m int) (dir, damaged string) {
	t.Helper()
	dir = t.TempDir()
	open := func() *engine.Engine {
		e, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, CommitlogSegmentSize: 64 << 10,
			Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	for i := range n {
		if _, err := e.Schedule(context.Background(), engine.Request{Topic: "t", Body: bytes.Repeat([]byte{byte(i)}, 100), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen and wait until everything is routed, so that the checkpoint
	// Close writes covers all n.
	e = open()
	select {
	case <-e.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("engine not ready in 30s")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ckpt, ok, err := reput.ReadCheckpoint(filepath.Join(dir, "schedule"))
	if err != nil || !ok {
		t.Fatalf("no checkpoint after Close: %v", err)
	}
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "commitlog"), Sync: commitlog.SyncNone, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for range m {
		if _, err := l.Append(nil, commitlog.Record{Type: 200, Payload: []byte("not routed")}); err != nil {
			t.Fatal(err)
		}
	}
	bases := l.SegmentBases()
	l.Close()
	active := bases[len(bases)-1]
	if active >= ckpt {
		t.Fatalf("the newest segment (base %d) holds no routed record (checkpoint %d): make n larger", active, ckpt)
	}
	damaged = filepath.Join(dir, "commitlog", commitlog.SegmentName(active))
	b, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	b[commitlog.SegmentHeaderSize+20] ^= 0x40
	if err := os.WriteFile(damaged, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, damaged
}

func TestRepairCommitlog(t *testing.T) {
	dir, damaged := damagedDataDir(t, 800, 50)
	before, _ := os.ReadFile(damaged)
	_, err := engine.Open(engine.Options{Dir: dir, Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
	if err == nil || !strings.Contains(err.Error(), damaged) || !strings.Contains(err.Error(), "hourglass repair --data-dir "+dir) {
		t.Fatalf("engine.Open on damage = %v; want an error naming %s and the repair command", err, damaged)
	}

	out, _, err := runApp(t, "repair", "--data-dir", dir, "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(damaged); !bytes.Equal(before, after) {
		t.Fatal("--dry-run changed the damaged file")
	}
	if _, err := os.Stat(filepath.Join(dir, "quarantine")); err == nil {
		t.Fatal("--dry-run made a quarantine directory")
	}
	for _, want := range []string{"damaged records", "would be skip record", "already routed", "run again without --dry-run"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runApp(t, "repair", "--data-dir", dir)
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	copies, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "commitlog", filepath.Base(damaged)))
	if len(copies) != 1 {
		t.Fatalf("quarantine copies %v; want one of %s\n%s", copies, damaged, out)
	}
	if kept, _ := os.ReadFile(copies[0]); !bytes.Equal(kept, before) {
		t.Fatal("the quarantined copy differs from the damaged file")
	}
	if !strings.Contains(out, "nothing is lost") || !strings.Contains(out, "copies of the 1 files changed") {
		t.Errorf("repair output:\n%s", out)
	}
	e, err := engine.Open(engine.Options{Dir: dir, Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
	if err != nil {
		t.Fatalf("engine.Open after repair: %v", err)
	}
	e.Close()

	out, _, err = runApp(t, "repair", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "nothing to repair in") {
		t.Fatalf("second repair: %v\n%s", err, out)
	}
}

func TestRepairRefusesWhileLocked(t *testing.T) {
	dir := t.TempDir()
	lock, err := hourglass.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	_, _, err = runApp(t, "repair", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "stop the server first") {
		t.Fatalf("repair of a locked directory: %v", err)
	}
}

func TestRepairHelp(t *testing.T) {
	out, _, err := runApp(t, "repair", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--data-dir", "--dry-run", "quarantine", "skip record", "already routed", "repair.journal", "--acknowledge", ".tmp"} {
		if !strings.Contains(out, want) {
			t.Errorf("repair --help lacks %q", want)
		}
	}
}

// TestRepairReportsRebuiltEntriesLost: a routed commitlog record is
// damaged, and so is the schedule entry it was routed to. The server
// rebuilds a damaged entry from the commitlog; repair, skipping the
// damaged record, says that this record, routed or not, is lost.
func TestRepairReportsRebuiltEntriesLost(t *testing.T) {
	dir, damaged := damagedDataDir(t, 800, 50)
	base, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(damaged), ".log"), 10, 64)
	if err != nil {
		t.Fatalf("not a segment name: %s", damaged)
	}
	// The schedule entry of the damaged record: its seq is the offset.
	sdir := filepath.Join(dir, "schedule")
	segs, _ := filepath.Glob(filepath.Join(sdir, "*.sched"))
	flipped := false
	for _, p := range segs {
		r, err := schedulelog.OpenReader(p)
		if err != nil {
			t.Fatal(err)
		}
		it := r.Iter()
		for it.Next() {
			if it.Seq() == uint64(base) {
				b, _ := os.ReadFile(p)
				b[it.Offset()+30] ^= 0x40
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
				flipped = true
			}
		}
		r.Close()
	}
	if !flipped {
		t.Fatalf("no schedule entry of seq %d", base)
	}
	out, _, err := runApp(t, "repair", "--data-dir", dir)
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if !strings.Contains(out, "damaged entries of the schedule segment of bucket") || !strings.Contains(out, "those records are LOST") {
		t.Errorf("repair does not report the rebuilt entry lost:\n%s", out)
	}
	// The skip record now covers the entry's commitlog record: verify must
	// not say the server can rebuild it from there.
	out, code, _ := runInspect(t, "verify", "--data-dir", dir)
	if strings.Contains(out, "the commitlog still holds them") || !strings.Contains(out, fmt.Sprintf("the commitlog no longer holds seqs %d to ", base)) {
		t.Errorf("inspect verify after the repair:\n%s", out)
	}
	if !strings.Contains(out, "repair-report") || code != 1 {
		t.Errorf("inspect verify (exit %d) does not report the repair's loss:\n%s", code, out)
	}
}

// TestRepairScheduleHeader: a schedule segment whose header is damaged
// stops routing once a message must go into it; hourglass repair rebuilds
// the header (keeping a copy), and the engine then routes into it and
// holds every message of the bucket, old and new.
func TestRepairScheduleHeader(t *testing.T) {
	dir := t.TempDir()
	open := func() *engine.Engine {
		e, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone,
			Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.Ready():
		case <-time.After(30 * time.Second):
			t.Fatalf("engine not ready in 30s: %v", e.Health())
		}
		return e
	}
	at := time.Now().Add(3 * time.Hour).Truncate(time.Hour).Add(10 * time.Minute)
	schedule := func(e *engine.Engine, body string) {
		t.Helper()
		if _, err := e.Schedule(context.Background(), engine.Request{Topic: "t", Body: []byte(body), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	e := open()
	schedule(e, "before the damage")
	if err := e.WaitRouted(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	seg := filepath.Join(dir, "schedule", schedulelog.Name(schedulelog.BucketStart(at.UnixMilli(), time.Hour)))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0x40 // the header's start
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}

	// A message for the same bucket: routing stops at the damaged segment.
	e = open()
	schedule(e, "after the damage")
	deadline := time.Now().Add(30 * time.Second)
	for len(e.Stalls()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("routing into the damaged segment did not stall")
		}
		time.Sleep(10 * time.Millisecond) // polling the engine's health
	}
	if st := e.Stalls()[0]; st.Stage != engine.StageRoute {
		t.Fatalf("stall %+v; want the route stage", st)
	}
	e.Close()

	out, _, err := runApp(t, "repair", "--data-dir", dir)
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if !strings.Contains(out, "header rebuilt") || !strings.Contains(out, "duration 3600s") {
		t.Fatalf("repair output:\n%s", out)
	}
	if copies, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "schedule", filepath.Base(seg))); len(copies) != 1 {
		t.Fatalf("quarantine copies %v; want one of %s", copies, seg)
	}
	e = open()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.WaitRouted(ctx); err != nil {
		t.Fatalf("routing after the repair: %v; health %v", err, e.Health())
	}
	if st := e.Stats(); st.Corrupt != 0 {
		t.Errorf("after the repair: %d corrupt", st.Corrupt)
	}
	e.Close()
	r, err := schedulelog.OpenReader(seg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var bodies []string
	for it := r.Iter(); it.Next(); {
		bodies = append(bodies, string(it.Message().Body))
	}
	if strings.Join(bodies, "|") != "before the damage|after the damage" {
		t.Fatalf("the repaired segment holds %q", bodies)
	}
}

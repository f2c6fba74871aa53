package inspect

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/internal/tdmanifest"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/schedulelog"
)

var regen = flag.Bool("regen", false, "rebuild the data directories in the repository's testdata/ (see testdata/README.md)")

// testdataDir is the repository's testdata directory.
const testdataDir = "../../testdata"

// The generator writes testdata/manifest.json in the format of package
// tdmanifest, which the recovery tests of other packages read.
type (
	Manifest        = tdmanifest.Manifest
	ManifestMessage = tdmanifest.Message
	Damage          = tdmanifest.Damage
)

// Testdata directory names.
const (
	DirHealthy      = "healthy"
	DirTornTail     = "torn-tail"
	DirSchedBitflip = "sched-bitflip"
	DirDoneBitflip  = "done-bitflip"
)

var (
	genStart = time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	// genNow is when the generator stops: the --now of the golden outputs.
	genNow = time.Date(2026, 11, 30, 4, 30, 0, 0, time.UTC)
)

type genMsg struct {
	topic   string
	at      time.Time
	body    []byte
	headers []message.Header
	attempt uint32
}

// genMessages are the messages of the healthy directory: four buckets
// (04:00, 05:00, 06:00 and the next day's 09:00), text and binary bodies,
// headers, a retry, and deliveries on the bucket edges.
func genMessages() []genMsg {
	at := func(h, m, s, ms int) time.Time { return time.Date(2026, 11, 30, h, m, s, ms*1e6, time.UTC) }
	long := `{"campaign":"winter-sale","segment":"returning-customers","text":"Everything 20% off until Sunday, only in the app"}`
	return []genMsg{
		{topic: "orders", at: at(4, 5, 0, 0), body: []byte(`{"order":1001,"action":"cancel-if-unpaid"}`)},
		{topic: "orders", at: at(4, 10, 0, 0), body: []byte(`{"order":1002,"action":"cancel-if-unpaid"}`)},
		{topic: "payments", at: at(4, 20, 0, 250), body: []byte{0x00, 0x01, 0xfe, 0xff, 'p', 'a', 'y'}},
		{topic: "orders", at: at(4, 29, 59, 999), body: []byte(`{"order":1003,"action":"cancel-if-unpaid"}`)},
		{topic: "orders", at: at(4, 30, 0, 1), body: []byte(`{"order":1004,"action":"cancel-if-unpaid"}`)},
		{topic: "payments", at: at(4, 45, 0, 0), body: []byte("retry charge 77\n"), attempt: 2},
		{topic: "orders", at: at(4, 59, 59, 999), body: []byte(`{"order":1005,"action":"cancel-if-unpaid"}`)},
		{topic: "orders", at: at(5, 0, 0, 0), body: []byte(`{"order":1006,"action":"cancel-if-unpaid"}`)},
		{topic: "push", at: at(5, 30, 0, 0), body: []byte("your parcel is out for delivery")},
		{topic: "payments", at: at(5, 45, 0, 0), body: []byte("settle batch 9"),
			headers: []message.Header{{Key: []byte("trace-id"), Value: []byte("4bf92f3577b34da6")}}},
		{topic: "orders", at: at(5, 59, 59, 999), body: []byte(`{"order":1007,"action":"cancel-if-unpaid"}`)},
		{topic: "push", at: at(6, 0, 0, 0), body: []byte(long)},
		{topic: "push", at: at(6, 15, 0, 0), body: []byte("héllo wörld ✓")},
		{topic: "orders", at: at(6, 40, 0, 0), body: nil},
		{topic: "push", at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), body: []byte("good morning 1")},
		{topic: "push", at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), body: []byte("good morning 2")},
		{topic: "push", at: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), body: []byte("good morning 3")},
	}
}

// cancelIndex is the message of genMessages that is cancelled (push at 05:30).
const cancelIndex = 8

// TestRegenTestdata rebuilds testdata/ when run with -regen (go generate
// ./internal/inspect). It runs a real engine and queue in a synctest
// bubble, so the clock is fake and the result the same on every run.
func TestRegenTestdata(t *testing.T) {
	if !*regen {
		t.Skip("rebuilds testdata/ only with -regen")
	}
	tmp := t.TempDir()
	healthy := filepath.Join(tmp, DirHealthy)
	var man Manifest
	synctest.Test(t, func(t *testing.T) {
		man = generateHealthy(t, healthy)
	})
	man.Damage = map[string]Damage{}
	for _, d := range []struct {
		name   string
		damage func(t *testing.T, dir string) Damage
	}{
		{DirTornTail, tearTails},
		{DirSchedBitflip, flipSched},
		{DirDoneBitflip, flipDone},
	} {
		dir := filepath.Join(tmp, d.name)
		copyDir(t, healthy, dir)
		man.Damage[d.name] = d.damage(t, dir)
	}
	for _, name := range []string{DirHealthy, DirTornTail, DirSchedBitflip, DirDoneBitflip} {
		dst := filepath.Join(testdataDir, name)
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		copyDir(t, filepath.Join(tmp, name), dst)
		if n := dirBytes(t, dst); n >= 1<<20 {
			t.Errorf("%s is %d bytes; testdata directories must stay under 1 MiB", dst, n)
		}
	}
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(testdataDir, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func generateHealthy(t *testing.T, dir string) Manifest {
	ctx := context.Background()
	time.Sleep(genStart.Sub(time.Now()))
	quiet := slog.New(slog.DiscardHandler)
	q, err := queue.Open(queue.Options{Dir: filepath.Join(dir, QueueDir), SegmentSize: 4096, AckSegmentSize: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Options{Dir: dir, Sink: q, SegmentDuration: time.Hour, CommitlogSegmentSize: 4096, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	q.SetReschedule(e.Schedule)
	<-e.Ready()
	msgs := genMessages()
	ids := make([]message.ID, len(msgs))
	var origin message.ID
	for i, m := range msgs {
		req := engine.Request{Topic: m.topic, At: m.at, Body: m.body, Headers: m.headers, Attempt: m.attempt}
		if m.attempt > 0 {
			req.Origin = origin
		}
		if ids[i], err = e.Schedule(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			origin = ids[i] // the retry below names the payment as its first attempt
		}
	}
	time.Sleep(genNow.Sub(time.Now()))
	synctest.Wait()
	if r, err := e.Cancel(ctx, ids[cancelIndex]); err != nil || r != engine.Cancelled {
		t.Fatalf("cancel: %v, %v", r, err)
	}
	// A consumer takes two orders and acks one: the queue's ack log has
	// an ack, and the other order is leased when the directory is closed.
	got, err := q.Receive(ctx, "orders", 2, 0, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("receive: %d messages, %v", len(got), err)
	}
	if err := q.Ack(ctx, "orders", got[0].ID); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if !time.Now().Equal(genNow) {
		t.Fatalf("the generator ends at %v, not %v: golden outputs would not match", time.Now().UTC(), genNow)
	}
	man := Manifest{Now: genNow}
	for i, m := range msgs {
		st := "pending"
		switch {
		case i == cancelIndex:
			st = "cancelled"
		case !m.at.After(genNow):
			st = "delivered"
		}
		man.Messages = append(man.Messages, ManifestMessage{ID: ids[i].String(), Topic: m.topic, Bucket: schedulelog.Name(schedulelog.BucketStart(ids[i].DeliverAt, time.Hour)), Body: m.body, State: st})
	}
	return man
}

// tearTails leaves what a crash in the middle of two writes leaves: half a
// record after the last whole one in the active commitlog segment, and half
// an entry after the last one of the 06:00 schedule segment.
func tearTails(t *testing.T, dir string) Damage {
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, CommitlogDir), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	l.Close()
	segs, err := listCommitlog(filepath.Join(dir, CommitlogDir))
	if err != nil {
		t.Fatal(err)
	}
	var seg ClSegment
	for _, s := range segs {
		if s.Base < end {
			seg = s
		}
	}
	payload := message.AppendSchedule(nil, &message.Message{DeliverAt: genNow.Add(time.Hour).UnixMilli(), Topic: []byte("orders"), Body: []byte("lost in the crash")})
	rec := make([]byte, record.Size(len(payload)))
	if _, err := record.Encode(rec, message.TypeSchedule, 0, payload); err != nil {
		t.Fatal(err)
	}
	clFile := filepath.Join(CommitlogDir, seg.Name)
	clPos := clHeaderSize + end - seg.Base
	writeAt(t, filepath.Join(dir, clFile), clPos, rec[:len(rec)/2])

	name := schedulelog.Name(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC).UnixMilli())
	path := filepath.Join(dir, ScheduleDir, name)
	last, size := lastEntry(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, path, size, b[last:last+(size-last)/2])
	return Damage{File: clFile, Offset: clPos, What: fmt.Sprintf("the first %d of %d bytes of a schedule record after the last whole record", len(rec)/2, len(rec)),
		Also: []Damage{{File: filepath.Join(ScheduleDir, name), Offset: size, What: fmt.Sprintf("the first %d bytes of a copy of the last entry after it", (size-last)/2)}}}
}

// flipSched flips one bit in the body of the second entry of the 05:00
// schedule segment.
func flipSched(t *testing.T, dir string) Damage {
	name := schedulelog.Name(time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC).UnixMilli())
	path := filepath.Join(dir, ScheduleDir, name)
	offs, ids := entryOffsets(t, path)
	off := offs[1] + 40
	flipBit(t, path, off)
	return Damage{File: filepath.Join(ScheduleDir, name), Offset: offs[1], ID: ids[1].String(),
		What: fmt.Sprintf("bit 0x04 of byte %d flipped, inside the entry at offset %d", off, offs[1])}
}

// flipDone flips one bit in the seq of the second done-record of the 04:00
// dispatch log.
func flipDone(t *testing.T, dir string) Damage {
	name := dispatchlog.Name(genStart.UnixMilli())
	path := filepath.Join(dir, ScheduleDir, name)
	rec := int64(104 + dispatchlog.RecordSize)
	off := rec + 8
	flipBit(t, path, off)
	return Damage{File: filepath.Join(ScheduleDir, name), Offset: rec, What: fmt.Sprintf("bit 0x04 of byte %d flipped, in the seq of the done-record at offset %d", off, rec)}
}

func entryOffsets(t *testing.T, path string) ([]int64, []message.ID) {
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var offs []int64
	var ids []message.ID
	it := rd.Iter()
	for it.Next() {
		offs = append(offs, it.Offset())
		ids = append(ids, message.ID{DeliverAt: it.Message().DeliverAt, Seq: it.Seq()})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return offs, ids
}

func lastEntry(t *testing.T, path string) (last, size int64) {
	offs, _ := entryOffsets(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return offs[len(offs)-1], fi.Size()
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func flipBit(t *testing.T, path string, off int64) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x04
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	n, err := dirSize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
)

// syncBuf is a bytes.Buffer for a logger written from several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRetainedDamageRefuses: a flipped byte inside the newest sealed
// commitlog segment (which commitlog.Open does not scan) makes the engine
// refuse to start (Refused, never Ready) naming the file, the offsets and
// `hourglass repair`. Once repair has covered the damage with a skip
// record the engine starts and says which offsets were given up, and
// every idempotency key, the damaged record's too (the catalog staged it
// when the record was routed), still names its first message.
func TestRetainedDamageRefuses(t *testing.T) {
	dir := t.TempDir()
	window := func(o *Options) { o.IdempotencyWindow = time.Hour }
	e := openEngine(t, dir, &recSink{}, window)
	ctx := context.Background()
	body := strings.Repeat("x", 64<<10)
	var fill []message.ID
	for i := range 40 { // 2.5 MiB: two 1 MiB segments seal
		id, err := e.Schedule(ctx, keyed("fill", fmt.Sprintf("f%d", i), body, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, id)
	}
	var keys []message.ID
	for i := range 5 {
		id, err := e.Schedule(ctx, keyed("orders", fmt.Sprintf("k%d", i), "keyed", time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, id)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// A record in the middle of the newest sealed segment: the one
	// before the segment of the keyed records (a spare may follow that).
	segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
	sealed, base := "", int64(-1)
	for _, s := range segs {
		var b int64
		fmt.Sscanf(filepath.Base(s), "%020d.log", &b)
		if next := b + (1 << 20); b <= int64(keys[0].Seq) && int64(keys[0].Seq) < next {
			break
		}
		sealed, base = s, b
	}
	if sealed == "" {
		t.Fatalf("no sealed segment before the keyed records in %v", segs)
	}
	var victim message.ID
	for _, id := range fill {
		if int64(id.Seq) > base+(256<<10) {
			victim = id
			break
		}
	}
	flipAt(t, sealed, commitlog.SegmentHeaderSize+int64(victim.Seq)-base+100)

	logs := &syncBuf{}
	opts := Options{Dir: dir, Sink: &recSink{}, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
		CommitlogSegmentSize: 1 << 20, IdempotencyWindow: time.Hour, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Refused():
	case <-e.Ready():
		t.Fatalf("ready on a damaged sealed segment; log:\n%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("neither refused nor ready; log:\n%s", logs)
	}
	why := e.RefusedErr().Error()
	for _, want := range []string{sealed, fmt.Sprintf("offsets %d..", victim.Seq), "hourglass repair --data-dir " + dir} {
		if !strings.Contains(why, want) {
			t.Errorf("the refusal lacks %q: %s", want, why)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	ckpt, _, err := reput.ReadCheckpoint(filepath.Join(dir, "schedule"))
	if err != nil {
		t.Fatal(err)
	}
	fixes, err := commitlog.Repair(filepath.Join(dir, "commitlog"), commitlog.RepairOptions{MinEnd: ckpt, Keep: func(string) error { return nil }})
	if err != nil || len(fixes) != 1 {
		t.Fatalf("repair: %v, %v", fixes, err)
	}
	logs = &syncBuf{}
	e = openEngine(t, dir, &recSink{}, func(o *Options) { window(o); o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	defer e.Close()
	if want := fmt.Sprintf("commitlog offsets %d..%d were given up by hourglass repair", fixes[0].From, fixes[0].To); !strings.Contains(logs.String(), want) {
		t.Errorf("the start after repair does not say %q:\n%s", want, logs)
	}
	for i, want := range keys {
		if got, err := e.Schedule(ctx, keyed("orders", fmt.Sprintf("k%d", i), "again", time.Hour)); err != nil || got != want {
			t.Errorf("key k%d after repair: %v, %v; want %v", i, got, err, want)
		}
	}
	for i, want := range fill {
		if got, err := e.Schedule(ctx, keyed("fill", fmt.Sprintf("f%d", i), body, time.Hour)); err != nil || got != want {
			t.Errorf("key f%d after repair (the damaged record's: %v): %v, %v; want %v", i, want == victim, got, err, want)
		}
	}
}

// flipAt inverts some bits of the byte at pos of path.
func flipAt(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

package inspect

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// TestBesideRunningEngine runs every inspect function, again and again,
// against a directory a real engine has open and is writing to (routing,
// firing, recording deliveries, trimming the commitlog, retiring
// segments), and checks that both work: inspect never fails or reports
// corruption, and the engine delivers every message exactly once. Torn
// tails are allowed while it runs (a write in progress can look like one)
// but not once the engine is closed.
func TestBesideRunningEngine(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	seen := map[message.ID]int{}
	e, err := engine.Open(engine.Options{Dir: dir, SegmentDuration: time.Second, PreloadLead: 200 * time.Millisecond,
		CommitlogSegmentSize: 16 << 10, Fsync: commitlog.SyncAlways, Logger: slog.New(slog.DiscardHandler),
		Sink: engine.SinkFunc(func(_ context.Context, _ string, batch []engine.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range batch {
				seen[d.ID]++
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 60, 50
	var ids []message.ID
	var produced atomic.Bool
	var cancelled atomic.Int64
	go func() {
		defer produced.Store(true)
		for b := range batches {
			reqs := make([]engine.Request, perBatch)
			for i := range reqs {
				reqs[i] = engine.Request{Topic: fmt.Sprintf("t%d", i%3), Body: []byte(fmt.Sprintf("m%d-%d", b, i)),
					Delay: time.Duration((b*perBatch+i)%2500) * time.Millisecond}
			}
			got, err := e.ScheduleBatch(context.Background(), reqs)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids = append(ids, got...)
			mu.Unlock()
			if b%10 == 0 {
				if r, err := e.Cancel(context.Background(), got[0]); err == nil && r == engine.Cancelled {
					cancelled.Add(1)
				}
			}
		}
	}()
	o := Options{Dir: dir}
	check := func(final bool) {
		o.Now = time.Now()
		if _, _, err := Segments(o); err != nil {
			t.Fatalf("Segments beside the engine: %v", err)
		}
		if _, err := ReadTimeline(o, 2); err != nil {
			t.Fatalf("ReadTimeline beside the engine: %v", err)
		}
		c, err := ReadCommitlog(o)
		if err != nil || c.Err != nil {
			t.Fatalf("ReadCommitlog beside the engine: %v, %v", err, c.Err)
		}
		if err := DumpCommitlog(o, 0, 100, func(*ClRecord) error { return nil }); err != nil {
			t.Fatalf("DumpCommitlog beside the engine: %v", err)
		}
		rep, err := Verify(o)
		if err != nil {
			t.Fatalf("Verify beside the engine: %v", err)
		}
		for _, p := range rep.Problems {
			if final || p.Kind != TornTail {
				t.Fatalf("Verify beside the engine (final %v): %v", final, p)
			}
		}
		var out bytes.Buffer
		if err := (Output{W: &out, Now: o.Now}).WriteVerify(rep); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	rounds := 0
	for rounds < 400 && (!produced.Load() || rounds < 5) {
		check(false)
		rounds++
		if time.Now().After(deadline) {
			t.Fatal("producers did not finish in 60 s")
		}
	}
	// Wait, bounded, for every message to be delivered or cancelled.
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= batches*perBatch-int(cancelled.Load()) || time.Now().After(deadline) {
			break
		}
		check(false)
		rounds++
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	check(true)
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != batches*perBatch {
		t.Fatalf("%d messages scheduled, want %d", len(ids), batches*perBatch)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%v delivered %d times", id, n)
		}
	}
	if want := len(ids) - int(cancelled.Load()); len(seen) != want {
		t.Errorf("%d of %d messages delivered, want %d (%d cancelled)", len(seen), len(ids), want, cancelled.Load())
	}
	t.Logf("%d inspect rounds beside the engine, %d deliveries", rounds, len(seen))
}

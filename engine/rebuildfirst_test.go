package engine

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// TestDamagedFirstEntryOfARecreatedBucket: a bucket is retired and made
// again by messages scheduled into its time afterwards (the wall clock
// stepped back); the first entry of the new segment is damaged. The restart rebuilds that entry from the
// commitlog (a region before the first good entry is bounded by the
// retirement, not left out), and not the retired bucket's message, whose
// record lies in the same time below the retirement's seq end: that one
// was delivered and must not come again.
func TestDamagedFirstEntryOfARecreatedBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		clock := &steppedClock{}
		sink := &recSink{}
		e := openEngine(t, dir, sink, func(o *Options) { o.Now = clock.now })
		start := time.Now() // synctest's epoch: a bucket boundary
		old := schedule(t, e, "t", 21*time.Second, "old")
		bucket := schedulelog.BucketStart(old.DeliverAt, 10*time.Second)
		sched := filepath.Join(dir, "schedule", schedulelog.Name(bucket))
		time.Sleep(45 * time.Second)
		synctest.Wait()
		if got := len(sink.snapshot()); got != 1 {
			t.Fatalf("%d delivered before the retirement, want 1", got)
		}
		if _, err := os.Stat(sched); !os.IsNotExist(err) {
			t.Fatalf("the bucket's segment is still there after its only message was delivered (stat: %v)", err)
		}
		// The wall clock steps back to 15 s: the retired bucket's time is
		// ahead again, and two messages go there.
		clock.set(start.Add(15 * time.Second).Sub(time.Now()))
		var ids []message.ID
		for i, body := range []string{"first", "second"} {
			id, err := e.Schedule(t.Context(), Request{Topic: "t", At: start.Add(22*time.Second + time.Duration(i)*time.Second), Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(sink.snapshot()); got != 1 {
			t.Fatalf("%d delivered before the restart, want only the first message", got)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		offs, seqs := entryOffsets(t, sched)
		if len(offs) != 2 || seqs[0] != ids[0].Seq || seqs[0] <= old.Seq {
			t.Fatalf("the new segment holds seqs %v, want %v (above the retired message's %d)", seqs, ids, old.Seq)
		}
		flipByte(t, sched, offs[0]+20)

		var logs syncBuffer
		sink2 := &recSink{}
		e = openEngine(t, dir, sink2, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		seen := map[message.ID]int{}
		for _, g := range sink2.snapshot() {
			seen[g.id]++
		}
		if seen[old] != 0 {
			t.Errorf("the retired bucket's message %v was delivered again %d times", old, seen[old])
		}
		for i, id := range ids {
			if seen[id] != 1 {
				t.Errorf("message %d (%v) delivered %d times after the restart, want 1", i, id, seen[id])
			}
		}
		if st := e.Stats(); st.Rebuilt != 1 {
			t.Errorf("Stats.Rebuilt = %d, want 1", st.Rebuilt)
		}
		if !strings.Contains(logs.String(), "rebuilt from the commitlog") {
			t.Errorf("the log does not say the entry was rebuilt:\n%s", logs.String())
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

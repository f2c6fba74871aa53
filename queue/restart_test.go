package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// copyDir copies a directory tree: a crash image of a queue that is open
// (what the page cache holds, as after kill -9), taken between calls.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if errors.Is(err, fs.ErrNotExist) || strings.HasSuffix(path, ".tmp") {
			// A file being created beside the copy (a spare segment
			// renamed into place): Open removes .tmp files anyway.
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func topicOf(t testing.TB, q *Queue, name string) *topic {
	t.Helper()
	tp, err := q.topic(name, false)
	if err != nil || tp == nil {
		t.Fatalf("topic %q: %v", name, err)
	}
	return tp
}

// TestRestart puts a topic into a mixed state (acked, leased, nacked,
// never received; acks before and after a checkpoint), restarts it in
// several ways, and checks that exactly the unacked messages come back,
// twice in a row.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		checkpoint bool // force a checkpoint midway
		crash      bool // copy the open directory instead of closing
		// attempts of messages 1 (nacked) and 3 (leased) after the restart
		wantAttempt1, wantAttempt3 uint32
	}{
		{"close", false, false, 1, 0},
		{"close_after_checkpoint", true, false, 1, 0},
		{"crash_no_checkpoint", false, true, 0, 0},
		{"crash_after_checkpoint", true, true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q := openQ(t, dir, nil)
			var all []string
			for i := range 20 {
				all = append(all, fmt.Sprint(i))
			}
			ids := deliver(t, q, "t", all...)
			if got := bodies(recv(t, q, "t", 10, time.Hour)); !slices.Equal(got, all[:10]) {
				t.Fatalf("first receive: %q", got)
			}
			acked := map[string]bool{}
			for _, i := range []int{0, 2, 4, 6, 8} {
				if err := q.Ack(ctx, "t", ids[i]); err != nil {
					t.Fatal(err)
				}
				acked[fmt.Sprint(i)] = true
			}
			if err := q.Nack(ctx, "t", ids[1], NackOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.checkpoint {
				if err := topicOf(t, q, "t").checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			// After the checkpoint: the nacked one again, and a new one
			// that is acked (ahead of the checkpoint's cursor).
			if got := bodies(recv(t, q, "t", 2, time.Hour)); !slices.Equal(got, []string{"1", "10"}) {
				t.Fatalf("second receive: %q", got)
			}
			if err := q.Ack(ctx, "t", ids[10]); err != nil {
				t.Fatal(err)
			}
			acked["10"] = true
			want := slices.DeleteFunc(slices.Clone(all), func(b string) bool { return acked[b] })

			if tc.crash {
				img := t.TempDir()
				copyDir(t, dir, img)
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				dir = img
			} else if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// First restart: counts only, then a clean close.
			q = openQ(t, dir, nil)
			if st := q.Stats()["t"]; st.Backlog != int64(len(want)) || st.Leased != 0 {
				t.Fatalf("after restart: %+v, want backlog %d", st, len(want))
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// Second restart: everything unacked, nothing acked.
			q = openQ(t, dir, nil)
			defer q.Close()
			ms := drain(t, q, "t")
			got := bodies(ms)
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			wantSorted := slices.Clone(want)
			slices.Sort(wantSorted)
			if !slices.Equal(sorted, wantSorted) {
				t.Fatalf("after restart got %q, want %q", got, want)
			}
			for _, m := range ms {
				switch string(m.Body) {
				case "1":
					if m.Attempt != tc.wantAttempt1 {
						t.Errorf("message 1 attempt %d, want %d", m.Attempt, tc.wantAttempt1)
					}
				case "3":
					if m.Attempt != tc.wantAttempt3 {
						t.Errorf("message 3 attempt %d, want %d", m.Attempt, tc.wantAttempt3)
					}
				}
			}
		})
	}
}

// TestRestartOrder: after a restart, outstanding messages come first in
// queue-log order, then the never-received ones in delivery order.
func TestRestartOrder(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	ids := deliver(t, q, "t", "a", "b", "c", "d", "e")
	recv(t, q, "t", 3, time.Hour)
	if err := q.Ack(context.Background(), "t", ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, nil)
	defer q.Close()
	ms := drain(t, q, "t")
	if got := bodies(ms); !slices.Equal(got, []string{"a", "c", "d", "e"}) {
		t.Fatalf("order after restart: %q", got)
	}
	if st := q.Stats()["t"]; st.Redelivered != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestRetention acks everything through many segments and checks that the
// queue log and the ack log shrink back to a few segments, and that a
// restart after retention still works.
func TestRetention(t *testing.T) {
	dir := t.TempDir()
	mod := func(o *Options) { o.SegmentSize = 8192; o.AckSegmentSize = 4096; o.checkpointEvery = 10 }
	q := openQ(t, dir, mod)
	ctx := context.Background()
	body := string(make([]byte, 100))
	count := func(sub string) int {
		ents, err := os.ReadDir(filepath.Join(dir, "topics", "t", sub))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	for range 10 {
		var bs []string
		for range 50 {
			bs = append(bs, body)
		}
		deliver(t, q, "t", bs...)
		for _, m := range drain(t, q, "t") {
			if err := q.Ack(ctx, "t", m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	deliver(t, q, "t", "last")
	if err := topicOf(t, q, "t").checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Active and preallocated spare, plus at most the segment the
	// low-water mark is in.
	if n := count("log"); n > 3 {
		t.Fatalf("%d queue-log segments after acking everything", n)
	}
	if n := count("acks"); n > 3 {
		t.Fatalf("%d ack-log segments after a checkpoint", n)
	}
	if tp := topicOf(t, q, "t"); tp.log.FirstOffset() < 5*8192 || tp.acks.FirstOffset() < 4*4096 {
		t.Fatalf("retention did not delete old segments: queue log starts at %d, ack log at %d", tp.log.FirstOffset(), tp.acks.FirstOffset())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, mod)
	defer q.Close()
	if got := bodies(drain(t, q, "t")); !slices.Equal(got, []string{"last"}) {
		t.Fatalf("after retention and restart: %q", got)
	}
}

// TestRestartManyTopics: every topic on disk is opened, dead-letter topics
// included, and Stats lists them all.
func TestRestartManyTopics(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, func(o *Options) { o.MaxAttempts = 1 })
	for _, name := range []string{"a", "B", "c.dlq", "d-e_f.g"} {
		deliver(t, q, name, name)
	}
	if err := q.Nack(context.Background(), "a", recv(t, q, "a", 1, 0)[0].ID, NackOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, nil)
	defer q.Close()
	names := slices.Sorted(maps.Keys(q.Stats()))
	if !slices.Equal(names, []string{"B", "a", "a.dlq", "c.dlq", "d-e_f.g"}) {
		t.Fatalf("topics after restart: %q", names)
	}
	if got := bodies(drain(t, q, "a.dlq")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("dead letters after restart: %q", got)
	}
	if got := drain(t, q, "a"); len(got) != 0 {
		t.Fatalf("dead-lettered message still in its topic: %q", bodies(got))
	}
}

func TestOpenRejectsStrangeEntries(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "topics", ".oops"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testOpts(dir)); err == nil {
		t.Fatal("Open accepted a directory that is not a topic")
	}
}

package engine

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// writeSegment writes a segment of n entries into dir: entry i has seq
// 100+i, topic topics[i%len(topics)] and a deliverAt that is not in seq
// order (at(i)). It returns the segment's and dispatch log's paths.
func writeSegment(t testing.TB, dir string, start int64, d time.Duration, n int, topics []string, at func(i int) int64) (string, string) {
	t.Helper()
	w, err := schedulelog.Create(dir, start, d, schedulelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var p []byte
	for i := range n {
		m := message.Message{DeliverAt: at(i), Topic: []byte(topics[i%len(topics)]), Body: []byte(fmt.Sprint(i))}
		p = message.AppendSchedule(p[:0], &m)
		if _, err := w.Append(uint64(100+i), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, schedulelog.Name(start)), filepath.Join(dir, dispatchlog.Name(start))
}

func bodies(fs []Found) string {
	var b []string
	for _, f := range fs {
		b = append(b, string(f.Message.Body))
	}
	return strings.Join(b, " ")
}

func TestListSegment(t *testing.T) {
	dir := t.TempDir()
	const start = 1_800_000_000_000
	// deliverAt descends with i: the file's order is the reverse of List's.
	path, donePath := writeSegment(t, dir, start, time.Hour, 10, []string{"a", "b"}, func(i int) int64 { return start + int64(1000*(10-i)) })
	w, _, err := dispatchlog.Open(dir, start, time.Hour, dispatchlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendSync(dispatchlog.Done{Seq: 104, Reason: dispatchlog.Cancelled}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, tc := range []struct {
		name  string
		sel   listSelect
		want  string
		topic string
	}{
		{name: "all_of_a_in_time_order", sel: listSelect{topic: []byte("a"), to: 1 << 62, limit: 10}, want: "8 6 2 0"}, // 4 is done
		{name: "other_topic", sel: listSelect{topic: []byte("b"), to: 1 << 62, limit: 10}, want: "9 7 5 3 1"},
		{name: "limit", sel: listSelect{topic: []byte("b"), to: 1 << 62, limit: 2}, want: "9 7"},
		{name: "after_key", sel: listSelect{topic: []byte("b"), lo: listKey{at: start + 3000, seq: 108}, to: 1 << 62, limit: 10}, want: "5 3 1"},
		{name: "same_time_later_seq", sel: listSelect{topic: []byte("b"), lo: listKey{at: start + 3000, seq: 107}, to: 1 << 62, limit: 10}, want: "7 5 3 1"},
		{name: "to_exclusive", sel: listSelect{topic: []byte("b"), to: start + 5000, limit: 10}, want: "9 7"},
		{name: "skip_in_memory", sel: listSelect{topic: []byte("b"), to: 1 << 62, limit: 10, skip: map[uint64]struct{}{107: {}}}, want: "9 5 3 1"},
		{name: "unknown_topic", sel: listSelect{topic: []byte("zz"), to: 1 << 62, limit: 10}, want: ""},
		{name: "range_after_bucket", sel: listSelect{topic: []byte("a"), lo: listKey{at: start + 3_600_000}, to: 1 << 62, limit: 10}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sel.segment(path, donePath)
			if err != nil {
				t.Fatal(err)
			}
			if b := bodies(got); b != tc.want {
				t.Errorf("bodies %q, want %q", b, tc.want)
			}
			for i := 1; i < len(got); i++ {
				if a, b := got[i-1].ID, got[i].ID; a.DeliverAt > b.DeliverAt || a.DeliverAt == b.DeliverAt && a.Seq >= b.Seq {
					t.Errorf("out of order: %v then %v", a, b)
				}
			}
		})
	}
	if got, err := (&listSelect{topic: []byte("a"), to: 1, limit: 1}).segment(filepath.Join(dir, "missing.sched"), donePath); err != nil || len(got) != 0 {
		t.Errorf("a deleted segment: %v, %v; want nothing", got, err)
	}
}

func TestReadEntry(t *testing.T) {
	dir := t.TempDir()
	const start = 1_800_000_000_000
	path, _ := writeSegment(t, dir, start, time.Hour, 5, []string{"a"}, func(i int) int64 { return start + int64(i) })
	for _, tc := range []struct {
		name string
		seq  uint64
		ok   bool
	}{{"first", 100, true}, {"last", 104, true}, {"before", 99, false}, {"after", 105, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var m message.Message
			ok, err := readEntry(path, tc.seq, &m)
			if err != nil || ok != tc.ok {
				t.Fatalf("readEntry(%d) = %v, %v; want %v", tc.seq, ok, err, tc.ok)
			}
			if ok && string(m.Body) != fmt.Sprint(tc.seq-100) {
				t.Errorf("body %q", m.Body)
			}
		})
	}
}

var listEntries = flag.Int("list-entries", 1_000_000, "entries of the bucket BenchmarkListFirstPage lists")

// BenchmarkListFirstPage lists the first page (100) of one topic from a
// bucket of -list-entries entries (default 1,000,000; bodies of a few
// bytes, two topics, times not in file order), as List does for a bucket
// on disk: one read of the segment, memory bounded by the page. It
// reports the page's latency (ns/op), allocated bytes (B/op) and the
// segment's read rate (MB/s), against which the disk's sequential read
// rate is the limit once the segment is not in the page cache.
func BenchmarkListFirstPage(b *testing.B) {
	dir := b.TempDir()
	const start = 1_800_000_000_000
	n := *listEntries
	path, donePath := writeSegment(b, dir, start, time.Hour, n, []string{"a", "b"}, func(i int) int64 {
		return start + int64((i*7919)%3_600_000)
	})
	size := fileSize(b, path)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sel := listSelect{topic: []byte("a"), to: 1 << 62, limit: DefaultListLimit}
		got, err := sel.segment(path, donePath)
		if err != nil || len(got) != DefaultListLimit {
			b.Fatalf("%d messages, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(n), "entries")
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	r, err := schedulelog.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	it := r.Iter()
	for it.Next() {
	}
	return it.End()
}

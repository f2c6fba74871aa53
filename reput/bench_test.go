package reput

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// BenchmarkReput measures routing throughput from a filled commitlog into
// schedule segments: b.N records of the given body size spread over the
// given number of one-hour buckets. The target is 1,000,000 entries/s with
// 128 B bodies, far above what an fsync-bound commitlog admits, so that
// reput is never the bottleneck.
func BenchmarkReput(b *testing.B) {
	for _, size := range []int{128, 1024} {
		for _, buckets := range []int{1, 48} {
			b.Run(fmt.Sprintf("%dB/%dbuckets", size, buckets), func(b *testing.B) {
				benchReput(b, size, buckets)
			})
		}
	}
}

func benchReput(b *testing.B, size, buckets int) {
	dir := b.TempDir()
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "commitlog"), Sync: commitlog.SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	// A first start on the empty log makes the schedule directory's
	// records (checkpoint, retired log), as the engine's first Open does:
	// a directory without them beside a log that holds records is one
	// that lost them, which Start refuses.
	r, err := Start(Options{Log: l, Dir: filepath.Join(dir, "schedule"), SegmentDuration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Close(); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	var recs []commitlog.Record
	for i := range b.N {
		m := message.Message{DeliverAt: base + int64(i%buckets)*3600_000 + int64(i%3600_000), Topic: []byte("orders"), Body: body}
		recs = append(recs, commitlog.Record{Type: message.TypeSchedule, Payload: message.AppendSchedule(nil, &m)})
		if len(recs) == 1024 || i == b.N-1 {
			if _, err := l.Append(nil, recs...); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	b.SetBytes(int64(message.ScheduleSize(&message.Message{Topic: []byte("orders"), Body: body})))
	b.ResetTimer()
	start := time.Now()
	r, err = Start(Options{Log: l, Dir: filepath.Join(dir, "schedule"), SegmentDuration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.WaitRouted(context.Background(), l.EndOffset()); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "entries/s")
	if err := r.Close(); err != nil {
		b.Fatal(err)
	}
}

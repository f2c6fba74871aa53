package engine

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
)

// BenchmarkLoadedMemory schedules b.N messages into the loaded window and
// reports the heap they cost once loaded (target: at most 16 bytes each).
// Run with -benchtime 1000000x or more.
func BenchmarkLoadedMemory(b *testing.B) {
	dir := b.TempDir()
	sink := SinkFunc(func(context.Context, string, []Delivery) error { return nil })
	open := func() *Engine {
		e, err := Open(Options{Dir: dir, Sink: sink, Fsync: commitlog.SyncNone})
		if err != nil {
			b.Fatal(err)
		}
		<-e.Ready()
		return e
	}
	e := open()
	ctx := context.Background()
	body := make([]byte, 128)
	var reqs []Request
	for i := range b.N {
		reqs = append(reqs, Request{Topic: "mem", Delay: time.Hour + time.Duration(i%600_000)*time.Millisecond, Body: body})
		if len(reqs) == 1000 || i == b.N-1 {
			if _, err := e.ScheduleBatch(ctx, reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// Reopen with a lead long enough to load the hour ahead.
	e, err := Open(Options{Dir: dir, Sink: sink, Fsync: commitlog.SyncNone, SegmentDuration: 2 * time.Hour, PreloadLead: 119 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	<-e.Ready()
	var pending int64
	for _, n := range e.PendingByBucket() {
		pending += n
	}
	if pending != int64(b.N) {
		b.Fatalf("%d pending after Ready, want %d", pending, b.N)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "heap-bytes/pending")
	e.Close()
}

package engine

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
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

// BenchmarkKeyMemory claims and settles b.N idempotency keys of the
// length the peer driver sends (a decimal ID) and reports the heap they
// hold while their window lasts. Run with -benchtime 2000000x.
func BenchmarkKeyMemory(b *testing.B) {
	k := newReadyKeyIndex()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fillKeys(b, k, "w3", b.N)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(k.ids) != b.N {
		b.Fatalf("%d keys held, want %d", len(k.ids), b.N)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "heap-bytes/key")
}

// BenchmarkKeyIndexGC times one full collection of a heap that holds
// 2,000,000 idempotency keys and little else: what the key index adds to
// every collection the server makes while its window is full.
func BenchmarkKeyIndexGC(b *testing.B) {
	k := newReadyKeyIndex()
	fillKeys(b, k, "w3", 2_000_000)
	runtime.GC()
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(k)
}

// newReadyKeyIndex is a key index with a 10-minute window on a clock that
// stands still, open for claims.
func newReadyKeyIndex() *keyIndex {
	now := time.Unix(1_800_000_000, 0)
	k := newKeyIndex(10*time.Minute, func() time.Time { return now })
	close(k.ready)
	return k
}

// fillKeys claims and settles n keys of topic, the decimal numbers from
// 1,000,000 up (the length the peer driver sends), key i naming the ID
// with Seq i.
func fillKeys(tb testing.TB, k *keyIndex, topic string, n int) {
	tb.Helper()
	for i := range n {
		key, _, found, err := k.claim(context.Background(), indexKey(topic, strconv.Itoa(1_000_000+i)))
		if err != nil || found {
			tb.Fatalf("claim %d: found %v, err %v", i, found, err)
		}
		k.settle(key, message.ID{DeliverAt: int64(i), Seq: uint64(i)}, true)
	}
}

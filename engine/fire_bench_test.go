package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
)

// BenchmarkFireHot measures firing throughput: b.N messages loaded and due
// within one second, delivered to a sink that only counts. It reports messages
// per second from the first delivery to the last (the target is at least
// a million a second, so that a hot second drains within the second).
func BenchmarkFireHot(b *testing.B) {
	var got atomic.Int64
	all := make(chan struct{})
	var first, last atomic.Int64
	sink := SinkFunc(func(_ context.Context, _ string, batch []Delivery) error {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		if got.Add(int64(len(batch))) == int64(b.N) {
			last.Store(now)
			close(all)
		}
		return nil
	})
	e, err := Open(Options{Dir: b.TempDir(), Sink: sink, Fsync: commitlog.SyncInterval})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	<-e.Ready()
	at := time.Now().Add(2*time.Second + time.Duration(b.N)*time.Second/500_000)
	body := make([]byte, 128)
	var reqs []Request
	for i := range b.N {
		reqs = append(reqs, Request{Topic: "hot", At: at.Add(time.Duration(i%1000) * time.Millisecond), Body: body})
		if len(reqs) == 1000 || i == b.N-1 {
			if _, err := e.ScheduleBatch(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	select {
	case <-all:
	case <-time.After(time.Until(at) + time.Minute):
		b.Fatalf("%d of %d delivered", got.Load(), b.N)
	}
	if d := time.Duration(last.Load() - first.Load()); d > 0 {
		b.ReportMetric(float64(b.N)/d.Seconds(), "fired/s")
	}
}

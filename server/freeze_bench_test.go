package server

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"net/http/httptest"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// BenchmarkFreezeTopic measures a frozen pause and its resume of a topic
// holding HOURGLASS_FREEZE_PENDING messages (default 100,000) spread over a
// year, through SetPolicy on a server over an engine with hour-long
// segments: each must take a time that does not grow with the messages
// (the target: under 10 ms at 10,000,000) and leave the live heap as it
// was. It reports pause-ms and resume-ms (each call's time) and
// heap-delta-bytes (live heap after the resume less before the pause,
// both after a GC). The lead's measurement:
//
//	HOURGLASS_FREEZE_PENDING=10000000 go test ./server -run '^$' -bench BenchmarkFreezeTopic -benchtime 1x -timeout 2h
func BenchmarkFreezeTopic(b *testing.B) {
	n := 100_000
	if v := os.Getenv("HOURGLASS_FREEZE_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("HOURGLASS_FREEZE_PENDING=%q: want a positive count", v)
		}
	}
	dir := b.TempDir()
	q, err := queue.Open(queue.Options{Dir: QueueDir(dir), Fsync: commitlog.SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	onControl := func(c message.Control) {
		if c.Kind == message.ControlPolicy {
			if p, err := queue.DecodePolicy(c.Value); err == nil {
				_ = q.SetPolicy(string(c.Name), p)
			}
		}
	}
	year := 365 * 24 * time.Hour
	eng, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, Sink: q, MaxDelay: 2 * year, OnControl: onControl})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := eng.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			b.Error(err)
		}
		q.Close()
	}()
	q.SetReschedule(eng.Schedule)
	srv, err := New(Options{Engine: eng, Queue: q, Metrics: NewMetrics(), DataDir: dir, MaxDelay: 2 * year})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.BeginShutdown()
	cl := hourglassv1connect.NewHourglassServiceClient(hs.Client(), hs.URL)
	ctx := context.Background()

	// The topic's messages, from an hour ahead to a year ahead.
	const batch = 1000
	reqs := make([]engine.Request, 0, batch)
	body := make([]byte, 64)
	start := time.Now().Add(time.Hour)
	for i := range n {
		reqs = append(reqs, engine.Request{Topic: "frozen", Body: body, At: start.Add(time.Duration(int64(year) / int64(n) * int64(i)))})
		if len(reqs) == batch || i == n-1 {
			if _, err := eng.ScheduleBatch(ctx, reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	if err := eng.WaitRouted(ctx); err != nil {
		b.Fatal(err)
	}
	set := func(p *hourglassv1.Policy) time.Duration {
		t0 := time.Now()
		if _, err := cl.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "frozen", Policy: p})); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	set(&hourglassv1.Policy{MaxAttempts: ptr(int32(5))}) // the first SetPolicy opens what it needs
	b.ResetTimer()
	var pause, resume time.Duration
	var delta int64
	for range b.N {
		before := heap()
		pause += set(&hourglassv1.Policy{Freeze: ptr(true)})
		resume += set(&hourglassv1.Policy{Paused: ptr(false)})
		delta += int64(heap()) - int64(before)
	}
	b.StopTimer()
	b.ReportMetric(float64(pause.Microseconds())/1000/float64(b.N), "pause-ms")
	b.ReportMetric(float64(resume.Microseconds())/1000/float64(b.N), "resume-ms")
	b.ReportMetric(float64(delta)/float64(b.N), "heap-delta-bytes")
	b.ReportMetric(float64(n), "pending")
	if st := eng.Stats(); st.Scheduled < int64(n) {
		b.Fatalf("scheduled %d of %d", st.Scheduled, n)
	}
}

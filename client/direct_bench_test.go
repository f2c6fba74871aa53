package client

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/server"
)

// BenchmarkDirect makes Schedule calls (256 B bodies) and ScheduleBatch
// calls of 100 through connect-go and through the direct path against a
// real in-process server (fsync none), one call at a time. The server's
// work is the same for both, so the difference per call is the client's:
// run it under callgrind with two -benchtime counts and divide the
// difference in instructions by the difference in calls
// (docs/BENCHMARKS.md). With HOURGLASS_BENCH_ADDR set it calls the
// server at that address instead (a separate process), so that callgrind
// counts the client's instructions alone.
func BenchmarkDirect(b *testing.B) {
	addr := os.Getenv("HOURGLASS_BENCH_ADDR")
	if addr == "" {
		addr = startServer(b, server.Options{})
	}
	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(b, addr, hc, "")
	ctx := context.Background()
	body := make([]byte, 256)
	delay := &hourglassv1.ScheduleRequest_DelayMs{DelayMs: time.Hour.Milliseconds()}
	batch := make([]*hourglassv1.ScheduleRequest, 100)
	for i := range batch {
		batch[i] = &hourglassv1.ScheduleRequest{Topic: "bench", Body: body, When: delay}
	}
	for _, p := range []struct {
		name string
		svc  hourglassv1connect.HourglassServiceClient
	}{{"connect", viaConnect}, {"direct", viaDirect}} {
		b.Run("single/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := p.svc.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "bench", Body: body, When: delay})); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("batch100/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body) * len(batch)))
			for b.Loop() {
				if _, err := p.svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
)

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reports the process's CPU time per message as "cpu-µs/msg":
// client and server together, the figure that other loads on the machine
// disturb least (a throughput number moves with whatever else runs).
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{start: cpuTime()} }

func (m cpuMeter) report(b *testing.B, msgs int) {
	b.ReportMetric(float64(cpuTime()-m.start)/float64(time.Microsecond)/float64(msgs), "cpu-µs/msg")
}

// noopServer answers ScheduleBatch with made-up IDs without storing
// anything: what the RPC stack alone costs.
type noopServer struct {
	hourglassv1connect.UnimplementedHourglassServiceHandler
}

func (noopServer) ScheduleBatch(_ context.Context, req *connect.Request[hourglassv1.ScheduleBatchRequest]) (*connect.Response[hourglassv1.ScheduleBatchResponse], error) {
	out := &hourglassv1.ScheduleBatchResponse{Results: make([]*hourglassv1.ScheduleResponse, len(req.Msg.Messages))}
	for i := range out.Results {
		out.Results[i] = &hourglassv1.ScheduleResponse{Id: "0000000000000000000000000000000" + fmt.Sprint(i%10)}
	}
	return connect.NewResponse(out), nil
}

// noopMux serves noopServer as the real server is served.
func noopMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(hourglassv1connect.NewHourglassServiceHandler(noopServer{}, connect.WithCompressMinBytes(compressMinBytes)))
	return mux
}

// BenchmarkScheduleBatchRPC sends ScheduleBatch calls of 100 messages of
// 256 bytes from 8 goroutines per GOMAXPROCS... over loopback HTTP/1.1, to
// a server that does nothing (noop: the cost of HTTP, Connect and
// protobuf on both sides) and to the real server with the engine and
// fsync none (what storing adds in CPU). msgs/s is the figure to compare;
// client and server share the process, as they share the machine in
// `hourglass bench server`.
func BenchmarkScheduleBatchRPC(b *testing.B) {
	body := make([]byte, 256)
	msgs := make([]*hourglassv1.ScheduleRequest, 100)
	for i := range msgs {
		msgs[i] = &hourglassv1.ScheduleRequest{Topic: "bench", Body: body, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	}
	req := &hourglassv1.ScheduleBatchRequest{Messages: msgs}
	run := func(b *testing.B, url string, hc *http.Client, opts ...connect.ClientOption) {
		c := hourglassv1connect.NewHourglassServiceClient(hc, url, opts...)
		b.SetParallelism(4) // 8 senders on 2 cores, as bench server's default
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.ScheduleBatch(context.Background(), connect.NewRequest(req)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report(b, b.N*len(msgs))
		b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("noop", func(b *testing.B) {
		hs := httptest.NewServer(noopMux())
		defer hs.Close()
		run(b, hs.URL, hs.Client())
	})
	b.Run("engine-fsync-none", func(b *testing.B) {
		ts := newTestServer(b, Options{})
		run(b, ts.http.URL, ts.http.Client())
	})
	// The client as package client and bench server make it: one write
	// per request, the batch answers decoded by wirecodec.
	b.Run("engine-fsync-none-goclient", func(b *testing.B) {
		ts := newTestServer(b, Options{})
		hc := client.NewHTTPClient(16)
		defer hc.CloseIdleConnections()
		run(b, ts.http.URL, hc, connect.WithCodec(wirecodec.Codec{}))
	})
}

func (noopServer) Schedule(_ context.Context, req *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
	return connect.NewResponse(&hourglassv1.ScheduleResponse{Id: "00000000000000000000000000000000"}), nil
}

// BenchmarkScheduleRPC is BenchmarkScheduleBatchRPC for single Schedule
// calls from 64 goroutines (bench server's single scenario).
func BenchmarkScheduleRPC(b *testing.B) {
	req := &hourglassv1.ScheduleRequest{Topic: "bench", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	// plain is net/http's transport as connect-go's examples use it; the
	// -onewrite cases use client.NewHTTPClient, which sends each request
	// in one write.
	plain := func() *http.Client {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 128
		return &http.Client{Transport: tr}
	}
	run := func(b *testing.B, url string, hc *http.Client) {
		c := hourglassv1connect.NewHourglassServiceClient(hc, url)
		defer hc.CloseIdleConnections()
		b.SetParallelism(32) // 64 callers on 2 cores
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Schedule(context.Background(), connect.NewRequest(req)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report(b, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("noop", func(b *testing.B) {
		hs := httptest.NewServer(noopMux())
		defer hs.Close()
		run(b, hs.URL, plain())
	})
	b.Run("noop-onewrite", func(b *testing.B) {
		hs := httptest.NewServer(noopMux())
		defer hs.Close()
		run(b, hs.URL, client.NewHTTPClient(128))
	})
	b.Run("engine-fsync-none", func(b *testing.B) {
		ts := newTestServer(b, Options{})
		run(b, ts.http.URL, plain())
	})
	b.Run("engine-fsync-none-onewrite", func(b *testing.B) {
		ts := newTestServer(b, Options{})
		run(b, ts.http.URL, client.NewHTTPClient(128))
	})
	b.Run("noop-grpc-h2c", func(b *testing.B) {
		hs := httptest.NewUnstartedServer(noopMux())
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
		defer hs.Close()
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		c := hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: tr}, hs.URL, connect.WithGRPC())
		b.SetParallelism(32)
		b.ResetTimer()
		cpu := startCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Schedule(context.Background(), connect.NewRequest(req)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report(b, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// discardWriter is an http.ResponseWriter that keeps the status and the
// body of the last response and reuses its header map.
type discardWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status = 0
	w.body = w.body[:0]
}

// serveOnce calls h once. It is a function of its own so that a profiler
// (valgrind --toggle-collect='*server.serveOnce') can count the
// instructions of the handler alone.
//
//go:noinline
func serveOnce(h http.Handler, w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }

// BenchmarkHandler calls the server's HTTP handler directly, without a
// network or a client, with Connect requests as the Go client sends them
// (binary protobuf, a timeout, gzip accepted), on an engine at fsync
// none: the CPU and the allocations of the server's own request path,
// from the HTTP request to the written response. It runs on one
// goroutine, so that its instruction counts under valgrind repeat.
func BenchmarkHandler(b *testing.B) {
	body := make([]byte, 256)
	one := &hourglassv1.ScheduleRequest{Topic: "bench", Body: body, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	batch := &hourglassv1.ScheduleBatchRequest{Messages: make([]*hourglassv1.ScheduleRequest, 100)}
	for i := range batch.Messages {
		batch.Messages[i] = one
	}
	for _, c := range []struct {
		name, procedure string
		msg             any
		msgs            int
	}{
		{"Schedule", hourglassv1connect.HourglassServiceScheduleProcedure, one, 1},
		{"ScheduleBatch100", hourglassv1connect.HourglassServiceScheduleBatchProcedure, batch, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			ts := newTestServer(b, Options{})
			h := ts.srv.Handler()
			payload, err := wirecodec.Codec{}.Marshal(c.msg)
			if err != nil {
				b.Fatal(err)
			}
			tmpl, err := http.NewRequest(http.MethodPost, "http://127.0.0.1"+c.procedure, nil)
			if err != nil {
				b.Fatal(err)
			}
			tmpl.Header = http.Header{
				"Content-Type":             {"application/proto"},
				"Connect-Protocol-Version": {"1"},
				"Connect-Timeout-Ms":       {"30000"},
				"Accept-Encoding":          {"gzip"},
				"User-Agent":               {"connect-go/1.21.1 (go1.26)"},
			}
			tmpl.ContentLength = int64(len(payload))
			w := &discardWriter{h: http.Header{}}
			rd := bytes.NewReader(payload)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w.reset()
				rd.Reset(payload)
				r := *tmpl
				r.Body = io.NopCloser(rd)
				serveOnce(h, w, &r)
				if w.status != http.StatusOK {
					b.Fatalf("status %d: %s", w.status, w.body)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.msgs), "ns/msg")
		})
	}
}

package h1

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRoundTrip: 64 goroutines POST 300 bytes (a body net/http does
// not know to be in memory, like connect-go's) to a server answering 40
// bytes, with this transport and with net/http's, client and server in
// one process on the machine's cores. req/s is the figure to compare;
// cpu-us/req is the whole process (server included) per request, so the
// difference between the two is the client's.
func BenchmarkRoundTrip(b *testing.B) {
	answer := bytes.Repeat([]byte("a"), 40)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(answer)
	}))
	defer srv.Close()
	payload := bytes.Repeat([]byte("p"), 300)
	run := func(b *testing.B, rt http.RoundTripper) {
		b.SetParallelism(32) // 64 callers on 2 cores
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest("POST", srv.URL, &opaque{bytes.NewReader(payload)})
				req.ContentLength = int64(len(payload))
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/req")
	}
	b.Run("h1", func(b *testing.B) {
		tr := New(Options{MaxIdlePerHost: 128})
		defer tr.CloseIdleConnections()
		run(b, tr)
	})
	b.Run("nethttp", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 128
		defer tr.CloseIdleConnections()
		run(b, tr)
	})
}

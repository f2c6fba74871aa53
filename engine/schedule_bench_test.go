package engine

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hourglassmq/hourglass/commitlog"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScheduleBatch measures what the engine spends to store a
// message: ScheduleBatch calls of 100 messages of 256 bytes (bench
// server's batch scenario) from 8 goroutines at fsync none, due an hour
// ahead (nothing fires), and reput's routing of them into the schedule
// segment, which the timer waits for. cpu-µs/msg is the process's CPU
// time per message, the figure that other loads on the machine disturb
// least; the server's RPC stack adds its own (server.BenchmarkScheduleBatchRPC).
func BenchmarkScheduleBatch(b *testing.B) { benchScheduleBatch(b, noKeys) }

// The idempotency keys of a benchmark's messages.
const (
	noKeys     = iota
	indexKeys  // each message's index in decimal, as peerbench's drivers send
	randomKeys // 32 random-looking hex digits, as a UUID a producer makes
)

// BenchmarkScheduleBatchKeyed is BenchmarkScheduleBatch with an
// idempotency key on every message, each key new (peerbench's drivers
// send every message's ID as its key), under the server's default
// idempotency window: the key index's claims and settles, and the
// catalog's staging and commits at reput's checkpoints.
func BenchmarkScheduleBatchKeyed(b *testing.B) { benchScheduleBatch(b, indexKeys) }

// BenchmarkScheduleBatchRandomKeys is BenchmarkScheduleBatchKeyed with
// keys in no order (a hash of the index in hex, as long as a UUID): the
// catalog's writes land all over its key space, not at its end.
func BenchmarkScheduleBatchRandomKeys(b *testing.B) { benchScheduleBatch(b, randomKeys) }

func benchScheduleBatch(b *testing.B, keys int) {
	opts := Options{Dir: b.TempDir(), Sink: SinkFunc(func(context.Context, string, []Delivery) error { return nil }), Fsync: commitlog.SyncNone}
	if keys != noKeys {
		opts.IdempotencyWindow = 10 * time.Minute // the server's default
	}
	e, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	<-e.Ready()
	body := make([]byte, 256)
	reqs := make([]Request, 100)
	for i := range reqs {
		reqs[i] = Request{Topic: "bench", Body: body, Delay: time.Hour}
	}
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.SetBytes(int64(len(reqs) * len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		reqs := slices.Clone(reqs)
		for pb.Next() {
			if keys != noKeys {
				n := next.Add(uint64(len(reqs))) - uint64(len(reqs))
				for i := range reqs {
					reqs[i].IdempotencyKey = benchKey(keys, n+uint64(i))
				}
			}
			if _, err := e.ScheduleBatch(context.Background(), reqs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	for deadline := time.Now().Add(time.Minute); e.Stats().ReputLag > 0; {
		if time.Now().After(deadline) {
			b.Fatalf("reput still %d bytes behind after a minute", e.Stats().ReputLag)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	msgs := b.N * len(reqs)
	b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(msgs), "cpu-µs/msg")
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

// benchKey is message n's key of the given kind.
func benchKey(kind int, n uint64) string {
	if kind == indexKeys {
		return strconv.FormatUint(n, 10)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], n)
	binary.BigEndian.PutUint64(b[8:], xxhash.Sum64(b[:8]))
	binary.BigEndian.PutUint64(b[:8], xxhash.Sum64(b[8:]))
	return hex.EncodeToString(b[:])
}

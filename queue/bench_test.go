package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Benchmarks write real files under the test's temp directory (set TMPDIR
// to put them on the disk under test) with the always fsync policy. Compare
// Deliver's batches/s with the disk's fsync rate (commitlog's
// BenchmarkAppend/always/128B/1): one batch costs one fsync, and topics
// delivered to concurrently fsync their own files in parallel. Receive+Ack
// costs one fsync per Ack, shared by concurrent consumers (records/fsync).

func benchBatch(topic string, n, size int, seq uint64) []engine.Delivery {
	batch := make([]engine.Delivery, n)
	body := make([]byte, size)
	for i := range batch {
		id := message.ID{DeliverAt: int64(seq) + int64(i), Seq: seq + uint64(i)}
		batch[i] = engine.Delivery{ID: id, Message: &message.Message{DeliverAt: id.DeliverAt, Topic: []byte(topic), Body: body}}
	}
	return batch
}

// BenchmarkDeliver delivers batches of 100 messages of 256 bytes; an op is
// one message.
func BenchmarkDeliver(b *testing.B) {
	const batchSize, size = 100, 256
	for _, topics := range []int{1, 8} {
		b.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			q := openQ(b, b.TempDir(), func(o *Options) { o.SegmentSize = DefaultSegmentSize; o.AckSegmentSize = DefaultAckSegmentSize })
			defer q.Close()
			ctx := context.Background()
			batches := make([][]engine.Delivery, topics)
			for i := range topics {
				batches[i] = benchBatch(fmt.Sprintf("t%d", i), batchSize, size, 1)
				if err := q.Deliver(ctx, fmt.Sprintf("t%d", i), batches[i]); err != nil { // create the topic
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			rounds := (b.N + batchSize - 1) / batchSize
			var wg sync.WaitGroup
			for i := range topics {
				wg.Go(func() {
					for r := i; r < rounds; r += topics {
						if err := q.Deliver(ctx, fmt.Sprintf("t%d", i), batches[i]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(rounds*batchSize)/secs, "msgs/s")
			b.ReportMetric(float64(rounds)/secs, "batches/s")
		})
	}
}

// BenchmarkReceiveAck receives batches of up to 100 and acks each message
// on its own; an op is one message. With several consumers their acks
// share fsyncs.
func BenchmarkReceiveAck(b *testing.B) {
	const size = 256
	for _, consumers := range []int{1, 16} {
		b.Run(fmt.Sprintf("consumers=%d", consumers), func(b *testing.B) {
			q := openQ(b, b.TempDir(), func(o *Options) { o.SegmentSize = DefaultSegmentSize; o.AckSegmentSize = DefaultAckSegmentSize })
			defer q.Close()
			ctx := context.Background()
			for seq := 0; seq < b.N; seq += 1000 {
				if err := q.Deliver(ctx, "t", benchBatch("t", min(1000, b.N-seq), size, uint64(seq+1))); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range consumers {
				wg.Go(func() {
					for {
						ms, err := q.Receive(ctx, "t", 100, 0, time.Minute)
						if err != nil {
							b.Error(err)
							return
						}
						if len(ms) == 0 {
							return
						}
						for _, m := range ms {
							if err := q.Ack(ctx, "t", m.ID); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			if st := q.Stats()["t"]; st.Acked != uint64(b.N) {
				b.Fatalf("acked %d of %d", st.Acked, b.N)
			}
		})
	}
}

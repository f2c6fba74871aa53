package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// sizeSink takes lag (of the bubble's clock) per Deliver call and records
// the largest call, in messages and in body bytes.
type sizeSink struct {
	recSink
	lag               time.Duration
	maxMsgs, maxBytes int
}

func (s *sizeSink) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	time.Sleep(s.lag)
	n := 0
	for _, d := range batch {
		n += len(d.Message.Body)
	}
	s.mu.Lock()
	s.maxMsgs = max(s.maxMsgs, len(batch))
	s.maxBytes = max(s.maxBytes, n)
	s.mu.Unlock()
	return s.recSink.Deliver(ctx, topic, batch)
}

// TestSinkBatch: when a burst is due at once and the sink is slow (an
// fsync per call), the batches that pile up meanwhile go to the sink in
// calls of up to SinkBatch messages, more than one fired batch each, and
// within MaxSinkBatchBytes (plus the one fired batch that starts a call).
func TestSinkBatch(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		n, body              int
		fireBatch, sinkBatch int
		wantMax              int // largest call, in messages, at least
		maxCalls             int
	}{
		{"merges_up_to_sink_batch", 4000, 8, 64, 1024, 1024, 4000/1024 + 3},
		{"default_is_fire_batch", 2000, 8, 64, 0, 64, 2000/64 + 3},
		{"bounded_by_bytes", 600, 32 << 10, 16, 4096, 200, 600 / 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sink := &sizeSink{lag: 20 * time.Millisecond}
				e := openEngine(t, t.TempDir(), sink, func(o *Options) {
					o.fireBatch, o.SinkBatch = tc.fireBatch, tc.sinkBatch
					o.CommitlogSegmentSize = 16 << 20
				})
				at := time.Now().Add(time.Second)
				body := strings.Repeat("x", tc.body)
				var ids []message.ID
				for range tc.n {
					id, err := e.Schedule(context.Background(), Request{Topic: "t", At: at, Body: []byte(body)})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				checkDeliveries(t, sink.snapshot(), ids, time.Minute)
				limit := tc.sinkBatch
				if limit == 0 {
					limit = tc.fireBatch
				}
				if sink.maxMsgs > limit {
					t.Errorf("a sink call carried %d messages, more than SinkBatch %d", sink.maxMsgs, limit)
				}
				if sink.maxMsgs < tc.wantMax {
					t.Errorf("the largest sink call carried %d messages, want %d: waiting batches were not merged", sink.maxMsgs, tc.wantMax)
				}
				if byteLimit := MaxSinkBatchBytes + tc.fireBatch*tc.body; sink.maxBytes > byteLimit {
					t.Errorf("a sink call carried %d bytes of bodies, more than MaxSinkBatchBytes plus one fired batch (%d)", sink.maxBytes, byteLimit)
				}
				if sink.calls > tc.maxCalls {
					t.Errorf("%d sink calls for %d messages, want at most %d", sink.calls, tc.n, tc.maxCalls)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestSinkBatchBelowFireBatch(t *testing.T) {
	_, err := Open(Options{Dir: t.TempDir(), Sink: &recSink{}, fireBatch: 512, SinkBatch: 100})
	if err == nil || !strings.Contains(err.Error(), "sink batch 100 is below the fire batch 512") {
		t.Errorf("got %v, want an error naming the sink batch and the fire batch", err)
	}
}

// hdrSink records each delivery's body and headers as one string.
type hdrSink struct {
	sizeSink
	mu   sync.Mutex
	seen map[message.ID]string
}

func (s *hdrSink) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	s.mu.Lock()
	for _, d := range batch {
		var b strings.Builder
		b.Write(d.Message.Body)
		for _, h := range d.Message.Headers {
			fmt.Fprintf(&b, "|%s=%s", h.Key, h.Value)
		}
		s.seen[d.ID] = b.String()
	}
	s.mu.Unlock()
	return s.sizeSink.Deliver(ctx, topic, batch)
}

// TestBatchBuffersReused: a batch's buffer goes back to a pool once its Sink
// call is over and new batches encode into it, while later batches are
// still being fired and earlier ones recorded. Every message must reach
// the sink as it was scheduled: bodies and headers of many sizes, in
// batches that pile up behind a slow sink and merge.
func TestBatchBuffersReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &hdrSink{sizeSink: sizeSink{lag: 5 * time.Millisecond}, seen: map[message.ID]string{}}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) {
			o.fireBatch, o.SinkBatch = 8, 32
			o.CommitlogSegmentSize = 16 << 20
		})
		at := time.Now().Add(time.Second)
		want := map[message.ID]string{}
		for i := range 3000 {
			body := strings.Repeat(string(rune('a'+i%26)), 1+(i*37)%700)
			hv := fmt.Sprint(i)
			id, err := e.Schedule(context.Background(), Request{Topic: "t", At: at.Add(time.Duration(i%50) * time.Millisecond),
				Body: []byte(body), Headers: []message.Header{{Key: []byte("n"), Value: []byte(hv)}}})
			if err != nil {
				t.Fatal(err)
			}
			want[id] = body + "|n=" + hv
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.seen) != len(want) {
			t.Errorf("%d distinct messages delivered, want %d", len(sink.seen), len(want))
		}
		bad := 0
		for id, w := range want {
			if g := sink.seen[id]; g != w && bad < 5 {
				bad++
				t.Errorf("%v delivered as %.40q..., scheduled as %.40q...", id, g, w)
			}
		}
		if sink.maxMsgs <= 8 {
			t.Errorf("the largest sink call carried %d messages: batches never merged, so buffers were not reused under load", sink.maxMsgs)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

package engine

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// laneState is what the driver knows of a topic's lane.
type laneState struct {
	l         *lane
	held      int
	idleSince int64
}

// laneOf returns the live lane of topic, or a zero laneState.
func laneOf(t *testing.T, e *Engine, topic string) laneState {
	t.Helper()
	var st laneState
	if err := e.d.call(context.Background(), func() {
		if l := e.d.lanes[topic]; l != nil {
			st = laneState{l, l.held, l.idleSince}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// exited reports whether a retired lane's goroutines have ended: the
// deliverer closes commit as it returns, and the committer then drains it.
func exited(l *lane) bool {
	select {
	case _, ok := <-l.commit:
		return !ok
	default:
		return false
	}
}

// TestIdleLanes checks that a topic's lane stops once it has had nothing
// to deliver for LaneIdle, that a message fired for the topic afterwards
// gets a new lane and is delivered once, and that a lane is not retired
// while it still holds a message (a failing sink) or when a message fires
// at the moment it would retire.
func TestIdleLanes(t *testing.T) {
	const idle = 2 * time.Second
	tests := []struct {
		name string
		run  func(t *testing.T, e *Engine, sink *recSink) []message.ID
	}{
		{"message_for_a_retired_lane_is_delivered", func(t *testing.T, e *Engine, sink *recSink) []message.ID {
			first := schedule(t, e, "a", time.Second, "1")
			time.Sleep(time.Second + idle/2)
			synctest.Wait()
			old := laneOf(t, e, "a")
			if old.l == nil || old.held != 0 {
				t.Fatalf("after the first delivery: lane %+v, want a live idle lane", old)
			}
			time.Sleep(idle)
			synctest.Wait()
			if st := laneOf(t, e, "a"); st.l != nil {
				t.Fatalf("lane still live after %v idle", idle)
			}
			if !exited(old.l) {
				t.Fatal("a retired lane's goroutines are still running")
			}
			second := schedule(t, e, "a", time.Second, "2")
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if st := laneOf(t, e, "a"); st.l == nil || st.l == old.l {
				t.Fatalf("after a message for a retired lane: lane %+v, want a new one", st)
			}
			return []message.ID{first, second}
		}},
		{"message_due_as_the_lane_retires", func(t *testing.T, e *Engine, sink *recSink) []message.ID {
			first := schedule(t, e, "a", time.Second, "1")
			time.Sleep(2 * time.Second)
			synctest.Wait()
			st := laneOf(t, e, "a")
			if st.l == nil || st.held != 0 {
				t.Fatalf("after the first delivery: lane %+v, want a live idle lane", st)
			}
			// Due at the very millisecond the lane is due to retire: the
			// driver fires before it retires lanes, so the lane stays.
			at := time.UnixMilli(st.idleSince + idle.Milliseconds())
			id, err := e.Schedule(context.Background(), Request{Topic: "a", At: at, Body: []byte("2")})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(at) + time.Second)
			synctest.Wait()
			if now := laneOf(t, e, "a"); now.l != st.l {
				t.Fatalf("the lane was replaced (%p -> %p) though a message fired as it was due to retire", st.l, now.l)
			}
			return []message.ID{first, id}
		}},
		{"failing_sink_keeps_its_lane", func(t *testing.T, e *Engine, sink *recSink) []message.ID {
			sink.mu.Lock()
			sink.fail = map[string]int{"a": 40} // ~45 s of retries at 50 ms doubling to 1 s
			sink.mu.Unlock()
			id := schedule(t, e, "a", time.Second, "1")
			time.Sleep(time.Second + 3*idle)
			synctest.Wait()
			if st := laneOf(t, e, "a"); st.l == nil || st.held == 0 {
				t.Fatalf("while the sink fails: lane %+v, want a live lane holding the message", st)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			return []message.ID{id}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sink := &recSink{}
				e := openEngine(t, t.TempDir(), sink, func(o *Options) {
					o.LaneIdle = idle
					o.MaxSinkBackoff = time.Second
					o.Logger = slog.New(slog.DiscardHandler)
				})
				ids := tt.run(t, e, sink)
				checkDeliveries(t, sink.snapshot(), ids, time.Minute)
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestAckDuringCheckpointFsync holds a checkpoint's fsync in flight and
// checks that an Ack appends its record meanwhile (it used to wait for
// that fsync before it could even append), that it is answered once an
// fsync covers it, and that after a restart the acked message stays
// acked and the other one comes back.
func TestAckDuringCheckpointFsync(t *testing.T) {
	dir := t.TempDir()
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	q := openQ(t, dir, func(o *Options) {
		o.onAckSync = func(time.Duration) {
			if hold.CompareAndSwap(true, false) {
				held <- struct{}{}
				<-release
			}
		}
	})
	defer q.Close()
	deliver(t, q, "ck", "a", "b")
	ms := recv(t, q, "ck", 10, time.Hour)
	if len(ms) != 2 {
		t.Fatalf("received %d messages, want 2", len(ms))
	}
	tp, err := q.topic("ck", false)
	if err != nil || tp == nil {
		t.Fatalf("topic: %v", err)
	}

	hold.Store(true)
	ckDone := make(chan error, 1)
	go func() { ckDone <- tp.checkpoint() }()
	deadline := time.After(10 * time.Second)
	select {
	case <-held:
	case <-deadline:
		t.Fatal("the checkpoint's fsync never ran")
	}
	// The checkpoint's records are written and its fsync is held.
	ckEnd := tp.acks.WrittenOffset()

	ackDone := make(chan error, 1)
	go func() { ackDone <- q.AckReceipt(context.Background(), "ck", ms[0].Receipt) }()
	// The ack's record is appended behind the checkpoint while its fsync
	// is still in flight.
	for tp.acks.WrittenOffset() <= ckEnd {
		select {
		case err := <-ackDone:
			t.Fatalf("Ack returned (%v) while the fsync it needs was held", err)
		case <-deadline:
			close(release)
			t.Fatal("the Ack did not append its record while the checkpoint's fsync was in flight")
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-ckDone:
		t.Fatalf("checkpoint returned (%v) before its fsync finished", err)
	default:
	}
	close(release)
	for name, ch := range map[string]chan error{"checkpoint": ckDone, "ack": ackDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return after the fsync was released", name)
		}
	}

	// What a kill -9 now would leave: the checkpoint lists both messages
	// as outstanding and the ack record follows it, so only "b" comes
	// back (Close would write a newer checkpoint).
	img := t.TempDir()
	copyDir(t, dir, img)
	q2 := openQ(t, img, nil)
	defer q2.Close()
	got := bodies(drain(t, q2, "ck"))
	if len(got) != 1 || got[0] != "b" {
		t.Fatalf("after restart received %q, want [b]", got)
	}
}

package queue

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuf is a bytes.Buffer safe for a logger on several goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOldestReady: TopicStats.OldestReady is the delivery time of the
// oldest due message waiting to be received, whether never received or
// waiting to be received again, and 0 once none waits.
func TestOldestReady(t *testing.T) {
	var c stepClock
	q := openQ(t, t.TempDir(), c.opts)
	defer q.Close()
	if st := q.Stats()["t"]; st.OldestReady != 0 {
		t.Fatalf("OldestReady %d of an unknown topic, want 0", st.OldestReady)
	}
	ids := deliver(t, q, "t", "a", "b")
	for _, tc := range []struct {
		name string
		act  func()
		want int64
	}{
		{"never_received", func() {}, ids[0].DeliverAt},
		{"first_received", func() { recv(t, q, "t", 1, 30*time.Second) }, ids[1].DeliverAt},
		{"first_expired", func() { c.step(0, 31*time.Second); topicOf(t, q, "t").expire() }, ids[0].DeliverAt},
		{"all_received", func() { recv(t, q, "t", 2, 30*time.Second) }, 0},
	} {
		tc.act()
		if got := q.Stats()["t"].OldestReady; got != tc.want {
			t.Errorf("%s: OldestReady %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestExpiryAndDeadLetterLogged: a lease expiry is logged with topic, ID
// and attempt, a dead-lettering with its reason.
func TestExpiryAndDeadLetterLogged(t *testing.T) {
	var c stepClock
	var buf lockedBuf
	q := openQ(t, t.TempDir(), func(o *Options) {
		c.opts(o)
		o.MaxAttempts = 2
		o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	defer q.Close()
	ids := deliver(t, q, "t", "a")
	recv(t, q, "t", 1, 30*time.Second)
	c.step(0, 31*time.Second)
	topicOf(t, q, "t").expire()
	ms := recv(t, q, "t", 1, 30*time.Second)
	if len(ms) != 1 {
		t.Fatalf("received %d after the expiry, want 1", len(ms))
	}
	if err := q.NackReceipt(context.Background(), "t", ms[0].Receipt, NackOptions{Delay: time.Second, Reason: "db down"}); err != nil {
		t.Fatal(err)
	}
	log := buf.String()
	for _, want := range []string{
		`msg="queue: lease expired" topic=t id=` + ids[0].String() + ` attempt=1`,
		`msg="queue: message dead-lettered" topic=t to=t.dlq id=` + ids[0].String() + ` attempts=2 reason=max-attempts last_error="db down"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

package pebbledelay

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// t0 is the tests' clock: the queue's methods take now, and the tests
// call Tick themselves (open starts no loop).
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func openQueue(t *testing.T, dir string, o Options) *Queue {
	t.Helper()
	o.Dir = dir
	q, err := open(o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func closeQueue(t *testing.T, q *Queue) {
	t.Helper()
	close(q.closing) // no loops to stop
	if err := q.db.Close(); err != nil {
		t.Fatal(err)
	}
}

func req(topic, body string, at time.Time) *hourglassv1.ScheduleRequest {
	return &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(body),
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamp(at.UnixNano())}}
}

func schedule(t *testing.T, q *Queue, rs ...*hourglassv1.ScheduleRequest) []*hourglassv1.ScheduleResponse {
	t.Helper()
	res, err := q.Schedule(rs, t0)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func bodies(ms []*hourglassv1.Message) string {
	var b bytes.Buffer
	for _, m := range ms {
		fmt.Fprintf(&b, "%s/%d ", m.Body, m.Attempt)
	}
	return b.String()
}

func TestKeyOrderIsDeliveryOrder(t *testing.T) {
	keys := [][2]uint64{{0, 0}, {0, math.MaxUint64}, {1, 0}, {1 << 40, 5}, {1<<40 + 1, 0}, {math.MaxInt64, math.MaxUint64}}
	for i := 1; i < len(keys); i++ {
		a := appendKey(nil, int64(keys[i-1][0]), keys[i-1][1])
		b := appendKey(nil, int64(keys[i][0]), keys[i][1])
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("key %v does not sort before %v", keys[i-1], keys[i])
		}
		if bytes.Compare(a, timeBound(int64(keys[i-1][0]))) >= 0 {
			t.Errorf("key %v is not below the bound of its time", keys[i-1])
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add(appendKey(nil, t0.UnixNano(), 7))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, keyLen))
	f.Fuzz(func(t *testing.T, k []byte) {
		at, seq, err := parseKey(k)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if at < 0 {
			t.Fatalf("parsed a negative time %d", at)
		}
		if got := appendKey(nil, at, seq); !bytes.Equal(got, k) {
			t.Fatalf("key %x parsed as (%d, %d), which encodes as %x", k, at, seq, got)
		}
	})
}

func TestNothingEarly(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true})
	defer closeQueue(t, q)
	schedule(t, q, req("a", "late", t0.Add(100*time.Millisecond)), req("a", "soon", t0.Add(50*time.Millisecond)))
	c := q.addConsumer("a", 10, 10, time.Second)
	if next := q.Tick(t0); !next.Equal(t0.Add(50 * time.Millisecond)) {
		t.Fatalf("Tick at t0 wants the next at %v, want t0+50ms", next.Sub(t0))
	}
	if ms := q.take(c, t0); len(ms) != 0 {
		t.Fatalf("took %s before anything was due", bodies(ms))
	}
	q.Tick(t0.Add(50*time.Millisecond - 1))
	if ms := q.take(c, t0); len(ms) != 0 {
		t.Fatalf("took %s 1 ns early", bodies(ms))
	}
	if next := q.Tick(t0.Add(50 * time.Millisecond)); !next.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("next at %v, want t0+100ms", next.Sub(t0))
	}
	if got := bodies(q.take(c, t0)); got != "soon/0 " {
		t.Fatalf("took %q, want the message due at t0+50ms", got)
	}
}

func TestLeaseEndsThenAck(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true})
	defer closeQueue(t, q)
	schedule(t, q, req("a", "m", t0))
	c := q.addConsumer("a", 10, 10, time.Second)
	q.Tick(t0)
	first := q.take(c, t0)
	if len(first) != 1 {
		t.Fatalf("took %d messages, want 1", len(first))
	}
	if next := q.Tick(t0.Add(time.Second - 1)); !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next at %v, want the lease end t0+1s", next.Sub(t0))
	}
	if ms := q.take(c, t0); len(ms) != 0 {
		t.Fatalf("took %s while leased", bodies(ms))
	}
	q.Tick(t0.Add(time.Second))
	again := q.take(c, t0.Add(time.Second))
	if bodies(again) != "m/1 " {
		t.Fatalf("after the lease ended took %q, want m as attempt 1", bodies(again))
	}
	if r := q.ack([]string{first[0].Receipt}, t0.Add(time.Second)); r[0].Acked {
		t.Fatal("the ended lease's receipt acked")
	}
	if r := q.ack([]string{again[0].Receipt}, t0.Add(time.Second)); !r[0].Acked {
		t.Fatalf("ack: %s", r[0].Error)
	}
	if r := q.ack([]string{again[0].Receipt}, t0.Add(time.Second)); r[0].Acked {
		t.Fatal("a receipt acked twice")
	}
	q.Tick(t0.Add(time.Hour))
	if ms := q.take(c, t0.Add(time.Hour)); len(ms) != 0 {
		t.Fatalf("took %s after the ack", bodies(ms))
	}
}

func TestWriteBehindCursorIsReadyAtOnce(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true})
	defer closeQueue(t, q)
	schedule(t, q, req("a", "first", t0.Add(10*time.Millisecond)))
	q.Tick(t0.Add(20 * time.Millisecond)) // the cursor is at first's key
	schedule(t, q, req("a", "past", t0.Add(5*time.Millisecond)))
	c := q.addConsumer("a", 10, 10, time.Second)
	if got := bodies(q.take(c, t0)); got != "first/0 past/0 " {
		t.Fatalf("took %q without a Tick, want first and past", got)
	}
}

func TestRestartRedeliversOnlyUnacked(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, Options{Sync: true})
	for i := range 10 {
		schedule(t, q, req("a", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	c := q.addConsumer("a", 100, 100, time.Minute)
	q.Tick(t0.Add(time.Second))
	ms := q.take(c, t0.Add(time.Second))
	if len(ms) != 10 {
		t.Fatalf("took %d, want 10", len(ms))
	}
	var acks []string
	for _, m := range ms[:5] {
		acks = append(acks, m.Receipt)
	}
	for _, r := range q.ack(acks, t0.Add(time.Second)) {
		if !r.Acked {
			t.Fatal(r.Error)
		}
	}
	closeQueue(t, q)

	q = openQueue(t, dir, Options{Sync: true})
	defer closeQueue(t, q)
	c = q.addConsumer("a", 100, 100, time.Minute)
	q.Tick(t0.Add(time.Second))
	if got := bodies(q.take(c, t0.Add(time.Second))); got != "5/0 6/0 7/0 8/0 9/0 " {
		t.Fatalf("after the restart took %q, want the five unacked", got)
	}
}

func TestIdempotencyKeyStoresOnce(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true})
	defer closeQueue(t, q)
	r := req("a", "m", t0)
	r.IdempotencyKey = "k1"
	a := schedule(t, q, r)
	b := schedule(t, q, r)
	if a[0].Id != b[0].Id {
		t.Fatalf("a retry got id %s, the first %s", b[0].Id, a[0].Id)
	}
	c := q.addConsumer("a", 10, 10, time.Second)
	q.Tick(t0)
	if got := bodies(q.take(c, t0)); got != "m/0 " {
		t.Fatalf("took %q, want m once", got)
	}
}

func TestMaxReadyStallsTheScan(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true, MaxReady: 3})
	defer closeQueue(t, q)
	for i := range 5 {
		schedule(t, q, req("a", fmt.Sprint(i), t0))
	}
	q.Tick(t0)
	if q.nReady != 3 {
		t.Fatalf("%d ready in memory, want MaxReady 3", q.nReady)
	}
	c := q.addConsumer("a", 10, 10, time.Second)
	if got := bodies(q.take(c, t0)); got != "0/0 1/0 2/0 " {
		t.Fatalf("took %q", got)
	}
	select {
	case <-q.wake:
	default:
		t.Fatal("taking below MaxReady did not wake the stalled scan")
	}
	q.Tick(t0)
	if got := bodies(q.take(c, t0)); got != "3/0 4/0 " {
		t.Fatalf("took %q after the scan went on", got)
	}
}

func TestNack(t *testing.T) {
	q := openQueue(t, t.TempDir(), Options{Sync: true})
	defer closeQueue(t, q)
	schedule(t, q, req("a", "m", t0))
	c := q.addConsumer("a", 10, 10, time.Minute)
	q.Tick(t0)
	for _, tc := range []struct {
		name string
		nack *hourglassv1.ConsumeNack
		want string
	}{
		{"release_keeps_attempt", &hourglassv1.ConsumeNack{Release: true}, "m/0 "},
		{"nack_counts_attempt", &hourglassv1.ConsumeNack{}, "m/1 "},
		{"nack_with_delay_is_a_new_message", &hourglassv1.ConsumeNack{DelayMs: 100}, ""},
	} {
		ms := q.take(c, t0)
		if len(ms) != 1 {
			t.Fatalf("%s: took %d, want 1", tc.name, len(ms))
		}
		if r := q.nack(ms[0].Receipt, tc.nack, t0); !r.Acked {
			t.Fatalf("%s: %s", tc.name, r.Error)
		}
		if tc.want == "" {
			continue
		}
		ms = q.take(c, t0)
		if got := bodies(ms); got != tc.want {
			t.Fatalf("%s: took %q, want %q", tc.name, got, tc.want)
		}
		q.nack(ms[0].Receipt, &hourglassv1.ConsumeNack{Release: true}, t0)
	}
	q.Tick(t0.Add(99 * time.Millisecond))
	if ms := q.take(c, t0); len(ms) != 0 {
		t.Fatalf("took %s before the nack's delay", bodies(ms))
	}
	q.Tick(t0.Add(100 * time.Millisecond))
	if got := bodies(q.take(c, t0)); got != "m/0 " {
		t.Fatalf("took %q after the delay, want m as a new message", got)
	}
}

package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

func TestFreezesDue(t *testing.T) {
	one := NewFreezes([]Freeze{{At: 1000, Until: 1500, Seq: 100}})
	two := NewFreezes([]Freeze{{At: 1000, Until: 1500, Seq: 100}, {At: 3000, Until: 3200, Seq: 300}})
	lasting := NewFreezes([]Freeze{{At: 1000, Until: 1500, Seq: 100}, {At: 3000, Seq: 300}})
	cases := []struct {
		name     string
		f        *Freezes
		at       int64
		seq      uint64
		now      int64
		want     int64
		frozen   bool
		describe string
	}{
		{"none", nil, 2000, 1, 5000, 2000, false, "no freeze: its time"},
		{"stored_before_due_after", one, 2000, 50, 5000, 2500, false, "later by the freeze"},
		{"due_before_freeze", one, 900, 50, 5000, 900, false, "due when the freeze began: not shifted"},
		{"due_at_freeze_start", one, 1000, 50, 5000, 1000, false, "due as it began: not shifted"},
		{"stored_during", one, 1200, 150, 5000, 1200, false, "stored after it began: not shifted"},
		{"two_freezes", two, 2800, 50, 5000, 3500, false, "both: 500 + 200"},
		{"shift_reaches_second", two, 2600, 50, 5000, 3300, false, "2600+500=3100 > 3000: the second counts"},
		{"shift_misses_second", two, 2400, 50, 5000, 2900, false, "2400+500=2900 < 3000: the second does not"},
		{"between_freezes", two, 3100, 200, 5000, 3300, false, "stored between: the second only"},
		{"lasting_counts_to_now", lasting, 3100, 200, 4000, 4100, true, "the lasting freeze counts up to now"},
		{"lasting_stored_during", lasting, 3100, 350, 4000, 3100, false, "stored during the lasting one"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, frozen := c.f.Due(c.at, c.seq, c.now)
			if got != c.want || frozen != c.frozen {
				t.Errorf("Due(%d, seq %d) = %d, %v; want %d, %v (%s)", c.at, c.seq, got, frozen, c.want, c.frozen, c.describe)
			}
		})
	}
}

func TestFreezesBeginEnd(t *testing.T) {
	var f *Freezes
	f, err := f.Begin(1000, 10, time.Hour)
	if err != nil || !f.Frozen() {
		t.Fatalf("Begin: %v, frozen %v", err, f.Frozen())
	}
	if g, _ := f.Begin(2000, 20, time.Hour); g != f {
		t.Errorf("Begin while frozen changed the freezes")
	}
	f = f.End(1500)
	if f.Frozen() || f.List()[0] != (Freeze{At: 1000, Until: 1500, Seq: 10}) {
		t.Fatalf("End: %+v", f.List())
	}
	// An hour of max delay later, the first can no longer shift a
	// message: Begin drops it.
	g, err := f.Begin(1000+3_600_000+500+1, 30, time.Hour)
	if err != nil || len(g.List()) != 1 || g.List()[0].Seq != 30 {
		t.Errorf("Begin after the first can matter: %+v, %v; want only the new freeze", g.List(), err)
	}
	g, _ = f.Begin(5000, 30, time.Hour)
	if len(g.List()) != 2 {
		t.Errorf("Begin while the first still matters: %+v; want both", g.List())
	}
	list := make([]Freeze, MaxFreezes)
	for i := range list {
		list[i] = Freeze{At: int64(i * 10), Until: int64(i*10 + 5), Seq: uint64(i)}
	}
	if _, err := NewFreezes(list).Begin(100_000, 5000, time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("Begin past %d kept freezes: %v; want ErrInvalid", MaxFreezes, err)
	}
}

func TestFreezePolicy(t *testing.T) {
	f, _ := (*Freezes)(nil).Begin(1000, 10, time.Hour)
	p := Policy{Paused: true, Freezes: f}
	got, err := DecodePolicy(EncodePolicy(p))
	if err != nil || !got.Paused || !slices.Equal(got.Freezes.List(), f.List()) {
		t.Fatalf("round trip: %+v %v, %v", got, got.Freezes.List(), err)
	}
	if err := (Policy{Freezes: f}).Validate(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("frozen and not paused: %v; want ErrInvalid", err)
	}
	if err := (Policy{Paused: true, Freezes: f, Flow: Flow{Ordered: true}}).Validate(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("frozen with a flow policy: %v; want ErrInvalid", err)
	}
}

// TestFreezeMovesMessages freezes a topic holding messages stored before
// the freeze and one stored during it, resumes it after 10 s, and checks
// that a Receive hands out only what is due with the freeze counted and
// moves the others to their time through the engine.
func TestFreezeMovesMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		var mu sync.Mutex
		var moved []engine.Request
		q.SetReschedule(func(_ context.Context, r engine.Request) (message.ID, error) {
			mu.Lock()
			defer mu.Unlock()
			moved = append(moved, r)
			return message.ID{DeliverAt: r.At.UnixMilli(), Seq: 1 << 40}, nil
		})
		ctx := context.Background()
		t0 := time.Now().UnixMilli()
		msg := func(body string, dueIn time.Duration, seq uint64) engine.Delivery {
			id := message.ID{DeliverAt: t0 + dueIn.Milliseconds(), Seq: seq}
			return engine.Delivery{ID: id, Message: &message.Message{DeliverAt: id.DeliverAt, Topic: []byte("t"), Body: []byte(body)}}
		}
		f, _ := (*Freezes)(nil).Begin(t0, 100, time.Hour)
		if err := q.SetPolicy("t", Policy{Paused: true, Freezes: f}); err != nil {
			t.Fatal(err)
		}
		// As the engine hands them over while the topic is frozen: a
		// (stored before, due at 1 s), c (stored during, due at 2 s), b
		// (stored before, due at 5 s).
		batch := []engine.Delivery{msg("a", time.Second, 50), msg("c", 2*time.Second, 150), msg("b", 5*time.Second, 60)}
		if err := q.Deliver(ctx, "t", batch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if ms, _ := q.Receive(ctx, "t", 10, 0, 0); len(ms) != 0 {
			t.Fatalf("Receive while frozen = %q; want nothing", bodies(ms))
		}
		if due, frozen := q.Due("t", batch[0].ID); !frozen || due.UnixMilli() != t0+11_000 {
			t.Errorf("Due of a while frozen = %d, %v; want %d (as if resumed now), frozen", due.UnixMilli()-t0, frozen, 11_000)
		}
		if err := q.SetPolicy("t", Policy{Freezes: f.End(time.Now().UnixMilli())}); err != nil {
			t.Fatal(err)
		}
		ms, err := q.Receive(ctx, "t", 10, 0, 0)
		if err != nil || len(ms) != 1 || string(ms[0].Body) != "c" {
			t.Fatalf("Receive after resuming = %q, %v; want only c (stored during the freeze, due)", bodies(ms), err)
		}
		synctest.Wait() // the moves are done
		mu.Lock()
		got := map[string]int64{}
		for _, r := range moved {
			got[string(r.Body)] = r.At.UnixMilli() - t0
			if r.Origin.IsZero() || r.Topic != "t" {
				t.Errorf("moved %s: origin %v, topic %q; want its ID as origin, topic t", r.Body, r.Origin, r.Topic)
			}
		}
		mu.Unlock()
		if len(got) != 2 || got["a"] != 11_000 || got["b"] != 15_000 {
			t.Errorf("moved (ms after t0) = %v; want a at 11000 and b at 15000 (1 s and 5 s, 10 s of freeze later)", got)
		}
		if ms, _ := q.Receive(ctx, "t", 10, 0, 0); len(ms) != 0 {
			t.Errorf("Receive after the moves = %q; want nothing (a and b moved on)", bodies(ms))
		}
		if s := q.Stats()["t"]; s.FreezeMoved != 2 || s.Backlog != 0 {
			t.Errorf("stats: freeze moved %d, backlog %d; want 2 and 0", s.FreezeMoved, s.Backlog)
		}
	})
}

// TestFreezeMoveFailureRetries: a move the engine refuses leaves the
// message to the next Receive, which moves it; it is never handed out
// before its time.
func TestFreezeMoveFailureRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		var mu sync.Mutex
		calls := 0
		q.SetReschedule(func(_ context.Context, r engine.Request) (message.ID, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return message.ID{}, errors.New("disk full")
			}
			return message.ID{DeliverAt: r.At.UnixMilli(), Seq: 1 << 40}, nil
		})
		ctx := context.Background()
		t0 := time.Now().UnixMilli()
		f, _ := (*Freezes)(nil).Begin(t0, 100, time.Hour)
		id := message.ID{DeliverAt: t0 + 1000, Seq: 5}
		if err := q.Deliver(ctx, "t", []engine.Delivery{{ID: id, Message: &message.Message{DeliverAt: id.DeliverAt, Topic: []byte("t")}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := q.SetPolicy("t", Policy{Freezes: f.End(time.Now().UnixMilli())}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if ms, _ := q.Receive(ctx, "t", 10, 0, 0); len(ms) != 0 {
				t.Fatalf("Receive = %d messages; want none before %d", len(ms), t0+6000)
			}
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		if calls != 2 || q.Stats()["t"].FreezeMoved != 1 {
			t.Errorf("moves tried %d, moved %d; want 2 tries, 1 moved", calls, q.Stats()["t"].FreezeMoved)
		}
	})
}

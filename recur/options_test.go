package recur

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// settleSink is a sink that holds what it is handed until the test
// settles it (a Settler, as the queue is).
type settleSink struct {
	sink
	smu     sync.Mutex
	settled map[message.ID]bool
	held    map[message.ID]string // what Deliver passed: ID → headers seen
}

func (s *settleSink) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	s.smu.Lock()
	for _, d := range batch {
		h := ""
		if message.HeaderValue(d.Message.Headers, HeldHeader) != "" {
			h = HeldHeader
		}
		s.held[d.ID] = h
	}
	s.smu.Unlock()
	return s.sink.Deliver(ctx, topic, batch)
}

func (s *settleSink) Settled(_ context.Context, _ string, id message.ID) (bool, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.settled[id], nil
}

// settleAll settles everything handed over so far.
func (s *settleSink) settleAll() {
	s.smu.Lock()
	defer s.smu.Unlock()
	for id := range s.held {
		s.settled[id] = true
	}
}

func openWith(t *testing.T, dir string, out engine.Sink) node {
	t.Helper()
	sch := New(out, slog.New(slog.DiscardHandler), time.Now())
	eng, err := engine.Open(engine.Options{Dir: dir, Sink: sch, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
		CommitlogSegmentSize: 1 << 20, IdempotencyWindow: 10 * time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sch.Attach(eng)
	<-eng.Ready()
	return node{eng, sch}
}

func occurrences(gs []got) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.occ)
	}
	return out
}

// clock is the synctest bubble's time at second s after it started
// (2000-01-01T00:00:00Z, a Saturday).
func clock(s int) string {
	return time.Date(2000, 1, 1, 0, 0, s, 0, time.UTC).Format(time.RFC3339Nano)
}

func TestJitterOf(t *testing.T) {
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC).UnixMilli()
	if d := JitterOf("a", at, 0); d != 0 {
		t.Errorf("no jitter: %v", d)
	}
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := JitterOf("report", at+int64(i)*60_000, 5000)
		if d < 0 || d > 5*time.Second || d%time.Millisecond != 0 {
			t.Fatalf("JitterOf = %v: want whole ms from 0 to 5s", d)
		}
		if d != JitterOf("report", at+int64(i)*60_000, 5000) {
			t.Fatal("JitterOf is not deterministic")
		}
		seen[d] = true
	}
	if len(seen) < 150 {
		t.Errorf("200 occurrences took %d distinct offsets; want them spread", len(seen))
	}
	if JitterOf("a", at, 5000) == JitterOf("b", at, 5000) && JitterOf("c", at, 5000) == JitterOf("d", at, 5000) {
		t.Error("schedules of one spec get one offset")
	}
}

// Each occurrence is delivered at its time plus its jitter: never
// before, and not at the spec's time for all.
func TestJitterDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &sink{}
		n := open(t, t.TempDir(), out)
		defer n.eng.Close()
		ctx := context.Background()
		for _, name := range []string{"a", "b", "c"} {
			if _, err := n.sch.Create(ctx, &Def{Name: name, Topic: "t", Spec: "*/10 * * * * *", JitterMs: 4000, Body: []byte(name)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(65 * time.Second)
		synctest.Wait()
		gs := out.snapshot()
		if len(gs) != 18 {
			t.Fatalf("%d deliveries, want 3 schedules × 6", len(gs))
		}
		late := 0
		for _, g := range gs {
			occ, _ := time.Parse(time.RFC3339Nano, g.occ)
			want := occ.Add(JitterOf(g.body, occ.UnixMilli(), 4000))
			if g.at.Before(want) || g.at.After(want.Add(50*time.Millisecond)) {
				t.Errorf("%s@%s delivered at %s; want at its jittered time %s", g.body, g.occ, g.at, want)
			}
			if want.After(occ) {
				late++
			}
		}
		if late < 12 {
			t.Errorf("only %d of 18 occurrences were offset", late)
		}
	})
}

// The overlap policies: Skip drops an occurrence while the previous one
// is not settled; BufferOne holds one and delivers it once the previous
// one is settled, dropping those that come meanwhile, across a restart.
func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		overlap Overlap
		// What is delivered: the occurrences (seconds after the start)
		// and whether each is a held copy.
		want     []string
		wantHeld int
		skipped  int64
	}{
		{"allow", Allow, []string{clock(10), clock(20), clock(30), clock(40), clock(50)}, 0, 0},
		// 10 delivered; 20, 30 skipped (10 settles at 35); 40, 50.
		{"skip", SkipOverlap, []string{clock(10), clock(40), clock(50)}, 0, 2},
		// 10 delivered; 20 held, 30 skipped; 10 settles at 35, and 20
		// goes at its next check; 40 is held until 20 settles at 40, and
		// goes at its next check; 50.
		{"buffer_one", BufferOne, []string{clock(10), clock(20), clock(40), clock(50)}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				out := &settleSink{settled: map[message.ID]bool{}, held: map[message.ID]string{}}
				n := openWith(t, dir, out)
				ctx := context.Background()
				if _, err := n.sch.Create(ctx, &Def{Name: "s", Topic: "t", Spec: "*/10 * * * * *", Overlap: tc.overlap}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(35 * time.Second)
				synctest.Wait()
				out.settleAll()
				n.eng.Close()
				n = openWith(t, dir, out) // what it holds is durable
				defer n.eng.Close()
				for range 3 {
					time.Sleep(5 * time.Second)
					synctest.Wait()
					out.settleAll()
				}
				time.Sleep(7 * time.Second) // to 57 s
				synctest.Wait()
				gs := out.snapshot()
				if got := occurrences(gs); !slices.Equal(got, tc.want) {
					t.Fatalf("delivered %q, want %q", got, tc.want)
				}
				held := 0
				for _, h := range out.held {
					if h != "" {
						held++
					}
				}
				if held != tc.wantHeld {
					t.Errorf("%d held copies delivered, want %d", held, tc.wantHeld)
				}
				for _, g := range gs {
					if occ, _ := time.Parse(time.RFC3339Nano, g.occ); g.at.Before(occ) {
						t.Errorf("%s delivered early, at %s", g.occ, g.at)
					}
				}
				in, err := n.sch.Get(ctx, "s", 1)
				if err != nil || in.Def.Skipped != tc.skipped || in.Def.Fired != int64(len(tc.want)) || in.Def.BufferedMs != 0 {
					t.Fatalf("Get = %+v, %v; want skipped %d, fired %d, none held", in.Def, err, tc.skipped, len(tc.want))
				}
			})
		})
	}
}

// storeCalendar stores a calendar as the calendar RPCs do.
func storeCalendar(t *testing.T, eng *engine.Engine, name, value string) {
	t.Helper()
	if err := eng.Control(context.Background(), message.Control{Kind: message.ControlCalendar, Name: []byte(name), Value: []byte(value)}); err != nil {
		t.Fatal(err)
	}
}

// A schedule with a calendar: Skip leaves out the occurrences outside its
// working time, Shift moves each to the next working instant (merging the
// ones up to it); a spec that never meets working time is refused with
// Skip.
func TestCalendarPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy CalendarPolicy
		want   []string
	}{
		// Working 00:02-00:03 and 00:05-00:06 (UTC) every day; the spec
		// fires at second 15 of every minute.
		{"skip", CalendarSkip, []string{clock(135), clock(315)}},
		{"shift", CalendarShift, []string{clock(120), clock(135), clock(300), clock(315)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				out := &sink{}
				n := open(t, t.TempDir(), out)
				defer n.eng.Close()
				ctx := context.Background()
				storeCalendar(t, n.eng, "short", `{"sun":["00:02-00:03","00:05-00:06"],"sat":["00:02-00:03","00:05-00:06"]}`)
				d := &Def{Name: "c", Topic: "t", Spec: "15 * * * * *", Calendar: "short", CalendarPolicy: tc.policy}
				if _, err := n.sch.Create(ctx, d); err != nil {
					t.Fatal(err)
				}
				in, err := n.sch.Get(ctx, "c", 5)
				if err != nil || len(in.Next) != 5 {
					t.Fatalf("Get = %v, %v", in, err)
				}
				for i, w := range tc.want {
					if got := in.Next[i].Format(time.RFC3339Nano); got != w {
						t.Errorf("next[%d] = %s, want %s", i, got, w)
					}
				}
				time.Sleep(7 * time.Minute)
				synctest.Wait()
				if got := occurrences(out.snapshot()); !slices.Equal(got, tc.want) {
					t.Fatalf("delivered %q, want %q", got, tc.want)
				}
				if user, err := n.sch.CalendarUser(ctx, "short"); err != nil || user != "c" {
					t.Errorf("CalendarUser = %q, %v; want c", user, err)
				}
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		n := open(t, t.TempDir(), &sink{})
		defer n.eng.Close()
		ctx := context.Background()
		storeCalendar(t, n.eng, "office", `{"mon":["09:00-17:00"]}`)
		for _, tc := range []struct {
			d    *Def
			want string
		}{
			{&Def{Name: "early", Topic: "t", Spec: "30 8 * * *", Calendar: "office"}, "falls in the working time"},
			{&Def{Name: "nocal", Topic: "t", Spec: "@daily", Calendar: "nope"}, "no such calendar"},
			{&Def{Name: "pol", Topic: "t", Spec: "@daily", Calendar: "office", CalendarPolicy: "move"}, "calendar policy"},
			{&Def{Name: "pol2", Topic: "t", Spec: "@daily", CalendarPolicy: CalendarShift}, "without a calendar"},
			{&Def{Name: "ov", Topic: "t", Spec: "@daily", Overlap: "queue"}, "overlap policy"},
			{&Def{Name: "jit", Topic: "t", Spec: "@daily", JitterMs: MaxJitter.Milliseconds() + 1}, "jitter"},
		} {
			if _, err := n.sch.Create(ctx, tc.d); !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("Create %s = %v; want ErrInvalid saying %q", tc.d.Name, err, tc.want)
			}
		}
		if _, err := n.sch.Create(ctx, &Def{Name: "early", Topic: "t", Spec: "30 8 * * *", Calendar: "office", CalendarPolicy: CalendarShift}); err != nil {
			t.Errorf("with Shift the same spec is fine: %v", err)
		}
	})
}

// Backfill stores one message per occurrence of a past range that has
// none (before the schedule existed), none for the live ones, and nothing
// when run again.
func TestBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &sink{}
		time.Sleep(time.Minute) // the range before the schedule
		n := open(t, t.TempDir(), out)
		defer n.eng.Close()
		ctx := context.Background()
		if _, err := n.sch.Create(ctx, &Def{Name: "b", Topic: "t", Spec: "*/10 * * * * *"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(35 * time.Second) // live: 1:10, 1:20, 1:30
		synctest.Wait()
		from, to := time.Now().Add(-85*time.Second), time.Now() // 0:10 up to 1:35
		for i, want := range []Backfilled{{Stored: 6, Existing: 3}, {Existing: 9}} {
			got, err := n.sch.Backfill(ctx, "b", from, to)
			if err != nil || got != want {
				t.Fatalf("Backfill #%d = %+v, %v; want %+v", i+1, got, err, want)
			}
			synctest.Wait()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		var want []string
		for s := 10; s <= 90; s += 10 {
			want = append(want, clock(s))
		}
		got := occurrences(out.snapshot())
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("delivered %q, want each of %q once", got, want)
		}
		for _, tc := range []struct {
			name     string
			from, to time.Time
			want     string
		}{
			{"future", from, time.Now().Add(time.Second), "after now"},
			{"empty", to, to, "before to"},
			{"too_many", time.Now().Add(-200000 * time.Second), time.Now(), "more than 10000"},
		} {
			if _, err := n.sch.Backfill(ctx, "b", tc.from, tc.to); !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("%s: Backfill = %v; want ErrInvalid saying %q", tc.name, err, tc.want)
			}
		}
		if _, err := n.sch.Backfill(ctx, "none", from, to); !errors.Is(err, ErrNotFound) {
			t.Errorf("Backfill of an unknown schedule = %v", err)
		}
	})
}

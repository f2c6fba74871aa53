package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/recur"
)

// occurrence is one delivered occurrence of a recurring schedule.
type occurrence struct {
	id   message.ID
	at   time.Time // the occurrence's time
	got  time.Time // when the sink got it
	name string
}

// occurrences lists what rec got of schedule name, by occurrence time.
func (s *recordSink) occurrences(name string) []occurrence {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []occurrence
	for id, hs := range s.hdrs {
		if message.HeaderValue(hs, recur.ScheduleHeader) != name {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, message.HeaderValue(hs, recur.OccurrenceHeader))
		if err != nil {
			panic(err)
		}
		out = append(out, occurrence{id: id, at: at, got: s.at[id], name: name})
	}
	slices.SortFunc(out, func(a, b occurrence) int { return a.at.Compare(b.at) })
	return out
}

// gateSink passes deliveries on to next, except that once armed it holds
// the first batch holding an occurrence until its context ends (the node
// stops), as a node killed in the middle of a delivery would: the
// occurrence's next one is armed, the occurrence is not recorded done.
type gateSink struct {
	next    engine.Sink
	armed   atomic.Bool
	once    sync.Once
	held    chan occurrence
	release chan struct{}
}

func (g *gateSink) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	if g.armed.Load() {
		for _, d := range batch {
			if message.HeaderValue(d.Message.Headers, recur.ScheduleHeader) == "" {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, message.HeaderValue(d.Message.Headers, recur.OccurrenceHeader))
			held := false
			g.once.Do(func() { held = true })
			if held {
				g.held <- occurrence{id: d.ID, at: at}
				<-ctx.Done()
				return ctx.Err()
			}
		}
	}
	return g.next.Deliver(ctx, topic, batch)
}

// checkOccurrences fails unless the occurrences os are on an every-second
// grid with none missing (fire-all), each delivered under one ID (no
// occurrence doubled), none early.
func checkOccurrences(t *testing.T, rec *recordSink, os []occurrence) {
	t.Helper()
	for i, o := range os {
		if n := rec.count(o.id); n != 1 {
			t.Errorf("occurrence %v (%v) delivered %d times", o.at.Format("15:04:05.000"), o.id, n)
		}
		if o.got.Before(o.at) {
			t.Errorf("occurrence %v delivered early, at %v", o.at.Format("15:04:05.000"), o.got.Format("15:04:05.000"))
		}
		if i == 0 {
			continue
		}
		switch d := o.at.Sub(os[i-1].at); {
		case d == 0:
			t.Errorf("occurrence %v doubled: IDs %v and %v", o.at.Format("15:04:05.000"), os[i-1].id, o.id)
		case d != time.Second:
			t.Errorf("occurrences %v then %v: %v apart; want 1s (fire-all misses none)", os[i-1].at.Format("15:04:05.000"), o.at.Format("15:04:05.000"), d)
		}
	}
}

// TestSchedules: on a 4-partition cluster, recurring schedules are
// created, read and listed as on one node (cron in a zone, an end date,
// errors); an @every 1s fire-all schedule delivers each occurrence once;
// its node stops in the middle of delivering one (after the next one was
// armed) and another node takes over: that occurrence is delivered once,
// the next one armed once, none missing or doubled; pause cancels the
// armed occurrence and nothing fires until resume; delete cancels it for
// good.
func TestSchedules(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	rec := newRecordSink()
	gate := &gateSink{next: rec, held: make(chan occurrence, 1)}
	a, err := openNode(t, ns.ClientURL(), "a", 4, gate)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a never owned its 4 partitions", func() bool { return len(a.Owned()) == 4 })
	sa := a.Schedules(false)

	// Definitions: a cron spec in a zone with an end date.
	now := time.Now()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	end := now.Add(60 * time.Hour)
	next, err := sa.Create(ctx, &recur.Def{Name: "berlin", Topic: "reports", Spec: "30 9 * * *", TZ: "Europe/Berlin", EndMs: end.UnixMilli(), Body: []byte("r"),
		Headers: [][2]string{{"x", "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bt := next.In(berlin); bt.Hour() != 9 || bt.Minute() != 30 || !next.After(now) || next.After(now.Add(24*time.Hour)) {
		t.Errorf("berlin's first occurrence %v; want the next 09:30 in Berlin", bt)
	}
	in, err := sa.Get(ctx, "berlin", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Next) < 2 || len(in.Next) > 3 || !in.Next[0].Equal(next) {
		t.Errorf("berlin's next times %v; want 2 or 3 (60 h to its end) starting at %v", in.Next, next)
	}
	for _, nt := range in.Next {
		if nt.After(end) {
			t.Errorf("berlin's next time %v is past its end %v", nt, end)
		}
	}
	if p, _, _ := SplitID(in.Armed); in.Armed.IsZero() || p != SchedulePartition("berlin", 4) || in.Armed.DeliverAt != next.UnixMilli() {
		t.Errorf("berlin's armed occurrence %v (partition %d); want one due at %v on partition %d", in.Armed, p, next, SchedulePartition("berlin", 4))
	}
	if id, ok, err := a.Lookup(ctx, "reports", recur.OccurrenceKey("berlin", next.UnixMilli()), false); err != nil || !ok || id != in.Armed {
		t.Errorf("lookup of the armed occurrence's key = %v, %v, %v; want %v", id, ok, err, in.Armed)
	}
	if _, err := sa.Create(ctx, &recur.Def{Name: "berlin", Topic: "reports", Spec: "@daily"}); !errors.Is(err, recur.ErrExists) {
		t.Errorf("Create of a taken name: %v; want ErrExists", err)
	}
	if _, err := sa.Create(ctx, &recur.Def{Name: "bad", Topic: "t", Spec: "61 * * * *"}); !errors.Is(err, recur.ErrSpec) {
		t.Errorf("Create with minute 61: %v; want ErrSpec", err)
	}
	if _, err := sa.Update(ctx, &recur.Def{Name: "nope", Topic: "t", Spec: "@daily"}); !errors.Is(err, recur.ErrNotFound) {
		t.Errorf("Update of an unknown name: %v; want ErrNotFound", err)
	}
	if _, err := a.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Headers: []message.Header{{Key: []byte(recurPutHeader), Value: []byte("x")}}}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("a Schedule with the header %s: %v; want ErrInvalid", recurPutHeader, err)
	}

	// Occurrences every second, then a takeover in the middle of one.
	if _, err := sa.Create(ctx, &recur.Def{Name: "tick", Topic: "t", Spec: "@every 1s", Misfire: recur.FireAll}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "fewer than 3 ticks", func() bool { return len(rec.occurrences("tick")) >= 3 })
	gate.armed.Store(true)
	var held occurrence
	select {
	case held = <-gate.held:
	case <-ctx.Done():
		t.Fatal("no occurrence reached the sink")
	}
	// The next one is armed before the held one reached the sink.
	in, err = sa.Get(ctx, "tick", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Next) != 1 || !in.Next[0].Equal(held.at.Add(time.Second)) {
		t.Fatalf("tick's next time while %v is being delivered: %v; want %v", held.at, in.Next, held.at.Add(time.Second))
	}
	b, err := openNode(t, ns.ClientURL(), "b", 4, rec)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Logf("closing a: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("a did not close")
	}
	waitFor(t, 15*time.Second, "b never owned the 4 partitions", func() bool { return len(b.Owned()) == 4 })
	sb := b.Schedules(false)
	waitFor(t, 15*time.Second, "no tick 3 s after the held one", func() bool {
		os := rec.occurrences("tick")
		return len(os) > 0 && !os[len(os)-1].at.Before(held.at.Add(3*time.Second))
	})
	os := rec.occurrences("tick")
	checkOccurrences(t, rec, os)
	if !slices.ContainsFunc(os, func(o occurrence) bool { return o.id == held.id }) {
		t.Errorf("the occurrence held at the takeover (%v) was never delivered", held.at)
	}

	// Pause: the armed occurrence is cancelled, nothing fires until
	// Resume, while another schedule goes on.
	if _, err := sb.Create(ctx, &recur.Def{Name: "other", Topic: "t", Spec: "@every 1s"}); err != nil {
		t.Fatal(err)
	}
	before, err := sb.Get(ctx, "tick", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Pause(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	in, err = sb.Get(ctx, "tick", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Def.Paused || len(in.Next) != 0 || !in.Armed.IsZero() {
		t.Errorf("paused tick: paused %v, next %v, armed %v; want paused, none", in.Def.Paused, in.Next, in.Armed)
	}
	if f, _, err := b.Get(ctx, before.Armed, false); err != nil || (f.State != engine.StateCancelled && f.State != engine.StateDelivered) {
		t.Errorf("the occurrence armed before the pause: %v, %v; want cancelled (or delivered, if it was due)", f.State, err)
	}
	otherFrom := len(rec.occurrences("other"))
	waitFor(t, 10*time.Second, "other did not fire twice during the pause", func() bool { return len(rec.occurrences("other")) >= otherFrom+2 })
	for _, o := range rec.occurrences("tick") {
		if o.at.After(pausedAt) {
			t.Errorf("tick's occurrence at %v fired after the pause at %v", o.at.Format("15:04:05.000"), pausedAt.Format("15:04:05.000"))
		}
	}
	resumed, err := sb.Resume(ctx, "tick")
	if err != nil || !resumed.After(time.Now().Add(-time.Second)) {
		t.Fatalf("Resume = %v, %v; want the next second", resumed, err)
	}
	waitFor(t, 10*time.Second, "tick did not fire after resume", func() bool {
		os := rec.occurrences("tick")
		return os[len(os)-1].at.Equal(resumed)
	})

	// Delete: the armed occurrence is cancelled, none fires after.
	if err := sb.Delete(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	if _, err := sb.Get(ctx, "tick", 1); !errors.Is(err, recur.ErrNotFound) {
		t.Errorf("Get after Delete: %v; want ErrNotFound", err)
	}
	if err := sb.Delete(ctx, "tick"); !errors.Is(err, recur.ErrNotFound) {
		t.Errorf("Delete twice: %v; want ErrNotFound", err)
	}
	otherFrom = len(rec.occurrences("other"))
	waitFor(t, 10*time.Second, "other did not fire twice after the delete", func() bool { return len(rec.occurrences("other")) >= otherFrom+2 })
	for _, o := range rec.occurrences("tick") {
		if o.at.After(deletedAt) {
			t.Errorf("tick's occurrence at %v fired after the delete at %v", o.at.Format("15:04:05.000"), deletedAt.Format("15:04:05.000"))
		}
	}
	checkOccurrences(t, rec, rec.occurrences("other"))

	// List merges the partitions, by name, in pages, by topic.
	var names []string
	for i := range 7 {
		name := fmt.Sprintf("s%02d", i)
		names = append(names, name)
		if _, err := sb.Create(ctx, &recur.Def{Name: name, Topic: "listed", Spec: "@hourly", Paused: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	parts := map[int]bool{}
	for _, n := range names {
		parts[SchedulePartition(n, 4)] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the names %v hash to %d partition(s); the test wants several", names, len(parts))
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := sb.List(ctx, token, "listed", 3, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 || pages > 5 {
			t.Fatalf("page %d of %d schedules", pages, len(page))
		}
		for _, in := range page {
			got = append(got, in.Def.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(got, names) {
		t.Errorf("listed %v; want %v", got, names)
	}
	all, more, err := sb.List(ctx, "", "", 100, 1)
	if err != nil || more != "" {
		t.Fatal(more, err)
	}
	var allNames []string
	for _, in := range all {
		allNames = append(allNames, in.Def.Name)
	}
	if want := append([]string{"berlin", "other"}, names...); !slices.Equal(allNames, want) {
		t.Errorf("listed %v; want %v", allNames, want)
	}
	if _, _, err := sb.List(ctx, "~0~x", "", 10, 1); !errors.Is(err, recur.ErrInvalid) {
		t.Errorf("a forwarded token from a client: %v; want ErrInvalid", err)
	}
	if _, _, err := b.Schedules(true).List(ctx, "~9~", "", 10, 1); !errors.Is(err, recur.ErrInvalid) {
		t.Errorf("a forwarded token naming partition 9 of 4: %v; want ErrInvalid", err)
	}
	if page, _, err := b.Schedules(true).List(ctx, fmt.Sprintf("~%d~", SchedulePartition("berlin", 4)), "reports", 10, 1); err != nil || len(page) != 1 || page[0].Def.Name != "berlin" {
		t.Errorf("a forwarded List of berlin's partition: %v, %v", page, err)
	}
}

// TestSchedulesCompaction: a compaction purges the intake messages that
// held the definitions and copies the live ones; an Update stored while
// it runs, before its copies, is not undone by them, and a deleted
// schedule is not brought back: the next owner has the updated schedule,
// its armed occurrence and nothing else.
func TestSchedulesCompaction(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	js := jsConnect(t, ns.ClientURL())
	rec := newRecorder()
	var allow atomic.Bool
	var a *Node
	var updated atomic.Bool
	updateErr := make(chan error, 1)
	hooks := &testHooks{allowCompact: allow.Load, compactStage: func(_ int, stage string) error {
		if stage != "snapshot" || updated.Swap(true) {
			return nil
		}
		// An Update stored after the snapshot point, before the copies:
		// its write waits for the consumer, which the compaction holds.
		last := streamState(t, js, inStream(0)).LastSeq
		go func() {
			_, err := a.Schedules(false).Update(ctx, &recur.Def{Name: "far", Topic: "t", Spec: "0 0 1 7 *"})
			updateErr <- err
		}()
		waitFor(t, 10*time.Second, "the Update was not stored", func() bool { return streamState(t, js, inStream(0)).LastSeq > last })
		return nil
	}}
	a = openCompacting(t, ns.ClientURL(), "a", rec, hooks)
	sa := a.Schedules(false)
	if _, err := sa.Create(ctx, &recur.Def{Name: "far", Topic: "t", Spec: "0 0 1 1 *"}); err != nil {
		t.Fatal(err)
	}
	first, err := sa.Get(ctx, "far", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, createSeq, _ := SplitID(first.Armed)
	if _, err := sa.Create(ctx, &recur.Def{Name: "gone", Topic: "t", Spec: "@daily"}); err != nil {
		t.Fatal(err)
	}
	// kept is only in the create, which the compaction purges.
	if _, err := sa.Create(ctx, &recur.Def{Name: "kept", Topic: "t", Spec: "0 12 * * *", TZ: "Asia/Tokyo", Misfire: recur.Skip}); err != nil {
		t.Fatal(err)
	}
	keptBefore, err := sa.Get(ctx, "kept", 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	_, shortIDs := scheduleMix(t, a, 3, 0, time.Now().Add(time.Hour))
	waitFor(t, 10*time.Second, "short messages not delivered", func() bool { return rec.all(shortIDs) })
	allow.Store(true)
	waitFor(t, 15*time.Second, "no compaction", func() bool { return len(compactions(a)) > 0 })
	if err := <-updateErr; err != nil {
		t.Fatalf("the Update during the compaction: %v", err)
	}
	if cs := compactions(a)[0]; cs.L0 < createSeq {
		t.Fatalf("the compaction's snapshot point %d is below far's create at %d", cs.L0, createSeq)
	}
	if st := streamState(t, js, inStream(0)); st.FirstSeq <= createSeq {
		t.Fatalf("the intake stream starts at %d; the create at %d was not purged", st.FirstSeq, createSeq)
	}
	// The stream holds one copy of kept's definition, none of gone's.
	st := streamState(t, js, inStream(0))
	defs := map[string]int{}
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		raw, err := a.inStreams[0].GetMsg(ctx, seq)
		if err != nil {
			continue // purged or deleted
		}
		ms, err := DecodeIntake(raw.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ms {
			if c, _, ok, err := itemControl(&ms[i]); ok && err == nil {
				defs[string(c.Name)]++
			}
		}
	}
	if defs["kept"] != 1 || defs["gone"] != 0 {
		t.Errorf("control items in the compacted stream: %v; want kept once, gone never", defs)
	}
	allow.Store(false)
	want, err := sa.Get(ctx, "far", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want.Def.Spec != "0 0 1 7 *" || want.Next[0].Month() != time.July {
		t.Fatalf("far after the update on the compacting owner: %q, next %v", want.Def.Spec, want.Next)
	}

	// The next owner replays copies and what was stored after them.
	a.Close()
	b := openCompacting(t, ns.ClientURL(), "b", rec, &testHooks{allowCompact: func() bool { return false }})
	sb := b.Schedules(false)
	got, err := sb.Get(ctx, "far", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Def.Spec != want.Def.Spec || !slices.Equal(got.Next, want.Next) || got.Armed != want.Armed || got.Armed.IsZero() {
		t.Errorf("far on the next owner: %q next %v armed %v; want %q next %v armed %v", got.Def.Spec, got.Next, got.Armed, want.Def.Spec, want.Next, want.Armed)
	}
	if f, _, err := b.Get(ctx, first.Armed, false); err != nil || f.State != engine.StateCancelled {
		t.Errorf("far's occurrence before the update on the next owner: %v, %v; want cancelled", f.State, err)
	}
	kept, err := sb.Get(ctx, "kept", 3)
	if err != nil {
		t.Fatalf("kept, copied by the compaction, on the next owner: %v", err)
	}
	if kept.Def.TZ != "Asia/Tokyo" || kept.Def.Misfire != recur.Skip || !slices.Equal(kept.Next, keptBefore.Next) || kept.Armed != keptBefore.Armed {
		t.Errorf("kept on the next owner: %+v next %v armed %v; want %+v next %v armed %v", *kept.Def, kept.Next, kept.Armed, *keptBefore.Def, keptBefore.Next, keptBefore.Armed)
	}
	if _, err := sb.Get(ctx, "gone", 1); !errors.Is(err, recur.ErrNotFound) {
		t.Errorf("the deleted schedule on the next owner: %v; want ErrNotFound", err)
	}
	list, _, err := sb.List(ctx, "", "", 10, 1)
	if err != nil || len(list) != 2 || list[0].Def.Name != "far" || list[1].Def.Name != "kept" {
		var ns []string
		for _, in := range list {
			ns = append(ns, in.Def.Name)
		}
		t.Errorf("schedules on the next owner: %s, %v; want far,kept", strings.Join(ns, ","), err)
	}
}

package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
)

func keyed(topic, key, body string, delay time.Duration) Request {
	return Request{Topic: topic, IdempotencyKey: key, Body: []byte(body), Delay: delay}
}

// TestIdempotencyKey: a retried Schedule with the same topic and key gets
// the first message's ID and no second message, within a batch, across a
// restart, and until the window ends.
func TestIdempotencyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		window := func(o *Options) { o.IdempotencyWindow = time.Hour }
		e := openEngine(t, dir, sink, window)
		ctx := context.Background()
		a, err := e.Schedule(ctx, keyed("orders", "k1", "first", 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.Schedule(ctx, keyed("orders", "k1", "retry", 30*time.Second))
		if err != nil || again != a {
			t.Fatalf("retry with the same key: %v, %v; want %v", again, err, a)
		}
		other, _ := e.Schedule(ctx, keyed("payments", "k1", "other topic", 30*time.Second))
		if other == a {
			t.Fatal("the same key on another topic returned the first topic's message")
		}
		// In one batch: a new key twice, an old key, no key.
		ids, err := e.ScheduleBatch(ctx, []Request{keyed("orders", "k2", "b0", time.Minute), keyed("orders", "k2", "b1", time.Minute),
			keyed("orders", "k1", "b2", time.Minute), keyed("orders", "", "b3", time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != ids[1] || ids[2] != a || ids[3] == ids[0] {
			t.Fatalf("batch IDs %v: want [x x %v y]", ids, a)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// A restart: the catalog holds the key.
		e = openEngine(t, dir, sink, window)
		if got, err := e.Schedule(ctx, keyed("orders", "k1", "after restart", 30*time.Second)); err != nil || got != a {
			t.Fatalf("retry after a restart: %v, %v; want %v", got, err, a)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		bodies := map[string]int{}
		for _, g := range sink.snapshot() {
			bodies[g.body]++
		}
		for _, b := range []string{"first", "other topic", "b0", "b3"} {
			if bodies[b] != 1 {
				t.Errorf("%q delivered %d times, want once", b, bodies[b])
			}
		}
		for _, b := range []string{"retry", "b1", "b2", "after restart"} {
			if bodies[b] != 0 {
				t.Errorf("%q, a retry, was delivered", b)
			}
		}
		// After the window the key is free again.
		time.Sleep(time.Hour)
		if later, _ := e.Schedule(ctx, keyed("orders", "k1", "later", 0)); later == a {
			t.Error("the key still answered with the first message after the window")
		}
		e.Close()
	})
}

func TestIdempotencyKeyLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { o.IdempotencyWindow = time.Minute })
		defer e.Close()
		_, err := e.Schedule(context.Background(), keyed("t", strings.Repeat("k", MaxIdempotencyKey+1), "x", 0))
		if err == nil || !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("oversized key: %v", err)
		}
		hs := make([]message.Header, message.MaxHeaders)
		for i := range hs {
			hs[i] = message.Header{Key: []byte{'h', byte('a' + i%26), byte('a' + i/26)}}
		}
		_, err = e.Schedule(context.Background(), Request{Topic: "t", IdempotencyKey: "k", Headers: hs})
		if err == nil || !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("a full set of headers and a key: %v", err)
		}
	})
}

// TestIdempotencyWindowAcrossRestart: a key's window is measured from its
// Schedule's time, also after a restart (the catalog keeps it): a reuse after the
// window gets a new message, one within it the stored ID.
func TestIdempotencyWindowAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		window := func(o *Options) { o.IdempotencyWindow = 3 * time.Second }
		ctx := context.Background()
		e := openEngine(t, dir, sink, window)
		a, err := e.Schedule(ctx, keyed("orders", "k", "a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		b0, err := e.Schedule(ctx, keyed("orders", "k2", "b", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		e = openEngine(t, dir, sink, window) // 2 s after the Schedules: both keys within the window
		if got, err := e.Schedule(ctx, keyed("orders", "k2", "b again", time.Minute)); err != nil || got != b0 {
			t.Fatalf("reuse within the window after a restart: %v, %v; want %v", got, err, b0)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		e = openEngine(t, dir, sink, window) // 4 s after: the windows are over
		c, err := e.Schedule(ctx, keyed("orders", "k", "c", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if c == a {
			t.Fatal("a key reused after its window, across a restart, answered with the old ID")
		}
		if again, err := e.Schedule(ctx, keyed("orders", "k", "c again", time.Minute)); err != nil || again != c {
			t.Fatalf("reuse of the new message's key: %v, %v; want %v", again, err, c)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// And once more across a restart: the new message's window holds,
		// the old record of the same key does not end it early.
		time.Sleep(time.Second)
		e = openEngine(t, dir, sink, window)
		if got, err := e.Schedule(ctx, keyed("orders", "k", "c after restart", time.Minute)); err != nil || got != c {
			t.Fatalf("reuse 1 s after the new message, across a restart: %v, %v; want %v", got, err, c)
		}
		e.Close()
	})
}

// TestKeyIndexHoldsOnlyWhatIsNotStaged: the catalog is the one index of
// the keys; memory holds a key only until reput has staged it there
// (bounded by reput's lag, not by the window), and every key still
// answers, across a crash that leaves the last ones to route again, and
// across a delivery and the retirement of its bucket within the window.
func TestKeyIndexHoldsOnlyWhatIsNotStaged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		window := func(o *Options) { o.IdempotencyWindow = time.Hour }
		e := openEngine(t, dir, &recSink{}, window)
		ctx := context.Background()
		const n = 3000
		ids := make([]message.ID, n)
		for i := range n / 100 {
			reqs := make([]Request, 100)
			for j := range reqs {
				reqs[j] = keyed("orders", strconv.Itoa(i*100+j), "x", time.Duration(i%3)*time.Second)
			}
			got, err := e.ScheduleBatch(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			copy(ids[i*100:], got)
		}
		if err := e.WaitRouted(ctx); err != nil {
			t.Fatal(err)
		}
		// The next claim prunes what reput staged: at most that claim's.
		check := func(when string, e *Engine) {
			t.Helper()
			for i := 0; i < n; i += 7 {
				if got, err := e.Schedule(ctx, keyed("orders", strconv.Itoa(i), "again", time.Minute)); err != nil || got != ids[i] {
					t.Fatalf("%s: key %d = %v, %v; want %v", when, i, got, err, ids[i])
				}
			}
			e.keys.mu.Lock()
			held := len(e.keys.recent)
			e.keys.mu.Unlock()
			if held > 1 {
				t.Errorf("%s: %d keys held in memory after reput staged them, want at most the last claim's", when, held)
			}
		}
		check("same run", e)
		crashed := crashCopy(t, dir)
		// Delivered (due in 0-2 s) and their buckets retired: the keys
		// stay while their window lasts.
		time.Sleep(time.Minute)
		synctest.Wait()
		schedule(t, e, "other", time.Hour, "a checkpoint, which sweeps the catalog")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if segs := len(e.reput.Segments()); segs != 1 {
			t.Fatalf("%d segments left, want only the other message's", segs)
		}
		check("after delivery and retirement", e)
		e.Close()
		e = openEngine(t, crashed, &recSink{}, window)
		check("after a crash", e)
		e.Close()
	})
}

// TestKeyIndexEmptiesAfterABurst: once reput has staged the keys of a
// burst of keyed Schedules, memory holds none of them, though no Schedule
// follows to prune them, and what held them is given back.
func TestKeyIndexEmptiesAfterABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { o.IdempotencyWindow = time.Hour })
		defer e.Close()
		ctx := context.Background()
		const n = 3000
		for i := range n / 100 {
			reqs := make([]Request, 100)
			for j := range reqs {
				reqs[j] = keyed("orders", strconv.Itoa(i*100+j), "x", time.Hour)
			}
			if _, err := e.ScheduleBatch(ctx, reqs); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.WaitRouted(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.keys.mu.Lock()
		held, order, pruning := len(e.keys.recent), cap(e.keys.order), e.keys.pruning
		e.keys.mu.Unlock()
		if held != 0 || order >= minShrink || pruning {
			t.Fatalf("after reput staged %d keys: %d held, room for %d in order, pruning %v; want none, under %d, false", n, held, order, pruning, minShrink)
		}
		if got, err := e.Schedule(ctx, keyed("orders", "7", "again", time.Minute)); err != nil || got.IsZero() {
			t.Fatalf("a key staged and pruned: %v, %v", got, err)
		}
	})
}

// A key the catalog holds without its arrival time (written by a build
// before it was kept) counts from the earlier of its delivery time and
// the start.
func TestKeyWithoutArrivalTime(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	hit := catalog.KeyHit{ID: message.ID{DeliverAt: now.Add(time.Hour).UnixMilli(), Seq: 9}, OK: true}
	store := keyStore{keysAt: func() int64 { return 0 }, waitKeys: func(context.Context, int64) error { return nil },
		lookup: func(keys []string, hits []catalog.KeyHit) error {
			for i := range hits {
				hits[i] = hit
			}
			return nil
		}}
	for _, tc := range []struct {
		name  string
		since time.Duration // from the start to the retry
		found bool
	}{
		{"within_the_window_of_the_start", 5 * time.Minute, true},
		{"after_it", 11 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := now.Add(tc.since)
			k := newKeyIndex(10*time.Minute, func() time.Time { return at }, now, 0, store)
			b, id, found, err := k.claim(context.Background(), indexKey("orders", "k"))
			if err != nil || found != tc.found || found && id != hit.ID {
				t.Errorf("claim %v after the start: %v, found %v, %v", tc.since, id, found, err)
			}
			k.settle(b, message.ID{Seq: 100}, true)
		})
	}
}

// A batch that meets a key another batch holds takes back what it claimed
// and claims in key order, waiting as it goes: two batches with the same
// keys in opposite orders both finish, with the first holder's IDs, and
// a key twice in one batch still makes its second request the first's.
func TestClaimBatchWaitsInKeyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newMemKeyIndex()
		ctx := context.Background()
		k1, k2 := indexKey("orders", "k1"), indexKey("orders", "k2")
		x, _, _, err := k.claim(ctx, k2) // an append with k2 is under way
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ids  []message.ID
			kr   keyResults
			done bool
		}
		run := func(iks []string, seq uint64, out *result) {
			out.ids = make([]message.ID, len(iks))
			out.kr = keyResults{skip: make([]bool, len(iks)), sameAs: map[int]int{}}
			b, err := k.claimBatch(ctx, iks, out.ids, &out.kr)
			if err != nil {
				t.Error(err)
			}
			for i := range iks {
				if !out.kr.skip[i] {
					out.ids[i] = message.ID{DeliverAt: 1, Seq: seq + uint64(i)} // as appended
				}
			}
			k.settleBatch(b, out.ids, err == nil)
			out.done = true
		}
		var a, b result
		go run([]string{k1, k2, k1}, 100, &a)
		synctest.Wait() // a holds k1 and waits for k2
		go run([]string{k2, k1}, 200, &b)
		synctest.Wait() // b holds nothing and waits for k1
		if a.done || b.done {
			t.Fatalf("finished while k2 was held: a %v, b %v", a.done, b.done)
		}
		k.settle(x, message.ID{DeliverAt: 1, Seq: 7}, true)
		synctest.Wait()
		want2 := message.ID{DeliverAt: 1, Seq: 7}
		if a.kr.skip[0] || !a.kr.skip[1] || a.ids[1] != want2 || !a.kr.skip[2] || a.kr.sameAs[2] != 0 {
			t.Errorf("a: ids %v, skip %v, sameAs %v; want k1 claimed, k2 found as %v, the second k1 the same as the first", a.ids, a.kr.skip, a.kr.sameAs, want2)
		}
		if !b.kr.skip[0] || b.ids[0] != want2 || !b.kr.skip[1] || b.ids[1] != a.ids[0] {
			t.Errorf("b: ids %v, skip %v; want k2 as %v and k1 as a's %v", b.ids, b.kr.skip, want2, a.ids[0])
		}
	})
}

// Batches with the same keys in opposite orders, at once, never wait for
// each other forever, and each key names one message.
func TestScheduleBatchOppositeKeyOrders(t *testing.T) {
	e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { o.IdempotencyWindow = time.Hour })
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds, keys = 200, 20
	for r := range rounds {
		fwd := make([]Request, keys)
		for i := range fwd {
			fwd[i] = keyed("orders", fmt.Sprintf("r%d-k%d", r, i), "b", time.Hour)
		}
		rev := slices.Clone(fwd)
		slices.Reverse(rev)
		var idsF, idsR []message.ID
		var errF, errR error
		done := make(chan struct{})
		go func() { idsF, errF = e.ScheduleBatch(ctx, fwd); close(done) }()
		idsR, errR = e.ScheduleBatch(ctx, rev)
		<-done
		if errF != nil || errR != nil {
			t.Fatalf("round %d: %v, %v (a timeout means the batches waited for each other)", r, errF, errR)
		}
		for i := range keys {
			if idsF[i] != idsR[keys-1-i] {
				t.Fatalf("round %d: key %d named %v and %v", r, i, idsF[i], idsR[keys-1-i])
			}
		}
	}
}

// claim is claimBatch for one key (for tests): it returns the stored ID,
// or a batch the caller must complete with settle.
func (k *keyIndex) claim(ctx context.Context, ik string) (b *keyBatch, id message.ID, found bool, err error) {
	ids := make([]message.ID, 1)
	c := keyResults{skip: make([]bool, 1), sameAs: map[int]int{}}
	b, err = k.claimBatch(ctx, []string{ik}, ids, &c)
	return b, ids[0], c.skip[0], err
}

// settle is settleBatch for a batch of one key (claim's).
func (k *keyIndex) settle(b *keyBatch, id message.ID, ok bool) {
	k.settleBatch(b, []message.ID{id}, ok)
}

// newMemKeyIndex is a key index with a 10-minute window on a clock that
// stands still, whose catalog holds nothing and never stages a key.
func newMemKeyIndex() *keyIndex {
	now := time.Unix(1_800_000_000, 0)
	return newKeyIndex(10*time.Minute, func() time.Time { return now }, now, 0, keyStore{
		keysAt:   func() int64 { return 0 },
		waitKeys: func(context.Context, int64) error { return nil },
		lookup:   func([]string, []catalog.KeyHit) error { return nil },
	})
}

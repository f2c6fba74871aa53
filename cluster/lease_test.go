package cluster

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaseBuckets creates HG_OWNERS and HG_NODES with ttl.
func leaseBuckets(t *testing.T, js jetstream.JetStream, ttl time.Duration) (owners, nodes jetstream.KeyValue) {
	t.Helper()
	ctx := ctxT(t)
	var err error
	if owners, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "HG_OWNERS", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if nodes, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "HG_NODES", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	return owners, nodes
}

func held(ls *leases) map[int]bool {
	out := map[int]bool{}
	for p := range ls.held {
		out[p] = true
	}
	return out
}

func TestLeasesSpreadAndExclusive(t *testing.T) {
	ns := startNATS(t)
	js := jsConnect(t, ns.ClientURL())
	owners, nodes := leaseBuckets(t, js, time.Minute)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	const parts = 8
	a := newLeases(owners, nodes, Owner{Node: "a", URL: "http://a"}, parts, time.Minute, clock.now)
	b := newLeases(owners, nodes, Owner{Node: "b", URL: "http://b"}, parts, time.Minute, clock.now)
	ctx := ctxT(t)

	// Alone, a takes every partition.
	ch, err := a.step(ctx)
	if err != nil || len(ch.acquired) != parts || len(a.held) != parts {
		t.Fatalf("a alone: acquired %d, held %d, err %v; want %d", len(ch.acquired), len(a.held), err, parts)
	}
	// b sees two live nodes but nothing free.
	if ch, err = b.step(ctx); err != nil || len(ch.acquired) != 0 || ch.live != 2 {
		t.Fatalf("b: acquired %d, live %d, err %v; want 0 and 2", len(ch.acquired), ch.live, err)
	}
	// a gives up what is over its share (4); b takes it.
	ch, err = a.step(ctx)
	if err != nil || len(ch.release) != parts/2 || len(a.held) != parts/2 {
		t.Fatalf("a: released %d, holds %d, err %v; want %d each", len(ch.release), len(a.held), err, parts/2)
	}
	for _, l := range ch.release {
		// Given up, the lease is over at once, long before its deadline:
		// b may read the done stream as soon as the key is gone, so a
		// Cancel that a's partition finishes now must not answer
		// cancelled on a record b may not have read.
		if l.valid(clock.now()) {
			t.Fatalf("partition %d: a's lease is still valid after a gave it up", l.p)
		}
		if err := a.releaseKey(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if ch, err = b.step(ctx); err != nil || len(ch.acquired) != parts/2 {
		t.Fatalf("b: acquired %d, err %v; want %d", len(ch.acquired), err, parts/2)
	}
	ha, hb := held(a), held(b)
	for p := range parts {
		if ha[p] == hb[p] {
			t.Fatalf("partition %d: held by a %v, by b %v; want exactly one", p, ha[p], hb[p])
		}
		o, ok, err := owner(ctx, owners, p)
		if err != nil || !ok || (o.Node == "a") != ha[p] {
			t.Fatalf("partition %d: HG_OWNERS says %+v (%v, %v); a holds it: %v", p, o, ok, err, ha[p])
		}
	}
	// Renewals keep what each holds.
	clock.advance(20 * time.Second)
	for _, ls := range []*leases{a, b} {
		if ch, err = ls.step(ctx); err != nil || len(ch.lost) != 0 || len(ch.acquired) != 0 || len(ch.release) != 0 {
			t.Fatalf("%s renewing: %+v, %v; want no change", ls.self.Node, ch, err)
		}
	}
}

func TestLeaseDeadlineOnMonotonicClock(t *testing.T) {
	ns := startNATS(t)
	js := jsConnect(t, ns.ClientURL())
	const ttl = 30 * time.Second
	owners, nodes := leaseBuckets(t, js, ttl)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	a := newLeases(owners, nodes, Owner{Node: "a"}, 2, ttl, clock.now)
	ctx := ctxT(t)
	if _, err := a.step(ctx); err != nil || len(a.held) != 2 {
		t.Fatalf("held %d, err %v", len(a.held), err)
	}
	l := a.held[0]
	// Valid until two thirds of the TTL after the renewal was sent.
	clock.advance(ttl*2/3 - time.Millisecond)
	if !l.valid(clock.now()) {
		t.Fatal("lease invalid before 2/3 of the TTL")
	}
	if got := a.expired(); len(got) != 0 {
		t.Fatalf("expired %v before the deadline", got)
	}
	clock.advance(time.Millisecond)
	if l.valid(clock.now()) {
		t.Fatal("lease still valid at 2/3 of the TTL without a renewal")
	}
	if got := a.expired(); len(got) != 2 || len(a.held) != 0 {
		t.Fatalf("expired %v, still held %d; want [0 1] and none", got, len(a.held))
	}
}

func TestLeaseLostWhenOverwritten(t *testing.T) {
	ns := startNATS(t)
	js := jsConnect(t, ns.ClientURL())
	owners, nodes := leaseBuckets(t, js, time.Minute)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	a := newLeases(owners, nodes, Owner{Node: "a"}, 1, time.Minute, clock.now)
	ctx := ctxT(t)
	if _, err := a.step(ctx); err != nil || len(a.held) != 1 {
		t.Fatalf("held %d, err %v", len(a.held), err)
	}
	// Someone else wrote the key (an operator, or a node after expiry).
	if _, err := owners.Put(ctx, ownerKey(0), []byte(`{"node":"z"}`)); err != nil {
		t.Fatal(err)
	}
	ch, err := a.step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.lost) != 1 || ch.lost[0] != 0 || len(a.held) != 0 {
		t.Fatalf("lost %v, held %d; want [0] and none", ch.lost, len(a.held))
	}
	if len(ch.acquired) != 0 {
		t.Fatalf("took partition back while another node's key is there: %v", ch.acquired)
	}
}

func TestLeaseExpiresOnServerThenTaken(t *testing.T) {
	ns := startNATS(t)
	js := jsConnect(t, ns.ClientURL())
	const ttl = time.Second
	owners, nodes := leaseBuckets(t, js, ttl)
	a := newLeases(owners, nodes, Owner{Node: "a"}, 1, ttl, time.Now)
	b := newLeases(owners, nodes, Owner{Node: "b"}, 1, ttl, time.Now)
	ctx := ctxT(t)
	if _, err := a.step(ctx); err != nil || len(a.held) != 1 {
		t.Fatalf("a held %d, err %v", len(a.held), err)
	}
	start := time.Now()
	// a stops renewing (it died); b gets the partition once the key expired.
	waitFor(t, 10*time.Second, "b never took the partition after a stopped renewing", func() bool {
		_, err := b.step(ctx)
		return err == nil && len(b.held) == 1
	})
	if took := time.Since(start); took < ttl*2/3 {
		t.Fatalf("b took the partition %v after a's renewal; the key lives %v", took, ttl)
	}
	if a.held[0].valid(time.Now()) {
		t.Fatal("a's lease is still valid while b holds the partition")
	}
}

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Owner is the value of a partition's key in HG_OWNERS: who owns it and
// where its API answers.
type Owner struct {
	Node string `json:"node"`
	URL  string `json:"url"`
}

// lease is a held partition. Its deadline is on the node's monotonic clock:
// the send time of the last successful renewal plus two thirds of the TTL,
// so that the node stops using the partition at least a third of the TTL
// before the key can expire on the NATS servers (whose TTL starts only when
// they store the write, after it was sent).
type lease struct {
	p   int
	mu  sync.Mutex
	rev uint64    // guarded by mu
	end time.Time // guarded by mu; has a monotonic reading
}

func (l *lease) renewed(rev uint64, sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	l.rev, l.end = rev, sent.Add(ttl*2/3)
	l.mu.Unlock()
}

// giveUp ends the lease at once: the node is giving the partition up (to
// spread the work, or because it stops) and will delete its key, after
// which a new owner may read the done stream at once, well before the
// deadline. A Cancel or Reschedule of the partition still running then
// checks the lease after storing its record, and answers Unavailable
// (outcome unknown) instead of an answer the new owner may not know of.
func (l *lease) giveUp() {
	l.mu.Lock()
	l.end = time.Time{}
	l.mu.Unlock()
}

// valid reports whether the lease is still held at now.
func (l *lease) valid(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.end)
}

func (l *lease) revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// leases runs the ownership protocol of one node over the KV buckets
// HG_OWNERS (key per partition) and HG_NODES (heartbeat key per node).
// step is called by one goroutine at a time.
type leases struct {
	owners, nodes jetstream.KeyValue
	self          Owner
	selfKey       []byte // JSON of self
	nodeKey       string
	partitions    int
	ttl           time.Duration
	now           func() time.Time
	offset        int // where this node starts looking for free partitions

	held map[int]*lease // only touched by step's goroutine
}

func newLeases(owners, nodes jetstream.KeyValue, self Owner, partitions int, ttl time.Duration, now func() time.Time) *leases {
	v, _ := json.Marshal(self)
	h := fnv.New32a()
	h.Write([]byte(self.Node))
	return &leases{owners: owners, nodes: nodes, self: self, selfKey: v, nodeKey: nodeKey(self.Node),
		partitions: partitions, ttl: ttl, now: now, offset: int(h.Sum32() % uint32(partitions)), held: map[int]*lease{}}
}

// nodeKey makes a node ID a valid KV key: characters other than letters,
// digits, '-', '_' and '=' become '_'; a hash keeps two IDs apart that map
// to the same text.
func nodeKey(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		}
		return '_'
	}, id)
	return fmt.Sprintf("%s_%08x", clean, h.Sum32())
}

// change is what one step did.
type change struct {
	acquired []*lease
	lost     []int    // renewal failed or expired: stop at once
	release  []*lease // over this node's share: stop, then call release
	live     int
}

// share is how many partitions one of live nodes takes at most.
func share(partitions, live int) int {
	if live < 1 {
		live = 1
	}
	return (partitions + live - 1) / live
}

// step heartbeats, renews held leases, gives up what is over the fair
// share and takes free partitions up to it. Each request is bounded by a
// third of the TTL.
func (ls *leases) step(ctx context.Context) (change, error) {
	var ch change
	rctx, cancel := context.WithTimeout(ctx, ls.ttl/3)
	defer cancel()
	if _, err := ls.nodes.Put(rctx, ls.nodeKey, ls.selfKey); err != nil {
		// Renewals below fail the same way if NATS is gone; carry on so
		// that expired leases are dropped.
		err = fmt.Errorf("cluster: heartbeat: %w", err)
		ch.lost = ls.renew(ctx)
		return ch, err
	}
	ch.lost = ls.renew(ctx)
	live, err := ls.liveNodes(rctx)
	if err != nil {
		return ch, fmt.Errorf("cluster: listing live nodes: %w", err)
	}
	ch.live = live
	limit := share(ls.partitions, live)
	if len(ls.held) > limit {
		ps := make([]int, 0, len(ls.held))
		for p := range ls.held {
			ps = append(ps, p)
		}
		// Give up the ones furthest from this node's starting offset, so
		// that what a node keeps is stable.
		sort.Slice(ps, func(i, j int) bool { return ls.dist(ps[i]) < ls.dist(ps[j]) })
		for _, p := range ps[limit:] {
			ls.held[p].giveUp()
			ch.release = append(ch.release, ls.held[p])
			delete(ls.held, p)
		}
	}
	for i := 0; i < ls.partitions && len(ls.held) < limit; i++ {
		p := (ls.offset + i) % ls.partitions
		if ls.held[p] != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ls.ttl/3)
		sent := ls.now()
		rev, err := ls.owners.Create(cctx, ownerKey(p), ls.selfKey)
		cancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return ch, fmt.Errorf("cluster: taking partition %d: %w", p, err)
			}
			continue
		}
		l := &lease{p: p}
		l.renewed(rev, sent, ls.ttl)
		ls.held[p] = l
		ch.acquired = append(ch.acquired, l)
	}
	return ch, nil
}

func (ls *leases) dist(p int) int { return (p - ls.offset + ls.partitions) % ls.partitions }

// renew updates every held key with its last revision; a failure or an
// expired deadline loses the partition.
func (ls *leases) renew(ctx context.Context) (lost []int) {
	for p, l := range ls.held {
		if !l.valid(ls.now()) {
			lost = append(lost, p)
			delete(ls.held, p)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ls.ttl/3)
		sent := ls.now()
		rev, err := ls.owners.Update(cctx, ownerKey(p), ls.selfKey, l.revision())
		cancel()
		if err != nil {
			// Unreachable or overwritten: either way another node may own
			// it once the key expires. The deadline still covers a
			// transient failure until the next step retries.
			if !isTransient(err) || !l.valid(ls.now()) {
				lost = append(lost, p)
				delete(ls.held, p)
			}
			continue
		}
		l.renewed(rev, sent, ls.ttl)
	}
	sort.Ints(lost)
	return lost
}

// isTransient reports whether a renewal failed for want of an answer (the
// revision may still be ours) rather than because the key moved on.
func isTransient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return false
	}
	return !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyNotFound)
}

// expired drops and returns the held partitions whose deadline passed.
func (ls *leases) expired() []int {
	var out []int
	for p, l := range ls.held {
		if !l.valid(ls.now()) {
			out = append(out, p)
			delete(ls.held, p)
		}
	}
	sort.Ints(out)
	return out
}

// releaseKey deletes the key of a partition this node gave up (after it
// stopped it), if nobody else wrote it since.
func (ls *leases) releaseKey(ctx context.Context, l *lease) error {
	cctx, cancel := context.WithTimeout(ctx, ls.ttl/3)
	defer cancel()
	return ls.owners.Delete(cctx, ownerKey(l.p), jetstream.LastRevision(l.revision()))
}

// liveNodes counts the heartbeat keys that have not expired.
func (ls *leases) liveNodes(ctx context.Context) (int, error) {
	kl, err := ls.nodes.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for range kl.Keys() {
		n++
	}
	return max(n, 1), nil
}

// owner reads who owns partition p; ok is false if nobody does.
func owner(ctx context.Context, owners jetstream.KeyValue, p int) (Owner, bool, error) {
	e, err := owners.Get(ctx, ownerKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Owner{}, false, nil
	}
	if err != nil {
		return Owner{}, false, err
	}
	var o Owner
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		return Owner{}, false, fmt.Errorf("cluster: owner of partition %d: %q is not an owner record: %w", p, e.Value(), err)
	}
	return o, true, nil
}

// drop forgets a held partition; it reports whether it was held.
func (ls *leases) drop(p int) bool {
	_, ok := ls.held[p]
	delete(ls.held, p)
	return ok
}

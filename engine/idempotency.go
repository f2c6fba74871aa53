package engine

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
)

// IdempotencyHeader is the header that carries a Request's IdempotencyKey
// in the stored message (and so to consumers).
const IdempotencyHeader = message.IdempotencyKeyHeader

// IdempotencyTimeHeader is the header stored beside IdempotencyHeader: the
// engine's clock when the Schedule arrived, in UTC epoch milliseconds as
// decimal digits. A key's window is measured from it; the catalog keeps it
// with the key.
const IdempotencyTimeHeader = message.IdempotencyAtHeader

// MaxIdempotencyKey bounds Request.IdempotencyKey in bytes.
const MaxIdempotencyKey = 200

// keyIndex answers, per topic and idempotency key, whether a Schedule
// with the key arrived within Options.IdempotencyWindow, and which ID it
// was given, so that a producer that retries a Schedule (also across a
// crash) gets the first message's ID back instead of a second message.
//
// The catalog's Keys table is the one index of (topic, key): reput stages
// the key of every routed record in it, with the time its Schedule
// arrived. keyIndex holds in memory only what is not there yet: the keys
// claimed by Schedules being appended, and those appended and not yet
// staged (recent), so its size is bounded by reput's lag, not by the
// window or the number of keyed messages. After a restart, keyed
// Schedules wait until reput has staged the keys of every record the
// commitlog held at Open (reput.WaitKeys).
type keyIndex struct {
	window   time.Duration
	now      func() time.Time
	openedMs int64 // Open's clock: a key stored without its arrival time counts from here at latest
	openEnd  int64 // the commitlog's end at Open
	store    keyStore

	mu sync.Mutex
	// recent holds the keys claimed (pending) or appended since reput
	// last staged keys up to them; order holds the settled ones in the
	// order they settled, for pruning, and maxSeq the highest seq among
	// them.
	recent map[string]keyEntry
	order  []string
	maxSeq uint64
	// peak is the most entries recent held since it was made: a Go map
	// keeps the memory of its largest size, so pruneLocked makes it anew
	// once it holds a quarter of that.
	peak int
	// pruning is set while pruneStaged runs.
	pruning bool
	// caught is set once reput has staged the keys of what the commitlog
	// held at Open.
	caught bool
}

type keyEntry struct {
	id      message.ID
	pending chan struct{} // non-nil while the first Schedule with the key appends
	expires int64         // the end of its window, Unix ns
}

// keyStore is where the keys are durable: reput stages the key of every
// record it routes in the catalog.
type keyStore struct {
	// keysAt is reput.KeysAt: the keys of the records below it are in
	// the catalog.
	keysAt func() int64
	// waitKeys is reput.WaitKeys.
	waitKeys func(ctx context.Context, offset int64) error
	// lookup is catalog.LookupKeys.
	lookup func(keys []string, hits []catalog.KeyHit) error
}

func storeOf(cat *catalog.Catalog, r *reput.Reput) keyStore {
	return keyStore{keysAt: r.KeysAt, waitKeys: r.WaitKeys, lookup: cat.LookupKeys}
}

func newKeyIndex(window time.Duration, now func() time.Time, opened time.Time, openEnd int64, store keyStore) *keyIndex {
	return &keyIndex{window: window, now: now, openedMs: opened.UnixMilli(), openEnd: openEnd, store: store,
		recent: map[string]keyEntry{}}
}

func indexKey(topic, key string) string { return topic + "\x00" + key }

// pruneLocked forgets the settled keys reput has staged in the catalog,
// and those whose window is over, and gives back the memory of a map or
// a slice that held many more. k.mu is held.
func (k *keyIndex) pruneLocked(nowNs int64) {
	staged := uint64(k.store.keysAt())
	k.peak = max(k.peak, len(k.recent))
	i := 0
	for ; i < len(k.order); i++ {
		e, ok := k.recent[k.order[i]]
		if ok && e.pending == nil && e.id.Seq >= staged && nowNs < e.expires {
			break
		}
		if ok && e.pending == nil {
			delete(k.recent, k.order[i])
		}
	}
	k.order = k.order[i:]
	if n := len(k.recent); k.peak >= minShrink && n <= k.peak/4 {
		k.recent, k.peak = maps.Clone(k.recent), n
	}
	if n := len(k.order); cap(k.order) >= minShrink && n <= cap(k.order)/4 {
		k.order = slices.Clone(k.order)
	}
}

// minShrink is the size below which pruneLocked lets a map or slice be.
const minShrink = 1024

// settledLocked records that key ik names e (settled: not pending) until
// reput stages it, and makes sure that pruneStaged will forget it then.
// k.mu is held.
func (k *keyIndex) settledLocked(ik string, e keyEntry) {
	k.recent[ik] = e
	k.order = append(k.order, ik)
	k.maxSeq = max(k.maxSeq, e.id.Seq)
	if !k.pruning {
		k.pruning = true
		go k.pruneStaged()
	}
}

// pruneStaged waits until reput has staged every settled key and prunes
// them, again while more settle meanwhile, and ends when none is left or
// routing stopped. Without it the keys of a burst's last Schedules would
// stay in memory until the next keyed Schedule arrives.
func (k *keyIndex) pruneStaged() {
	for {
		k.mu.Lock()
		k.pruneLocked(k.now().UnixNano())
		target := int64(k.maxSeq) + 1
		if len(k.order) == 0 {
			k.pruning = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		// A store that returns without staging up to target (routing
		// stopped, or a test's catalog that stages nothing) leaves
		// nothing to wait for.
		if k.store.waitKeys(context.Background(), target) != nil || k.store.keysAt() < target {
			k.mu.Lock()
			k.pruning = false
			k.mu.Unlock()
			return
		}
	}
}

// keyBatch is what one ScheduleBatch claimed: the keys, each with the
// request it belongs to, and one channel for all of them that closes
// when the batch settles them, to wake the Schedules waiting on any.
type keyBatch struct {
	done   chan struct{}
	claims []keyClaim
}

// keyClaim is an idempotency key a batch claimed for request i.
type keyClaim struct {
	ik string
	i  int
}

// keyResults is claimBatch's answer for the requests of a batch that carry a
// key: skip[i] is set for a request not to append (ids[i] is the stored
// message's ID, or sameAs maps it to the earlier request of the batch with
// the same key).
type keyResults struct {
	skip   []bool
	sameAs map[int]int
}

// claimBatch looks up the keys iks (iks[i] is request i's index key, ""
// for none): a key that names a message within its window sets ids[i], a
// key already claimed by an earlier request of the batch makes the
// request the same as that one, and a free key is claimed for the batch.
// The caller must settle the batch (settleBatch), also after an error.
//
// A key another batch has claimed is waited for, until that batch
// settles. To wait without a deadlock (two batches each holding a key the
// other waits for), a batch that meets such a key takes back what it
// claimed in that round and then claims its keys one by one in key order,
// waiting as it goes: a batch only ever waits for a key above every key
// it holds, so no two batches wait for each other.
func (k *keyIndex) claimBatch(ctx context.Context, iks []string, ids []message.ID, c *keyResults) (*keyBatch, error) {
	b := &keyBatch{done: make(chan struct{})}
	if err := k.waitCaught(ctx); err != nil {
		return b, err
	}
	// The common case: no key of the batch is claimed elsewhere.
	k.mu.Lock()
	found, err := k.lookupLocked(iks)
	if err != nil {
		k.mu.Unlock()
		return b, err
	}
	nowNs := k.now().UnixNano()
	for i, ik := range iks {
		if ik != "" && k.claimLocked(b, ik, i, nowNs, found[i], ids, c) != nil {
			for _, cl := range b.claims {
				delete(k.recent, cl.ik) // no one saw them: the lock was held throughout
			}
			b.claims = b.claims[:0]
			clear(c.skip)
			clear(c.sameAs)
			k.mu.Unlock()
			return b, k.claimOrdered(ctx, b, iks, ids, c)
		}
	}
	k.mu.Unlock()
	return b, nil
}

// waitCaught waits, the first time, until reput has staged the keys of
// what the commitlog held at Open.
func (k *keyIndex) waitCaught(ctx context.Context) error {
	k.mu.Lock()
	caught := k.caught
	k.mu.Unlock()
	if caught {
		return nil
	}
	if err := k.store.waitKeys(ctx, k.openEnd); err != nil {
		return err
	}
	k.mu.Lock()
	k.caught = true
	k.mu.Unlock()
	return nil
}

// lookupLocked prunes what the catalog holds now and looks up in it the
// keys of iks that recent does not hold, in one read. k.mu is held: a key
// pruned meanwhile would be in neither. found[i] is request i's.
func (k *keyIndex) lookupLocked(iks []string) ([]catalog.KeyHit, error) {
	k.pruneLocked(k.now().UnixNano())
	found := make([]catalog.KeyHit, len(iks))
	var keys []string
	var at []int
	for i, ik := range iks {
		if _, ok := k.recent[ik]; ik != "" && !ok {
			keys, at = append(keys, ik), append(at, i)
		}
	}
	if len(keys) == 0 {
		return found, nil
	}
	hits := make([]catalog.KeyHit, len(keys))
	if err := k.store.lookup(keys, hits); err != nil {
		return nil, err
	}
	for j, h := range hits {
		found[at[j]] = h
	}
	return found, nil
}

// claimOrdered is claimBatch's way when another batch holds a key: the
// keys one at a time in key order (the first request of equal keys
// first), waiting on each one claimed elsewhere.
func (k *keyIndex) claimOrdered(ctx context.Context, b *keyBatch, iks []string, ids []message.ID, c *keyResults) error {
	order := make([]int, 0, len(iks))
	for i, ik := range iks {
		if ik != "" {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(iks[a], iks[b]) })
	one := make([]string, 1)
	for len(order) > 0 {
		k.mu.Lock()
		var wait chan struct{}
		for len(order) > 0 {
			i := order[0]
			one[0] = iks[i]
			found, err := k.lookupLocked(one)
			if err != nil {
				k.mu.Unlock()
				return err
			}
			if wait = k.claimLocked(b, iks[i], i, k.now().UnixNano(), found[0], ids, c); wait != nil {
				break
			}
			order = order[1:]
		}
		k.mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// claimLocked does claimBatch's work for request i's key ik at nowNs,
// stored names what the catalog holds of it (when recent does not), and
// returns the channel to wait on if another batch holds the key (nil
// otherwise). k.mu is held.
func (k *keyIndex) claimLocked(b *keyBatch, ik string, i int, nowNs int64, stored catalog.KeyHit, ids []message.ID, c *keyResults) chan struct{} {
	e, ok := k.recent[ik]
	if !ok && stored.OK && nowNs < k.expiry(stored) {
		e, ok = keyEntry{id: stored.ID}, true
	}
	if ok && e.pending == nil && e.expires != 0 && nowNs >= e.expires {
		ok = false // its window is over
	}
	switch {
	case !ok:
		// While pending, the entry's ID holds the claiming request.
		k.recent[ik] = keyEntry{pending: b.done, id: message.ID{Seq: uint64(i)}}
		b.claims = append(b.claims, keyClaim{ik, i})
	case e.pending == b.done:
		c.skip[i], c.sameAs[i] = true, int(e.id.Seq)
	case e.pending == nil:
		c.skip[i], ids[i] = true, e.id
	default:
		return e.pending
	}
	return nil
}

// expiry is the end of the window of a key the catalog holds, Unix ns. A
// key stored without its arrival time counts from the earlier of its
// delivery time and Open (a Schedule never arrives after its message is
// due, nor after the engine that stored it stopped).
func (k *keyIndex) expiry(h catalog.KeyHit) int64 {
	at := h.At
	if at == 0 {
		at = min(h.ID.DeliverAt, k.openedMs)
	}
	return time.UnixMilli(at).Add(k.window).UnixNano()
}

// settleBatch completes a batch's claims: with ok each key now names the
// ID of its request (ids), its window starting now; otherwise the claims
// are dropped and the Schedules waiting on them try themselves.
func (k *keyIndex) settleBatch(b *keyBatch, ids []message.ID, ok bool) {
	k.mu.Lock()
	if ok {
		exp := k.now().Add(k.window).UnixNano()
		for _, cl := range b.claims {
			k.settledLocked(cl.ik, keyEntry{id: ids[cl.i], expires: exp})
		}
	} else {
		for _, cl := range b.claims {
			delete(k.recent, cl.ik)
		}
	}
	k.mu.Unlock()
	close(b.done)
}

// moved makes the key of a rescheduled message (hs: its headers) name its
// replacement nid while its window lasts, until reput stages the
// replacement's key: a Schedule retried with the key gets the message
// that will be delivered.
func (k *keyIndex) moved(topic string, hs []message.Header, nid message.ID) {
	key, at := message.HeaderValue(hs, IdempotencyHeader), message.HeaderValue(hs, IdempotencyTimeHeader)
	ms, err := strconv.ParseInt(at, 10, 64)
	if key == "" || err != nil {
		return
	}
	ik := indexKey(topic, key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.recent[ik]; ok && e.pending != nil {
		return // a new Schedule with the key appends: its window is over
	}
	if exp := time.UnixMilli(ms).Add(k.window).UnixNano(); exp > k.now().UnixNano() {
		k.settledLocked(ik, keyEntry{id: nid, expires: exp})
	}
}

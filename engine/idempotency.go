package engine

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// IdempotencyHeader is the header that carries a Request's IdempotencyKey
// in the stored message (and so to consumers).
const IdempotencyHeader = "hourglass-idempotency-key"

// IdempotencyTimeHeader is the header stored beside IdempotencyHeader: the
// engine's clock when the Schedule arrived, in UTC epoch milliseconds as
// decimal digits. A key's window is measured from it, also for the keys a
// restart reads back from the commitlog.
const IdempotencyTimeHeader = "hourglass-idempotency-at"

// MaxIdempotencyKey bounds Request.IdempotencyKey in bytes.
const MaxIdempotencyKey = 200

// keyIndex remembers, per topic and idempotency key, the ID of the message
// scheduled with it, for Options.IdempotencyWindow from the time that
// Schedule arrived. After a restart it is rebuilt from the commitlog's
// retained records (loadKeys), each key with the time stored in its record
// (IdempotencyTimeHeader), so a producer that retries a Schedule whose
// answer it lost in a crash gets the first message's ID back instead of a
// second message, and a key whose window ended before the restart stays
// free.
type keyIndex struct {
	window time.Duration
	now    func() time.Time
	ready  chan struct{} // closed once loadKeys is done

	mu    sync.Mutex
	ids   map[string]keyEntry
	order []keyExpiry // insertion order, for expiry
	// arena holds the text of the keys in ids and order: strings that
	// point into a few large chunks instead of a heap object per key,
	// so that a collection marks a few hundred objects for millions of
	// keys (BenchmarkKeyIndexGC). A chunk lives while a key in it does.
	arena []byte
}

// arenaChunk is the size of a key arena chunk.
const arenaChunk = 64 << 10

type keyEntry struct {
	id      message.ID
	pending chan struct{} // non-nil while the first Schedule with the key appends
	expires int64         // the end of its window, Unix ns (a time.Time is 24 bytes, this 8)
}

type keyExpiry struct {
	key string
	at  int64 // Unix ns
}

func newKeyIndex(window time.Duration, now func() time.Time) *keyIndex {
	return &keyIndex{window: window, now: now, ready: make(chan struct{}), ids: map[string]keyEntry{}}
}

func indexKey(topic, key string) string { return topic + "\x00" + key }

// internLocked returns s in the arena: s itself if it is there already
// (in the current chunk; a claim's key when it settles). k.mu is held.
func (k *keyIndex) internLocked(s string) string {
	if len(s) == 0 {
		return s
	}
	if len(k.arena) > 0 {
		base := uintptr(unsafe.Pointer(&k.arena[0]))
		if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); p >= base && p+uintptr(len(s)) <= base+uintptr(len(k.arena)) {
			return s
		}
	}
	if cap(k.arena)-len(k.arena) < len(s) {
		k.arena = make([]byte, 0, max(arenaChunk, len(s)))
	}
	start := len(k.arena)
	k.arena = append(k.arena, s...) // within capacity: the chunk never moves
	return unsafe.String(&k.arena[start], len(s))
}

// expireLocked drops the keys older than the window. k.mu is held.
func (k *keyIndex) expireLocked(now time.Time) {
	i, ns := 0, now.UnixNano()
	for ; i < len(k.order) && ns >= k.order[i].at; i++ {
		// A key settled again since (a record read back after an older
		// one with the same key) keeps its later window.
		if e, ok := k.ids[k.order[i].key]; ok && e.pending == nil && ns >= e.expires {
			delete(k.ids, k.order[i].key)
		}
	}
	k.order = k.order[i:]
}

// keyBatch is what one ScheduleBatch claimed: the keys, each with the
// request it belongs to, and one channel for all of them that closes
// when the batch settles them, to wake the Schedules waiting on any.
type keyBatch struct {
	done   chan struct{}
	claims []keyClaim
}

// keyClaim is an idempotency key a batch claimed for request i (ik is
// the index's own copy of the key's text).
type keyClaim struct {
	ik string
	i  int
}

// keyResults is claimBatch's answer for the requests of a batch that carry a
// key: ids[i] is set for a key that names a stored message, and sameAs
// maps a request to the earlier one of the batch with the same key; both
// are skipped (not appended).
type keyResults struct {
	skip   []bool
	sameAs map[int]int
}

// claimBatch looks up the keys iks (iks[i] is request i's index key, ""
// for none) under one lock: a key that names a message sets ids[i], a key
// already claimed by an earlier request of the batch makes the request
// the same as that one, and a free key is claimed for the batch. The
// caller must settle the batch (settleBatch), also after an error.
//
// A key another batch has claimed is waited for, until that batch
// settles. To wait without a deadlock (two batches each holding a key the
// other waits for), a batch that meets such a key takes back what it
// claimed in that round and then claims its keys one by one in key order,
// waiting as it goes: a batch only ever waits for a key above every key
// it holds, so no two batches wait for each other.
func (k *keyIndex) claimBatch(ctx context.Context, iks []string, ids []message.ID, c *keyResults) (*keyBatch, error) {
	b := &keyBatch{done: make(chan struct{})}
	select {
	case <-k.ready:
	case <-ctx.Done():
		return b, ctx.Err()
	}
	// The common case: no key of the batch is claimed elsewhere.
	k.mu.Lock()
	now := k.now()
	k.expireLocked(now)
	nowNs := now.UnixNano()
	for i, ik := range iks {
		if ik != "" && k.claimLocked(b, ik, i, nowNs, ids, c) != nil {
			for _, cl := range b.claims {
				delete(k.ids, cl.ik) // no one saw them: the lock was held throughout
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
	for len(order) > 0 {
		k.mu.Lock()
		now := k.now()
		k.expireLocked(now)
		var wait chan struct{}
		for len(order) > 0 {
			if wait = k.claimLocked(b, iks[order[0]], order[0], now.UnixNano(), ids, c); wait != nil {
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

// claimLocked does claimBatch's work for request i's key ik at nowNs, and
// returns the channel to wait on if another batch holds the key (nil
// otherwise). k.mu is held.
func (k *keyIndex) claimLocked(b *keyBatch, ik string, i int, nowNs int64, ids []message.ID, c *keyResults) chan struct{} {
	e, ok := k.ids[ik]
	if ok && e.pending == nil && nowNs >= e.expires {
		ok = false // over; its expiry record is further on
	}
	switch {
	case !ok:
		ik = k.internLocked(ik)
		// While pending, the entry's ID holds the claiming request.
		k.ids[ik] = keyEntry{pending: b.done, id: message.ID{Seq: uint64(i)}}
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

// settleBatch completes a batch's claims: with ok each key now names the
// ID of its request (ids), its window starting now; otherwise the claims
// are dropped and the Schedules waiting on them try themselves.
func (k *keyIndex) settleBatch(b *keyBatch, ids []message.ID, ok bool) {
	k.mu.Lock()
	if ok {
		exp := k.now().Add(k.window).UnixNano()
		for _, cl := range b.claims {
			k.ids[cl.ik] = keyEntry{id: ids[cl.i], expires: exp}
			k.order = append(k.order, keyExpiry{cl.ik, exp})
		}
	} else {
		for _, cl := range b.claims {
			delete(k.ids, cl.ik)
		}
	}
	k.mu.Unlock()
	close(b.done)
}

// loadLocked adds a key loadKeys read back, for the Schedule of id that
// arrived at at: its indexKey text is built in the arena directly, and no
// claim waits on it (claims wait for ready). k.mu is held.
func (k *keyIndex) loadLocked(topic, key []byte, id message.ID, at time.Time) {
	n := len(topic) + 1 + len(key)
	if cap(k.arena)-len(k.arena) < n {
		k.arena = make([]byte, 0, max(arenaChunk, n))
	}
	start := len(k.arena)
	k.arena = append(append(append(k.arena, topic...), 0), key...) // indexKey's form; within capacity
	ik := unsafe.String(&k.arena[start], n)
	exp := at.Add(k.window).UnixNano()
	k.ids[ik] = keyEntry{id: id, expires: exp}
	k.order = append(k.order, keyExpiry{ik, exp})
}

// moved makes the key of a rescheduled message (hs: its headers) name its
// replacement, while its window lasts: a Schedule retried with the key
// gets the message that will be delivered.
func (k *keyIndex) moved(topic string, hs []message.Header, old, nid message.ID) {
	for _, h := range hs {
		if string(h.Key) != IdempotencyHeader {
			continue
		}
		ik := indexKey(topic, string(h.Value))
		k.mu.Lock()
		if e, ok := k.ids[ik]; ok && e.pending == nil && e.id == old {
			e.id = nid
			k.ids[k.internLocked(ik)] = e
		}
		k.mu.Unlock()
		return
	}
}

// loadKeys rebuilds the index from the schedule records in the retained
// commitlog below end, then opens it for Schedules. A key's window starts
// when its Schedule arrived (IdempotencyTimeHeader); a record written
// before that header existed has no arrival time, and its window is taken
// to start at the earlier of its deliverAt and the restart (a Schedule is
// never due before it arrived).
func (k *keyIndex) loadKeys(l *commitlog.Log, end int64, logf func(msg string, args ...any)) {
	defer close(k.ready)
	restart := k.now()
	defer func() {
		// Arrival order is commitlog order but for concurrent Schedules
		// and old records: expiry wants the order sorted.
		k.mu.Lock()
		slices.SortStableFunc(k.order, func(a, b keyExpiry) int { return cmp.Compare(a.at, b.at) })
		k.expireLocked(restart)
		k.mu.Unlock()
	}()
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		logf("engine: idempotency keys not reloaded", "err", err)
		return
	}
	defer it.Close()
	var m message.Message
	hdr, thdr := []byte(IdempotencyHeader), []byte(IdempotencyTimeHeader)
	n := 0
	// The lock is taken once per lockEvery records: nothing waits on it
	// while loading but a Reschedule's moved, and a lock per key cost about
	// 6 % of the reload (profile of a W4 restart).
	const lockEvery = 1024
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := 1; it.Next(); i++ {
		if it.Offset() >= end {
			break
		}
		if i%lockEvery == 0 {
			k.mu.Unlock()
			k.mu.Lock()
		}
		rec := it.Record()
		if rec.Type != message.TypeSchedule || message.DecodeSchedule(rec.Payload, &m) != nil {
			continue
		}
		var key []byte
		at := time.UnixMilli(min(m.DeliverAt, restart.UnixMilli()))
		for _, h := range m.Headers {
			switch {
			case bytes.Equal(h.Key, hdr):
				key = h.Value
			case bytes.Equal(h.Key, thdr):
				if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
					at = time.UnixMilli(ms)
				}
			}
		}
		if key == nil || !restart.Before(at.Add(k.window)) {
			continue // no key, or its window is over
		}
		k.loadLocked(m.Topic, key, message.ID{DeliverAt: m.DeliverAt, Seq: uint64(it.Offset())}, at)
		n++
	}
	if err := it.Err(); err != nil {
		logf("engine: idempotency keys partly reloaded", "keys", n, "err", err)
	}
}

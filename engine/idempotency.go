package engine

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strconv"
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

// claim looks up ik: it returns the stored ID, or a pending slot the
// caller must complete with settle, passing key (ik as the index holds
// it, so that settling does not copy it again). It waits while another
// Schedule with the same key appends.
func (k *keyIndex) claim(ctx context.Context, ik string) (key string, id message.ID, found bool, err error) {
	select {
	case <-k.ready:
	case <-ctx.Done():
		return ik, id, false, ctx.Err()
	}
	for {
		k.mu.Lock()
		now := k.now()
		k.expireLocked(now)
		e, ok := k.ids[ik]
		if ok && e.pending == nil && now.UnixNano() >= e.expires {
			ok = false // over; its expiry record is further on
		}
		if !ok {
			ik = k.internLocked(ik)
			k.ids[ik] = keyEntry{pending: make(chan struct{})}
			k.mu.Unlock()
			return ik, id, false, nil
		}
		if e.pending == nil {
			k.mu.Unlock()
			return ik, e.id, true, nil
		}
		k.mu.Unlock()
		select {
		case <-e.pending:
		case <-ctx.Done():
			return ik, id, false, ctx.Err()
		}
	}
}

// settle completes a claim: with ok the key now names id; otherwise the
// claim is dropped and a waiting Schedule with the key tries itself.
func (k *keyIndex) settle(ik string, id message.ID, ok bool) {
	k.settleAt(ik, id, ok, k.now())
}

// settleAt is settle for a Schedule that arrived at at.
func (k *keyIndex) settleAt(ik string, id message.ID, ok bool, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.ids[ik]
	if ok {
		// Storing replaces the map's copy of the key with ik: ik must be
		// in the arena too.
		ik = k.internLocked(ik)
		exp := at.Add(k.window).UnixNano()
		k.ids[ik] = keyEntry{id: id, expires: exp}
		k.order = append(k.order, keyExpiry{ik, exp})
	} else {
		delete(k.ids, ik)
	}
	if e.pending != nil {
		close(e.pending)
	}
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

package engine

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// IdempotencyHeader is the header that carries a Request's IdempotencyKey
// in the stored message (and so to consumers).
const IdempotencyHeader = "hourglass-idempotency-key"

// MaxIdempotencyKey bounds Request.IdempotencyKey in bytes.
const MaxIdempotencyKey = 200

// keyIndex remembers, per topic and idempotency key, the ID of the message
// scheduled with it, for Options.IdempotencyWindow. After a restart it is
// rebuilt from the commitlog's retained records (loadKeys), so a producer
// that retries a Schedule whose answer it lost in a crash gets the first
// message's ID back instead of a second message.
type keyIndex struct {
	window time.Duration
	now    func() time.Time
	ready  chan struct{} // closed once loadKeys is done

	mu    sync.Mutex
	ids   map[string]keyEntry
	order []keyExpiry // insertion order, for expiry
}

type keyEntry struct {
	id      message.ID
	pending chan struct{} // non-nil while the first Schedule with the key appends
}

type keyExpiry struct {
	key string
	at  time.Time
}

func newKeyIndex(window time.Duration, now func() time.Time) *keyIndex {
	return &keyIndex{window: window, now: now, ready: make(chan struct{}), ids: map[string]keyEntry{}}
}

func indexKey(topic, key string) string { return topic + "\x00" + key }

// expireLocked drops the keys older than the window. k.mu is held.
func (k *keyIndex) expireLocked(now time.Time) {
	i := 0
	for ; i < len(k.order) && !now.Before(k.order[i].at); i++ {
		if e, ok := k.ids[k.order[i].key]; ok && e.pending == nil {
			delete(k.ids, k.order[i].key)
		}
	}
	k.order = k.order[i:]
}

// claim looks up ik: it returns the stored ID, or a pending slot the
// caller must complete with settle. It waits while another Schedule with
// the same key appends.
func (k *keyIndex) claim(ctx context.Context, ik string) (id message.ID, found bool, err error) {
	select {
	case <-k.ready:
	case <-ctx.Done():
		return id, false, ctx.Err()
	}
	for {
		k.mu.Lock()
		k.expireLocked(k.now())
		e, ok := k.ids[ik]
		if !ok {
			k.ids[ik] = keyEntry{pending: make(chan struct{})}
			k.mu.Unlock()
			return id, false, nil
		}
		if e.pending == nil {
			k.mu.Unlock()
			return e.id, true, nil
		}
		k.mu.Unlock()
		select {
		case <-e.pending:
		case <-ctx.Done():
			return id, false, ctx.Err()
		}
	}
}

// settle completes a claim: with ok the key now names id; otherwise the
// claim is dropped and a waiting Schedule with the key tries itself.
func (k *keyIndex) settle(ik string, id message.ID, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.ids[ik]
	if ok {
		k.ids[ik] = keyEntry{id: id}
		k.order = append(k.order, keyExpiry{ik, k.now().Add(k.window)})
	} else {
		delete(k.ids, ik)
	}
	if e.pending != nil {
		close(e.pending)
	}
}

// loadKeys rebuilds the index from the schedule records in the retained
// commitlog below end, then opens it for Schedules. Keys found there count
// as fresh: their window starts at the restart.
func (k *keyIndex) loadKeys(l *commitlog.Log, end int64, logf func(msg string, args ...any)) {
	defer close(k.ready)
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		logf("engine: idempotency keys not reloaded", "err", err)
		return
	}
	defer it.Close()
	var m message.Message
	hdr := []byte(IdempotencyHeader)
	n := 0
	for it.Next() {
		if it.Offset() >= end {
			break
		}
		rec := it.Record()
		if rec.Type != message.TypeSchedule || message.DecodeSchedule(rec.Payload, &m) != nil {
			continue
		}
		for _, h := range m.Headers {
			if bytes.Equal(h.Key, hdr) {
				k.settle(indexKey(string(m.Topic), string(h.Value)), message.ID{DeliverAt: m.DeliverAt, Seq: uint64(it.Offset())}, true)
				n++
				break
			}
		}
	}
	if err := it.Err(); err != nil {
		logf("engine: idempotency keys partly reloaded", "keys", n, "err", err)
	}
}

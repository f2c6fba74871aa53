package reput

import (
	"bytes"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
)

// keyStager stages in the catalog the idempotency keys of routed records
// and sweeps the catalog of entries whose segments are gone. Owned by the
// routing goroutine.
//
// text holds the text of a step's keys back to back (KeyOf's form), refs
// where each ends and its ID (indexKey). A step stages what it routed at
// its end, except while routing again the records a restart found after
// the checkpoint (below replayEnd, the commitlog's end at Start): held
// keeps those, heldN of them, until stage stages them at once into a map
// made for them all.
type keyStager struct {
	cat  *catalog.Catalog // Options.Catalog; nil: nothing is staged
	opts *Options
	segs *segList
	// retired reports whether the message id belonged to a bucket that
	// was retired (the retired log): its segment is gone even when a new
	// one holds its bucket's time now.
	retired func(id message.ID) bool

	scratch   message.Message // indexKey's decoding
	replayEnd int64
	text      []byte
	refs      []keyRef
	pairs     []catalog.KeyID
	held      [][]catalog.KeyID
	heldN     int
	// sweepKeys and sweepMoved are where sweep goes on in the Keys and
	// Moved tables.
	sweepKeys, sweepMoved []byte
}

// keyRef is where a key indexKey collected ends in text, its ID, and
// when its Schedule arrived (UTC ms; 0: unknown).
type keyRef struct {
	end int
	id  message.ID
	at  int64
}

// keyHeader is the header an idempotency key travels in, keyTimeHeader
// the one its Schedule's arrival time does.
var (
	keyHeader     = []byte(message.IdempotencyKeyHeader)
	keyTimeHeader = []byte(message.IdempotencyAtHeader)
)

// maxReplayKeys bounds the keys held back while a restart routes again the
// records after the checkpoint (about 70 bytes each).
const maxReplayKeys = 1 << 18

// indexKey collects the idempotency key of the message id (its schedule
// payload p), if it has one, for the catalog's Keys table, and reports
// whether it did.
func (k *keyStager) indexKey(id message.ID, p []byte) bool {
	if k.cat == nil || !message.MayHoldHeader(p, keyHeader) {
		return false
	}
	if err := message.DecodeSchedule(p, &k.scratch); err != nil {
		return false
	}
	var key []byte
	var at int64
	for _, h := range k.scratch.Headers {
		switch {
		case bytes.Equal(h.Key, keyHeader):
			key = h.Value
		case bytes.Equal(h.Key, keyTimeHeader):
			at, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	if key == nil {
		return false
	}
	k.text = append(append(append(k.text, k.scratch.Topic...), 0), key...) // catalog.KeyOf's form
	k.refs = append(k.refs, keyRef{end: len(k.text), id: id, at: at})
	return true
}

// endStep stages the keys a step collected, or holds them while the step
// routed again records a restart found after the checkpoint (pos, where
// the step ended, below replayEnd) and fewer than maxReplayKeys are held.
// It reports whether every key collected is staged.
func (k *keyStager) endStep(pos int64) bool {
	if pos >= k.replayEnd || k.heldN >= maxReplayKeys {
		k.stage()
		return true
	}
	k.collect(true)
	return false
}

// collect turns the keys indexKey collected in a step into catalog pairs
// (one string holds their text) and stages them with one PutKeys, or,
// with hold, holds them for stage. After a restart, routing stages every
// key among the records after the checkpoint; one Put per key (a lock,
// four allocations and a map grown from empty) was most of what it cost.
func (k *keyStager) collect(hold bool) {
	if len(k.refs) == 0 {
		return
	}
	text, start := string(k.text), 0
	pairs := k.pairs[:0]
	if hold {
		pairs = make([]catalog.KeyID, 0, len(k.refs)) // kept until stage
	}
	for _, ref := range k.refs {
		pairs = append(pairs, catalog.KeyID{Key: text[start:ref.end], ID: ref.id, At: ref.at})
		start = ref.end
	}
	k.text, k.refs = k.text[:0], k.refs[:0]
	if hold {
		k.held = append(k.held, pairs)
		k.heldN += len(pairs)
		return
	}
	k.cat.PutKeys(pairs)
	clear(pairs) // the catalog holds the text now, not this slice
	k.pairs = pairs[:0]
}

// stage stages what collect holds (and what indexKey collected since)
// with one PutKeys, into a map made for them all.
func (k *keyStager) stage() {
	k.collect(len(k.held) > 0)
	if len(k.held) > 0 {
		k.cat.PutKeys(k.held...)
		k.drop()
	}
}

// drop forgets the keys collected or held and not staged: routing goes
// back to the checkpoint and collects them again.
func (k *keyStager) drop() {
	k.text, k.refs = k.text[:0], k.refs[:0]
	clear(k.held)
	k.held, k.heldN = k.held[:0], 0
}

// sweepPage bounds the catalog entries one checkpoint's sweep looks at.
const sweepPage = 4096

// movedKept is how long after its delivery time an origin's latest
// incarnation stays in the Moved table once its segment is gone: the
// queue may hold it (due, leased, dead-lettered) that long at least, and
// Get by the first ID finds it there.
const movedKept = 7 * 24 * time.Hour

// sweep removes from the catalog's Keys and Moved tables a page of the
// entries whose value names a message whose segment is gone (retired:
// every entry of it was done), going on from where the last sweep
// stopped: a message's key is kept while its bucket exists and for
// Options.KeyWindow after its Schedule arrived, an origin's latest incarnation for
// movedKept after its delivery time besides, unless that time is still
// ahead (its bucket retired before it started: nothing of it was
// delivered, so the queue cannot hold it). It reports whether it removed
// any.
func (k *keyStager) sweep() bool {
	gone := func(id []byte) bool {
		v, ok := catalog.DecodeID(id)
		if !ok {
			return true
		}
		if _, exists := k.segs.find(v.DeliverAt); !exists {
			return true
		}
		return k.retired != nil && k.retired(v)
	}
	var err error
	var n int
	if k.sweepKeys, n, err = k.cat.Sweep(catalog.Keys, k.sweepKeys, sweepPage, func(_, v []byte) bool {
		id, at, ok := catalog.DecodeKey(v)
		if !ok {
			return true
		}
		if at == 0 {
			at = id.DeliverAt // a Schedule never arrives after its delivery time
		}
		return gone(v) && time.UnixMilli(at).Add(k.opts.KeyWindow).Before(time.Now())
	}); err != nil {
		k.opts.Logger.Warn("reput: sweeping the catalog's keys failed", "err", err)
	}
	m := 0
	if k.sweepMoved, m, err = k.cat.Sweep(catalog.Moved, k.sweepMoved, sweepPage, func(_, v []byte) bool {
		id, ok := catalog.DecodeID(v)
		if !ok {
			return true
		}
		at := time.UnixMilli(id.DeliverAt)
		if at.After(time.Now()) {
			return k.retired != nil && k.retired(id)
		}
		return gone(v) && at.Add(movedKept).Before(time.Now())
	}); err != nil {
		k.opts.Logger.Warn("reput: sweeping the catalog's reschedules failed", "err", err)
	}
	return n+m > 0
}

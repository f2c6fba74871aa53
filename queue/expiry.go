package queue

// Messages past their expiry (message.ExpireAtHeader) are never handed
// out: a Receive (or Take) that reaches one, a lease that ends after it
// under Expiry.Unacked, or an Ack or Nack after it under Expiry.Unacked
// ends it as expired, dead-lettered with ReasonExpired or dropped as the
// topic's Expiry says.

import (
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// expiryOf is the expiry of a message with headers hs, UTC epoch
// milliseconds; 0 for none (an expiry is after a delivery time, so never
// the epoch itself).
func expiryOf(hs []message.Header) int64 {
	at, _ := message.ExpireAt(hs)
	return at
}

// expiredLocked reports whether l's message is past its expiry at nowMs
// in a topic whose policy expires messages not acked by then: it must
// not be acked, nacked or handed out again. t.mu is held.
func (t *topic) expiredLocked(l *lease, nowMs int64) bool {
	return l.expireAt != 0 && l.expireAt <= nowMs && !t.dlq && t.q.Policy(t.name).Expiry.Unacked
}

// settleExpired ends settling lease l, whose message is past its expiry,
// as the topic's Expiry says: dropped (acked, counted in ExpiryDropped)
// or dead-lettered with ReasonExpired (counted in PastExpiry). It
// returns what became of it ("dropped", "dead-lettered to <dlq>"). On
// error l is left settling.
func (t *topic) settleExpired(l *lease) (string, error) {
	if t.q.Policy(t.name).Expiry.Drop {
		if err := t.ack(l, &t.mu.stats.ExpiryDropped); err != nil {
			return "", err
		}
		t.q.opts.Logger.Info("queue: expired message dropped", "topic", t.name, "id", l.id)
		return "dropped", nil
	}
	var n uint64
	if err := t.deadLetter(l, &n, ReasonExpired); err != nil {
		return "", err
	}
	t.mu.Lock()
	t.mu.stats.PastExpiry++
	t.mu.Unlock()
	return "dead-lettered to " + t.name + DLQSuffix, nil
}

// expireOrRequeue is settleExpired run by a worker: on failure the
// message is receivable again, where the next Receive finds it expired
// and tries again; it is never handed out.
func (t *topic) expireOrRequeue(l *lease) {
	if _, err := t.settleExpired(l); err != nil {
		t.q.opts.Logger.Error("queue: ending an expired message failed; the next Receive tries again", "topic", t.name, "id", l.id, "err", err)
		t.mu.Lock()
		t.giveBackLocked(l)
		t.mu.Unlock()
	}
}

// giveBackLocked ends lease l (out of the heap) and makes its message
// receivable again, its attempt kept. t.mu is held.
func (t *topic) giveBackLocked(l *lease) {
	t.forgetLocked(l)
	if !l.ahead || l.off < t.mu.read.cursor() {
		// (Taken out of turn ahead of the reader, it is handed out when
		// the reader gets there.)
		t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: l.attempt})
	}
	t.wake()
}

// expiredError is the error of an Ack of l refused because its message
// expired first; what is what became of it.
func (t *topic) expiredError(l *lease, what string) error {
	return fmt.Errorf("%w: %s expired at %s, and topic %q expires messages not acked by then (policy expiry_unacked); it was %s",
		ErrExpired, l.id, time.UnixMilli(l.expireAt).UTC().Format(time.RFC3339Nano), t.name, what)
}

// pastExpiryLocked makes a settling lease for the message at off, which
// a Receive or Take reached past its expiry: the caller starts a worker
// (goSettle) that ends it. t.mu is held.
func (t *topic) pastExpiryLocked(off int64, id message.ID, attempt uint32) *lease {
	l := &lease{off: off, id: id, attempt: attempt, state: settling, hi: -1, serial: t.q.serial.Add(1)}
	t.mu.leases.byOff[off], t.mu.leases.byID[id] = l, l
	return l
}

// goSettle runs f in a worker that holds t until f returns. Holding
// cannot fail while t has a settling lease: it is not retired.
func (t *topic) goSettle(f func()) {
	held := t.q.hold(t)
	t.q.wg.Go(func() {
		if held {
			defer t.q.release(t)
		}
		f()
	})
}

package queue

import (
	"container/heap"
	"context"
	"time"
)

// armLocked makes sure the expiry timer fires by the earliest deadline.
// A timer that fires for a lease that is gone finds nothing to do and is
// set again. t.mu is held.
func (t *topic) armLocked() {
	if len(t.mu.leases.heap) == 0 || t.mu.closed {
		return
	}
	at := t.mu.leases.heap[0].deadline
	if t.mu.leases.timerAt != 0 && t.mu.leases.timerAt <= at {
		return
	}
	d := time.Duration(at - t.q.mono())
	if t.mu.leases.timer == nil {
		t.mu.leases.timer = time.AfterFunc(d, t.expire)
	} else {
		t.mu.leases.timer.Reset(d)
	}
	t.mu.leases.timerAt = at
}

// expire runs on the timer: leases past their deadline become receivable
// again with their attempt raised, or are dead-lettered. Each is logged
// with its topic, ID and attempt (the attempt that failed, counting from 1).
func (t *topic) expire() {
	q := t.q
	if q.enter() != nil {
		return
	}
	defer q.leave()
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return
	}
	t.mu.leases.timerAt = 0
	now, nowMs := q.mono(), q.now().UnixMilli()
	var dead, retry, past []*lease
	var logged [maxExpiryLines]lease
	n := 0
	backoff := !q.Policy(t.name).Backoff.IsZero()
	for len(t.mu.leases.heap) > 0 && t.mu.leases.heap[0].deadline <= now {
		l := heap.Pop(&t.mu.leases.heap).(*lease)
		t.mu.stats.Expired++
		if n < maxExpiryLines {
			logged[n] = *l
		}
		n++
		t.noteErrLocked(l.off, errExpired)
		switch {
		case t.expiredLocked(l, nowMs):
			// Not acked by its expiry (Expiry.Unacked): ended as
			// expired, never handed out again nor retried.
			l.state = settling
			past = append(past, l)
		case backoff && !t.exhausted(l) && t.orderedLocked(l):
			// An ordered key's retry waits out the backoff in place.
			t.retryInPlaceLocked(l, q.backoffDelay(t.name, l.attempt+1))
		case backoff && !t.exhausted(l):
			// The topic's backoff: a retry after a delay, as a Nack
			// without one gets.
			l.state = settling
			retry = append(retry, l)
		case t.failLocked(l):
			dead = append(dead, l)
		}
	}
	t.armLocked()
	t.mu.Unlock()
	for _, l := range logged[:min(n, maxExpiryLines)] {
		q.opts.Logger.Info("queue: lease expired", "topic", t.name, "id", l.id, "attempt", l.attempt+1)
	}
	if n > maxExpiryLines {
		q.opts.Logger.Info("queue: more leases expired", "topic", t.name, "more", n-maxExpiryLines)
	}
	for _, l := range dead {
		t.goSettle(func() { t.deadLetterExpired(l) })
	}
	for _, l := range retry {
		t.goSettle(func() { t.retryExpired(l) })
	}
	for _, l := range past {
		t.goSettle(func() { t.expireOrRequeue(l) })
	}
}

// retryExpired reschedules the message of an expired lease after the
// topic's backoff. On failure it is receivable again at once, its attempt
// raised, as without a backoff.
func (t *topic) retryExpired(l *lease) {
	var n uint64
	err := t.reschedule(context.Background(), l, t.q.backoffDelay(t.name, l.attempt+1))
	if err == nil {
		err = t.ack(l, &n)
	}
	if err != nil {
		t.q.opts.Logger.Error("queue: retrying an expired message after its backoff failed; it is receivable again at once", "topic", t.name, "id", l.id, "err", err)
		t.mu.Lock()
		t.forgetLocked(l)
		t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: l.attempt + 1})
		t.wake()
		t.mu.Unlock()
	}
}

// failLocked ends lease l, out of the heap, after a failed attempt. It
// returns true if the message must be dead-lettered (l is then settling);
// otherwise the message waits to be received again. t.mu is held.
func (t *topic) failLocked(l *lease) bool {
	if t.exhausted(l) {
		l.state = settling
		return true
	}
	next := l.attempt + 1
	if next == 0 {
		next = l.attempt // saturate
	}
	t.forgetLocked(l)
	if l.ahead && l.off >= t.mu.read.cursor() {
		// Taken out of turn: the reader hands it out when it gets there.
		t.wake()
		return false
	}
	t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: next})
	t.wake()
	return false
}

// restoreLocked puts a settling lease back as it was after its outcome
// could not be written. t.mu is held.
func (t *topic) restoreLocked(l *lease) {
	l.state = leased
	heap.Push(&t.mu.leases.heap, l)
	t.armLocked()
}

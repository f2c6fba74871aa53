package engine

import "context"

// settleWait is a WaitDelivered call: the deliveries in flight when it
// asked that are not confirmed yet.
type settleWait struct {
	left map[uint64]struct{}
	done chan struct{}
}

// WaitDelivered returns once every message handed to the sink before the
// call has its delivery recorded done in its dispatch log (or was given
// back: the sink failed and it is due again, or the engine stopped). A
// backup calls it before it copies the dispatch logs: a message the queue
// held and a consumer acked before the backup began is then done in the
// copy, and never handed to the queue again from it. It returns ctx's
// error if ctx ends first, ErrClosed if the engine is closed.
func (e *Engine) WaitDelivered(ctx context.Context) error {
	w := &settleWait{left: map[uint64]struct{}{}, done: make(chan struct{})}
	err := e.d.call(ctx, func() {
		for seq, lf := range e.d.fates.live {
			if lf.state == inFlight {
				w.left[seq] = struct{}{}
			}
		}
		if len(w.left) == 0 {
			close(w.done)
			return
		}
		e.d.fates.settling = append(e.d.fates.settling, w)
	})
	if err != nil {
		return err
	}
	select {
	case <-w.done:
		return nil
	case <-e.d.stopped:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settled tells the WaitDelivered calls that the delivery of seq is over
// (confirmed or given back). Driver goroutine.
func (f *fates) settled(seq uint64) {
	if len(f.settling) == 0 {
		return // the common case: no backup is waiting
	}
	kept := f.settling[:0]
	for _, w := range f.settling {
		delete(w.left, seq)
		if len(w.left) == 0 {
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	clear(f.settling[len(kept):])
	f.settling = kept
}

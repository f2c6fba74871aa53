package reput

// SyncDispatch makes the done-records reput has routed to bucket's
// dispatch log so far (its cancels) durable and readable in the file, so
// that a reader of the file (dispatchlog.Records) sees every cancel routed
// before the call. It does nothing when reput has no writer of the
// bucket's dispatch log open (then everything it routed there is synced),
// and costs no fsync when nothing was appended since the last one. Safe
// from any goroutine.
func (r *Reput) SyncDispatch(bucket int64) error {
	r.dmu.Lock()
	dw := r.dispatch[bucket]
	if dw == nil {
		r.dmu.Unlock()
		return nil
	}
	dw.inflight++ // so that keeping the writers within their bound does not close it
	r.dmu.Unlock()
	err := dw.w.Sync()
	r.dmu.Lock()
	dw.inflight--
	r.dmu.Unlock()
	return err
}

package reput

import (
	"context"
	"errors"
	"io/fs"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// Transient reports whether err is a condition that goes away without a
// restart, so that routing retries it instead of stopping:
//
//   - ENOSPC and EDQUOT (disk or quota full): write(2) fails without
//     writing, and what a failed write left is cut as a torn tail when the
//     file is reopened; the retry works once space is freed.
//   - EMFILE and ENFILE (too many open files, in the process or the
//     system): nothing was opened; the retry works once descriptors are
//     free.
//   - EIO from opening a file (a device that is briefly unreachable):
//     nothing was done.
//
// EIO from a write or an fsync is not transient: after a failed fsync the
// kernel may have dropped the data while the file still reads as
// written, so nothing can prove it durable again. Corruption
// (segfile.CorruptionError) is not transient either: it needs the
// operator.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var ce *segfile.CorruptionError
	if errors.As(err, &ce) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE} {
		if errors.Is(err, e) {
			return true
		}
	}
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Op == "open" && errors.Is(pe.Err, syscall.EIO)
}

// stallState is a run of failed attempts.
type stallState struct {
	since    time.Time
	attempts int
	backoff  time.Duration
	lastLog  time.Time
	// at is the commitlog offset routing must pass (with a checkpoint)
	// for the stall to be over: past the record that failed, or the
	// position a failed checkpoint was to record.
	at int64
}

// stallLogEvery is how often a continuing stall is logged again.
const stallLogEvery = time.Minute

// failed handles a failed attempt: it reports it, and for a transient
// failure drops every writer (a failed write or fsync is sticky), rewinds
// to the durable checkpoint and waits before the next attempt; it returns
// a non-nil error when routing must stop.
func (r *Reput) failed(err error) error {
	r.stats.stalls.Add(1)
	if r.opts.OnStall != nil {
		r.opts.OnStall(err)
	}
	if !Transient(err) {
		return err
	}
	now := time.Now()
	if r.stall == nil {
		r.stall = &stallState{since: now, backoff: r.opts.retryMin, lastLog: now}
		r.log.Warn("reput: routing stalled; retrying until it works (past the stall bound /readyz is 503 and Schedules are refused)",
			"err", err, "retry", r.opts.retryMin)
	} else {
		r.stall.backoff = min(2*r.stall.backoff, r.opts.retryMax)
		if now.Sub(r.stall.lastLog) >= stallLogEvery {
			r.stall.lastLog = now
			r.log.Warn("reput: routing still stalled", "err", err, "since", r.stall.since.UTC().Format(time.RFC3339),
				"attempts", r.stall.attempts+1)
		}
	}
	r.stall.attempts++
	r.stall.at = max(r.stall.at, r.it.Pos())
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		// The descriptor limit is below what the writer bound assumes:
		// keep fewer writers open, or every retry fails at the same
		// point. The bound grows back at each checkpoint (doCheckpoint).
		if c := r.writers.shrink(); c > 0 {
			r.log.Warn("reput: too many open files; keeping fewer segment writers open", "writers", c, "max_open_writers", r.opts.maxOpenWriters)
		}
	}
	if rerr := r.reset(); rerr != nil {
		// Cannot even reopen the commitlog at the checkpoint: that is
		// not a condition to wait out.
		return rerr
	}
	return r.sleep(r.stall.backoff)
}

// resumed ends a stall.
func (r *Reput) resumed() {
	s := r.stall
	r.stall = nil
	r.log.Info("reput: routing resumed", "stalled_for", time.Since(s.since).Round(time.Millisecond), "attempts", s.attempts)
	if r.opts.OnResume != nil {
		r.opts.OnResume()
	}
}

// reset drops every writer and every event not yet handed over, and
// rewinds the commitlog iterator to the durable checkpoint: routing again
// from there is idempotent (a record a segment holds already is skipped,
// I2), and it routes again whatever a failed writer lost. Watchers are
// given what the files hold beyond what they had when the writers are
// reopened (catchUp).
func (r *Reput) reset() error {
	r.writers.closeAll()
	r.dispatch.reset()
	r.retired.close()
	r.out.reset()
	// Keys collected and not staged are collected again from pos.
	r.keys.drop()
	pos := r.progress.checkpoint.Load()
	it, err := r.opts.Log.NewIterator(pos)
	if err != nil {
		return err
	}
	r.it.Close()
	r.it = it
	r.dirty = true
	return nil
}

// sleep waits d, serving requests meanwhile (Close ends it with
// ErrClosed; Watch and Retire get an answer, which may be an error).
func (r *Reput) sleep(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := r.serveRequests(); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		if r.reqs.park(cancel, nil) {
			<-ctx.Done()
			r.reqs.unpark()
		}
		cancel()
	}
}

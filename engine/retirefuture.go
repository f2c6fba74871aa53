package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// The bucket of messages frozen on their own (FrozenAt's) is retired as
// soon as every entry in it is done, thawed or cancelled (docs/DESIGN.md,
// "The frozen bucket retires once empty"), not when it is over: its time
// never comes, and it would keep a copy of every message ever frozen.
// Only a claim on one of its entries starts the check (a Thaw, Cancel,
// Reschedule or Edit, once its record is routed: pruneRecorded), and once
// at start-up, so a Schedule or a Cancel elsewhere costs nothing more.
// Other buckets that have not started keep their files until they are
// over, and so go on answering cancelled or rescheduled for their entries.
// Reput retires it (reput.Retire) as it retires a bucket that is over: a
// record routed into it meanwhile makes Retire refuse (ErrBusy), and one
// routed after it makes a new segment under its name. The checks are
// written for any bucket not started and not loaded.

// errNotAllDone is a check's answer for a bucket with an entry not done,
// or one that cannot be told (a damaged or missing dispatch log, a damaged
// segment): it stays, and the loader decides at its time.
var errNotAllDone = errors.New("engine: an entry of the bucket is not done")

// futureBucket is a bucket, not loaded and not started, to check.
type futureBucket struct {
	// after is the offset of the last record that made an entry of it
	// done: checked once reput's durable checkpoint is past it (its
	// dispatch log is synced then, and reput.Retire would refuse before).
	after int64
	busy  bool          // being checked or retired, on its own goroutine
	again bool          // noted again while busy: check once more
	next  time.Time     // not before (a retirement that was not durable yet)
	wait  chan struct{} // closed when busy ends, for the claims that asked (tryClaim)
}

// futureRetireRetry is how long after reput refused a retirement as not
// yet durable it is tried again: the next checkpoint is at most a second
// away.
const futureRetireRetry = time.Second

// isFrozenBucket reports whether the bucket at start is the one that holds
// FrozenAt, not loaded. Any other bucket is answered without a look at
// the segment list: a bucket is at most schedulelog.MaxDuration long.
func (d *driver) isFrozenBucket(start int64) bool {
	if start <= FrozenAt-schedulelog.MaxDuration.Milliseconds() {
		return false
	}
	if _, loaded := d.buckets[start]; loaded {
		return false
	}
	seg, ok := d.e.reput.FindSegment(FrozenAt)
	return ok && seg.Start == start
}

// noteFuture notes the bucket at start, not loaded, for a check once the
// record at off (negative: none) is below reput's durable checkpoint. A
// bucket that starts within the preload lead is left to retire when over.
func (d *driver) noteFuture(start, off int64) {
	if start-d.e.opts.PreloadLead.Milliseconds() <= d.now() {
		return
	}
	f := d.future[start]
	if f == nil {
		f = &futureBucket{after: off}
		d.future[start] = f
	}
	f.after = max(f.after, off)
	if f.busy {
		f.again = true
	}
}

// futureBusy returns, while the bucket at start is being retired early, a
// channel closed when that is over; nil otherwise.
func (d *driver) futureBusy(start int64) <-chan struct{} {
	if f := d.future[start]; f != nil && f.busy {
		return f.wait
	}
	return nil
}

// retireFuture starts the check of each noted bucket that is due one, and
// returns when it next needs to run. Not while a claim is between its
// decision and its durable record (as for retireBuckets), nor for a bucket
// loaded or about to be, nor before the start-up checks have passed (as
// for retireBuckets).
func (d *driver) retireFuture(now int64) int64 {
	next := never
	if len(d.future) == 0 || !d.started() {
		return next // passed() wakes the loop
	}
	lead := d.e.opts.PreloadLead.Milliseconds()
	ckpt := d.e.reput.Checkpoint()
	unarmed := d.claiming()
	for start, f := range d.future {
		if f.busy {
			continue
		}
		if _, loaded := d.buckets[start]; loaded || start-lead <= now {
			delete(d.future, start) // it retires when over
			continue
		}
		if f.after >= ckpt {
			continue // the driver looks again within maxSleepMs
		}
		if unarmed {
			next = min(next, now+1)
			continue
		}
		if wait := time.Until(f.next); wait > 0 {
			next = min(next, now+wait.Milliseconds()+1)
			continue
		}
		f.busy, f.again, f.wait = true, false, make(chan struct{})
		go func() {
			err := d.e.retireIfDone(start)
			d.post(ev{kind: evFutureChecked, bucket: start, err: err})
		}()
	}
	return next
}

// futureChecked ends the check of the bucket at start: retired (err nil),
// to try again after the next checkpoint, or left as it is.
func (d *driver) futureChecked(start int64, err error) {
	f := d.future[start]
	if f == nil {
		return
	}
	f.busy = false
	close(f.wait)
	f.wait = nil
	switch {
	case err == nil:
		delete(d.future, start)
		d.ld.segsDirty = true
	case errors.Is(err, reput.ErrNotDurable):
		f.next = time.Now().Add(futureRetireRetry)
	case f.again:
		// Something else became done while it was checked: look again.
	default:
		if !errors.Is(err, errNotAllDone) && !errors.Is(err, reput.ErrBusy) && !errors.Is(err, reput.ErrClosed) {
			d.e.opts.Logger.Warn("engine: retiring a bucket whose every entry is done failed; it retires when over", "bucket", fmtMs(start), "err", err)
		}
		delete(d.future, start)
	}
}

// retireIfDone retires the bucket at start if every entry in it is done,
// cancelled or rescheduled (it has not started: none was delivered), and
// returns errNotAllDone if not. It first compares the dispatch log's
// size with the entries the segment's header counts (a done-record is
// dispatchlog.RecordSize bytes; the header counts those synced, at most
// all), so that a Thaw while many messages stay frozen costs two small
// reads, and only then reads both files.
func (e *Engine) retireIfDone(start int64) error {
	si, err := schedulelog.Stat(e.schedDir, start)
	if errors.Is(err, fs.ErrNotExist) {
		return errNotAllDone // retired already
	}
	if err != nil {
		return err
	}
	fi, err := os.Stat(e.donePath(start))
	if errors.Is(err, fs.ErrNotExist) {
		return errNotAllDone // the loader decides what a missing one means
	}
	if err != nil {
		return err
	}
	if (fi.Size()-segfile.HeaderSize)/dispatchlog.RecordSize < int64(si.HintEntries) {
		return errNotAllDone
	}
	done, c, err := dispatchlog.Load(e.donePath(start))
	if err != nil {
		return fmt.Errorf("%w: %w", errNotAllDone, err)
	}
	if c.Delivered > 0 || c.DeadLettered > 0 || c.Lost {
		return errNotAllDone // delivered to (a clock set back), or the log was lost
	}
	rd, err := schedulelog.OpenReader(filepath.Join(e.schedDir, si.Name))
	if err != nil {
		return fmt.Errorf("%w: %w", errNotAllDone, err)
	}
	defer rd.Close()
	var n uint64
	it := rd.Iter()
	for it.Next() {
		if !done.Contains(it.Seq()) {
			return errNotAllDone
		}
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%w: %w", errNotAllDone, err)
	}
	if _, torn := it.Torn(); torn {
		return errNotAllDone // a write in progress: Retire would refuse it too
	}
	if e.beforeEarlyRetire != nil {
		e.beforeEarlyRetire()
	}
	// Reput refuses if it holds more than n entries now (ErrBusy: one was
	// routed since), or any not below its durable checkpoint.
	return e.reput.Retire(start, n)
}

// entryGone reports whether the entry id, read from its segment when
// reput.Removed said removed, may have gone with that segment since: a
// retirement, after which a new segment may hold its bucket's time.
func (e *Engine) entryGone(id message.ID, removed uint64) (bool, error) {
	if e.reput.Removed() == removed {
		return false, nil
	}
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return true, nil
	}
	var m message.Message
	ok, err := readEntry(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)), id.Seq, &m)
	return !ok || m.DeliverAt != id.DeliverAt, err
}

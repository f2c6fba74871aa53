package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// startChecks is how many start-up checks there are: the dispatch logs of
// the buckets due at start (checkDispatchLogs) and every record the
// commitlog retained at Open (checkRetained). Either one failing refuses
// the start (Refused), and the engine then hands nothing over at all: no
// message reaches the sink, no recurring occurrence fires (a Scheduler, as
// the sink, arms the next occurrence when one is handed to it), no
// delivery or dead letter is recorded done, no finished bucket retired. So
// a start that refuses has delivered and recorded nothing that `hourglass
// repair`, or the start after it, would deliver or count a second time.
// Routing and loading go on beside them (loading up to the first overdue
// bucket): reput still appends to dispatch logs the cancels and reschedules
// the commitlog holds past its checkpoint, as every start does, which the
// commitlog would give them again anyway.
const startChecks = 2

// started reports whether every start-up check has passed: from then on
// the driver fires. Driver goroutine only.
func (d *driver) started() bool { return d.ld.checks == startChecks }

// passed records that one start-up check has passed. Any goroutine.
func (d *driver) passed() {
	d.post(ev{kind: evCall, call: func() {
		d.ld.checks++
		d.ld.segsDirty = true // loadNext looks again (and closes Ready)
	}})
}

// checkDispatchLogs looks at the dispatch log of every bucket due at start
// (those in the preload window, which the driver loads before Ready) and
// refuses the start for the first one whose bucket the loader would hold
// (a damaged dispatch log, or a lost one it cannot recreate: see load and
// lostWhy) while it has entries not recorded done. It returns whether
// they all passed. It changes nothing: a lost log the loader can recreate
// is recreated when its bucket loads. Transient failures (too many open
// files, an I/O error) are retried with the loader's backoff until the
// engine closes.
func (d *driver) checkDispatchLogs() bool {
	now, lead := d.now(), d.e.opts.PreloadLead.Milliseconds()
	for _, s := range d.e.reput.Segments() {
		if s.Start-lead > now {
			break
		}
		for attempt := 1; ; attempt++ {
			refusal, err := d.checkDispatchLog(s.Start)
			if err == nil {
				if refusal != nil {
					d.e.refuse(refusal)
					return false
				}
				break
			}
			wait := d.reportLoadFailure(s.Start, attempt, err, false)
			t := time.NewTimer(wait)
			select {
			case <-d.ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
	}
	return true
}

// checkDispatchLog returns the refusal for the bucket at start (nil: it
// loads), or a transient failure to retry.
func (d *driver) checkDispatchLog(start int64) (refusal, err error) {
	sal, why, _, err := d.readDone(start)
	if err != nil || why == "" {
		return nil, err
	}
	held, err := heldEntries(filepath.Join(d.e.schedDir, schedulelog.Name(start)), sal.Set)
	switch {
	case isCorruption(err), errors.Is(err, fs.ErrNotExist):
		// A segment that cannot be read at all is the loader's to report
		// and skip; it holds nothing back.
		return nil, nil
	case err != nil:
		return nil, err
	case held == 0:
		return nil, nil
	}
	return d.heldError(start, why, held), nil
}

// readDone reads the dispatch log of the bucket at start and says why the
// bucket must be held ("" if it need not), or, for a lost log, whether the
// loader recreates it instead (lostWhy, recreateDone). err is a transient failure.
func (d *driver) readDone(start int64) (sal dispatchlog.Salvage, why string, recreate bool, err error) {
	path := filepath.Join(d.e.schedDir, dispatchlog.Name(start))
	sal, err = dispatchlog.LoadSalvage(path)
	switch {
	case isCorruption(err):
		// A damaged header: nothing in the log can be trusted.
		return dispatchlog.Salvage{Set: &dispatchlog.Set{}}, fmt.Sprintf("the dispatch log's header is damaged (%v)", err), false, nil
	case err != nil:
		return sal, "", false, err
	case sal.Damaged():
		why = fmt.Sprintf("the dispatch log %s is damaged (%d regions, up to %d done-records unknown, the first at offset %d)",
			path, len(sal.Damage), sal.Unknown(), sal.Damage[0].Offset)
	case sal.Missing, sal.Lost:
		why = d.lostWhy(start, sal.Lost)
		recreate = why == ""
	}
	return sal, why, recreate, nil
}

// heldError is why the bucket at start holds held entries back.
func (d *driver) heldError(start int64, why string, held int64) error {
	return fmt.Errorf("bucket %s: %s: %d of its messages are held back, neither delivered nor dropped; stop the server and run `hourglass repair --data-dir %s` to choose (--assume-delivered or --assume-pending)",
		fmtMs(start), why, held, d.e.opts.Dir)
}

// heldEntries counts the entries of the segment at path that done does not
// hold: those the loader holds back when the bucket is held.
func heldEntries(path string, done *dispatchlog.Set) (int64, error) {
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	var n int64
	it := rd.Scan(schedulelog.FirstOffset, -1)
	for it.Next() {
		if !done.Contains(it.Seq()) {
			n++
		}
	}
	return n, it.Err()
}

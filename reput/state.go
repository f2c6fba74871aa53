package reput

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hourglassmq/hourglass/segfile"
)

// recoverState reads the checkpoint and the retired log at start-up and
// decides where routing resumes. hasSegs says the schedule directory holds
// segments; end is the commitlog's end. It returns the position (ok false:
// from the oldest commitlog segment) and whether the checkpoint must be
// written again before routing starts.
//
// The two files vouch for each other:
//
//   - both good: resume at the checkpoint; a retired log holding fewer
//     retirements than the checkpoint counted lost records: refuse.
//   - checkpoint missing or damaged, retired log good: resume at the
//     retired log's floor (everything below it was durably routed), skip
//     the records of retired buckets, and write the checkpoint back.
//   - retired log missing, checkpoint good: a version 1 checkpoint (a
//     directory written before the retired log existed) or one that counts
//     no retirement gets a new retired log holding the checkpoint as its
//     floor; one that counts retirements: refuse.
//   - retired log damaged: refuse.
//   - both missing or damaged: a fresh directory (no segment, an empty
//     commitlog) gets both; any other: refuse.
//
// Refusals are *segfile.CorruptionError naming the file, so that the
// engine adds the repair command.
func (r *Reput) recoverState(hasSegs bool, end int64) (pos int64, ok, rewrite bool, err error) {
	dir := r.opts.Dir
	ckPath, rlPath := filepath.Join(dir, checkpointName), filepath.Join(dir, retiredName)
	ck, ckOK, ckErr := readCkpt(dir)
	if ckErr != nil && !errors.Is(ckErr, errBadCheckpoint) {
		return 0, false, false, ckErr // could not read it: say so, decide nothing
	}
	rs, rlOK, rlErr := readRetired(dir)
	var ce *segfile.CorruptionError
	if rlErr != nil && !errors.As(rlErr, &ce) {
		return 0, false, false, rlErr
	}
	r.retired = &retiredLog{dir: dir, sync: r.syncFile}
	routed := hasSegs || end > 0
	switch {
	case rlErr != nil:
		return 0, false, false, fmt.Errorf("%w; it records which buckets were delivered and deleted, and without it a lost checkpoint would deliver them again", rlErr)
	case rlOK && rs.torn > 0:
		r.log.Warn("reput: retired log torn tail cut (an append interrupted by a crash; its bucket was not deleted)",
			"path", rlPath, "offset", rs.good, "bytes", rs.torn)
		if err := os.Truncate(rlPath, rs.good); err != nil {
			return 0, false, false, fmt.Errorf("reput: cut the torn tail of %s: %w", rlPath, err)
		}
		rs.torn = 0
	}
	switch {
	case ckOK && rlOK:
		if ck.version >= 2 && rs.count() < ck.retired {
			return 0, false, false, &segfile.CorruptionError{Path: rlPath, Offset: -1,
				Err: fmt.Errorf("%w: it holds %d retirements, the checkpoint %s counted %d; the buckets of the missing ones would be delivered again if the checkpoint were lost",
					ErrRetiredShort, rs.count(), ckPath, ck.retired)}
		}
		r.retired.st = rs
		return ck.pos, true, ck.version < checkpointVersion, nil
	case rlOK:
		what := "missing"
		if ckErr != nil {
			what = "damaged (" + ckErr.Error() + ")"
		}
		r.log.Warn("reput: checkpoint "+what+"; resuming from the retired log's floor and skipping the records of retired buckets: nothing is routed twice or delivered again, the restart only reads more of the commitlog",
			"checkpoint", ckPath, "retired_log", rlPath, "floor", rs.floor, "retirements", rs.count())
		r.retired.st = rs
		return rs.floor, true, true, nil
	case ckOK && (ck.version < 2 || ck.retired == 0):
		if ck.version < 2 {
			r.log.Info("reput: creating the retired log (checkpoint of version 1)", "path", rlPath)
		} else {
			r.log.Warn("reput: retired log missing; the checkpoint counts no retirement, so nothing is lost: creating it", "path", rlPath)
		}
		rs, err := createRetired(dir, Retirement{Floor: ck.pos})
		if err != nil {
			return 0, false, false, err
		}
		r.retired.st = rs
		return ck.pos, true, true, nil
	case ckOK:
		return 0, false, false, &segfile.CorruptionError{Path: rlPath, Offset: -1,
			Err: fmt.Errorf("%w: the checkpoint %s counts %d retired buckets; the log that vouches for them is gone, so a later loss of the checkpoint would deliver them again",
				ErrRetiredMissing, ckPath, ck.retired)}
	case !routed:
		if ckErr != nil {
			r.log.Warn("reput: damaged checkpoint in a directory that never routed anything; writing a new one", "path", ckPath, "err", ckErr)
		}
		// A fresh directory: create both, so that a missing one is
		// always noticed.
		rs, err := createRetired(dir)
		if err != nil {
			return 0, false, false, err
		}
		r.retired.st = rs
		return 0, false, true, nil
	default:
		what := "missing"
		if ckErr != nil {
			what = "damaged (" + ckErr.Error() + ")"
		}
		return 0, false, false, &segfile.CorruptionError{Path: ckPath, Offset: -1,
			Err: fmt.Errorf("%w: the checkpoint is %s and the retired log %s is missing, in a directory that has routed messages; routing from the oldest commitlog segment would deliver the messages of retired buckets again",
				ErrNoRecord, what, rlPath)}
	}
}

// syncFile is the fsync of reput's own files (the retired log): the
// schedule writers' injected one in tests.
func (r *Reput) syncFile(f *os.File) error {
	if r.opts.schedule.SyncFile != nil {
		return r.opts.schedule.SyncFile(f)
	}
	return f.Sync()
}

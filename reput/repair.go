package reput

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hourglassmq/hourglass/segfile"
)

// ErrReplayRisk is returned by Repair when the only repair it can make may
// deliver retired messages again and RepairOptions.AcceptReplays is not
// set.
var ErrReplayRisk = errors.New("reput: repair could deliver retired messages again")

// RepairOptions configure Repair.
type RepairOptions struct {
	// DryRun says what would change and changes nothing.
	DryRun bool
	// AcceptReplays allows the one repair that can deliver messages again:
	// rebuilding when the retired log is gone or damaged and no good
	// checkpoint vouches for what was retired. Messages of the buckets it
	// no longer knows to be retired are routed and delivered again if the
	// commitlog still holds them.
	AcceptReplays bool
	// Keep is called with the path of every file before Repair replaces
	// it, and must keep a copy (the repair command's copies it under
	// <data-dir>/quarantine/<UTC time>/ at the same relative path).
	// Required unless DryRun.
	Keep func(path string) error
	// Logf receives one line per finding and per change. Default: none.
	Logf func(format string, args ...any)
}

// Repair makes reput's own files in the schedule directory dir (the
// checkpoint and the retired log) consistent again, with the server
// stopped, so that Start accepts them without routing a retired bucket
// again:
//
//   - a damaged or missing checkpoint is rebuilt from the retired log: its
//     position is the retired log's floor (everything below it was durably
//     routed; the schedule segments hold their own last seq, so routing
//     from there duplicates nothing), its count the log's;
//   - a retired log that is missing, damaged or shorter than the
//     checkpoint counts is rebuilt from its whole records before any
//     damage plus a floor at the checkpoint's position (every retired
//     bucket's records lie below it), and the checkpoint is rewritten;
//   - a torn tail of the retired log is cut;
//   - when the checkpoint is lost and the retired log is missing or
//     damaged, the truth is unknown: the files are rebuilt from what is
//     left only with AcceptReplays (ErrReplayRisk otherwise).
//
// It reports whether it changed anything (or would, with DryRun). Every
// file it replaces is handed to Keep first.
func Repair(dir string, o RepairOptions) (changed bool, err error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if !o.DryRun && o.Keep == nil {
		return false, errors.New("reput: Repair needs RepairOptions.Keep to keep a copy of what it replaces")
	}
	keep := o.Keep
	ckPath, rlPath := filepath.Join(dir, checkpointName), filepath.Join(dir, retiredName)
	ck, ckOK, ckErr := readCkpt(dir)
	if ckErr != nil && !errors.Is(ckErr, errBadCheckpoint) {
		return false, ckErr
	}
	ckGood := ckOK && ckErr == nil
	var rs *retiredState
	rlGood, rlNote := false, "missing"
	b, err := os.ReadFile(rlPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return false, err
	default:
		var derr error
		rs, _, derr = decodeRetired(b)
		switch {
		case derr != nil:
			rlNote = "damaged: " + derr.Error()
		case ckGood && ck.version >= 2 && rs.count() < ck.retired:
			rlNote = fmt.Sprintf("short: it holds %d retirements, the checkpoint counted %d", rs.count(), ck.retired)
		case rs.torn > 0:
			rlNote = fmt.Sprintf("torn tail of %d bytes at offset %d", rs.torn, rs.good)
		default:
			rlGood = true
		}
	}
	if !ckGood {
		what := "missing"
		if ckErr != nil {
			what = "damaged: " + ckErr.Error()
		}
		logf("%s: %s", ckPath, what)
	}
	if !rlGood {
		logf("%s: %s", rlPath, rlNote)
	}
	if ckGood && rlGood {
		if ck.version < checkpointVersion {
			logf("%s: version %d; the server upgrades it and creates the retired log at its next start", ckPath, ck.version)
		}
		return false, nil
	}
	// What to write.
	var recs []Retirement
	if rs != nil {
		recs = append(recs, rs.recs...) // the whole records before any damage
	}
	pos := int64(0)
	switch {
	case ckGood:
		pos = ck.pos
		if !rlGood {
			// Every bucket retired so far had its records below the
			// checkpoint of its retirement, hence below this one.
			recs = append(recs, Retirement{Floor: ck.pos})
			logf("%s: rebuilt from %d whole records and a floor at the checkpoint's position %d: nothing retired is routed again", rlPath, len(recs)-1, ck.pos)
		}
	case rlGood:
		pos = rs.floor
		logf("%s: rebuilt at the retired log's floor %d with %d retirements: nothing retired is routed again", ckPath, pos, rs.count())
	default:
		if !o.AcceptReplays {
			return false, fmt.Errorf("%w: the checkpoint %s is lost and the retired log %s is %s; the buckets retired after its last whole record (floor %d) are unknown. "+
				"Run the repair with --accept-replays to rebuild anyway", ErrReplayRisk, ckPath, rlPath, rlNote, floorOf(rs))
		}
		pos = floorOf(rs)
		logf("%s, %s: rebuilt from %d whole records (floor %d), accepting replays of what was retired after them", ckPath, rlPath, len(recs), pos)
	}
	if o.DryRun {
		return true, nil
	}
	for _, p := range []string{ckPath, rlPath} {
		if _, err := os.Stat(p); err == nil {
			if err := keep(p); err != nil {
				return false, err
			}
		}
	}
	var base uint64
	if rs != nil {
		base = rs.base
	}
	nb := encodeRetiredHeader(base)
	for _, r := range recs {
		nb = append(nb, encodeRetirement(r)...)
	}
	if err := segfile.WriteFileAtomic(rlPath, nb); err != nil {
		return true, fmt.Errorf("reput: write %s: %w", rlPath, err)
	}
	if err := writeCheckpoint(dir, pos, base+uint64(len(recs))); err != nil {
		return true, fmt.Errorf("reput: write %s: %w", ckPath, err)
	}
	return true, nil
}

// RepairStep is Repair as a step of `hourglass repair`: dir is the
// schedule directory, keep keeps a copy of a file before it is replaced,
// out receives what it found and did. It returns the number of changes.
func RepairStep(dir string, dryRun, acceptReplays bool, keep func(path string) error, out io.Writer) (int, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	changed, err := Repair(dir, RepairOptions{DryRun: dryRun, AcceptReplays: acceptReplays, Keep: keep,
		Logf: func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }})
	if !changed {
		return 0, err
	}
	return 1, err
}

func floorOf(s *retiredState) int64 {
	if s == nil {
		return 0
	}
	return s.floor
}

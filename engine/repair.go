package engine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// Assumption is the operator's decision about the entries of a bucket
// whose dispatch log is damaged or missing: which of them were delivered
// (or cancelled) is unknown, so the engine holds them back until told.
type Assumption string

const (
	// AssumeNothing decides nothing: RepairDispatchLogs reports the held
	// buckets and fails with ErrNeedsDecision.
	AssumeNothing Assumption = ""
	// AssumeDelivered marks every undecided entry done (delivered): none
	// of them is delivered again, and those that were not delivered yet
	// are lost.
	AssumeDelivered Assumption = "delivered"
	// AssumePending leaves the undecided entries pending: all of them are
	// delivered, and those that were delivered already are delivered a
	// second time (at least once).
	AssumePending Assumption = "pending"
)

// ErrNeedsDecision is returned by RepairDispatchLogs when a bucket's
// entries are held and no Assumption was given.
var ErrNeedsDecision = errors.New("engine: held entries need a decision: --assume-delivered or --assume-pending")

// DoneRepairOptions configure RepairDispatchLogs.
type DoneRepairOptions struct {
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Keep copies a file to the quarantine before it is replaced
	// (`hourglass repair` passes its repairEnv.Keep). Required unless
	// DryRun.
	Keep func(path string) error
	// Out receives one line per finding and change; default none.
	Out io.Writer
	// Assume decides the held entries.
	Assume Assumption
	// Commitlog is the engine's commitlog directory. The cancels it still
	// holds are read back and recorded in the repaired logs, so that no
	// Assumption makes a cancelled message deliverable again; "" reads
	// none.
	Commitlog string
}

// RepairDispatchLogs is the `hourglass repair` step for the dispatch logs
// of the schedule directory dir, run with the server stopped. A bucket
// whose dispatch log is damaged (a record that fails its checksum, a file
// cut below its synced length, a damaged header) or missing after the
// bucket started is held by the engine: which of its entries were
// delivered is unknown. With an Assumption the step writes a new dispatch
// log for it, after keeping a copy of the old one: the old log's valid
// done-records, plus, with AssumeDelivered, a Delivered record for every
// entry not among them. The new log replaces the old one atomically
// (written in a temporary directory, renamed, directory fsynced). It
// returns the number of dispatch logs it rewrote (or would, in a dry run).
func RepairDispatchLogs(dir string, o DoneRepairOptions) (int, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if !o.DryRun && o.Keep == nil {
		return 0, errors.New("engine: RepairDispatchLogs needs DoneRepairOptions.Keep")
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	changes, undecided := 0, 0
	var cancels map[uint64]int64 // read once, when a log needs repair
	for _, e := range ents {
		start, ok := schedulelog.ParseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		n, held, err := repairDone(dir, start, o, out, func() map[uint64]int64 {
			if cancels == nil {
				var err error
				if cancels, err = readCancels(o.Commitlog); err != nil {
					fmt.Fprintf(out, "  no cancels read back: %v\n", err)
					cancels = map[uint64]int64{}
				}
			}
			return cancels
		})
		if err != nil {
			return changes, err
		}
		changes += n
		undecided += held
	}
	if changes > 0 && !o.DryRun {
		// Rewritten logs may say done what the counts the last Close left
		// held pending: the next Open counts again.
		if err := os.Remove(filepath.Join(dir, PendingFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return changes, err
		}
	}
	if undecided > 0 && o.Assume == AssumeNothing {
		return changes, fmt.Errorf("%w: %d entries are held (see above)", ErrNeedsDecision, undecided)
	}
	return changes, nil
}

// readCancels returns the targets of the cancel records the commitlog in
// dir holds (seq → deliverAt); none if dir is "" or holds no log.
func readCancels(dir string) (map[uint64]int64, error) {
	out := map[uint64]int64{}
	if dir == "" {
		return out, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	l, _, err := commitlog.Open(commitlog.Options{Dir: dir, ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("reading the cancels of %s: %w", dir, err)
	}
	defer l.Close()
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.Next() {
		r := it.Record()
		if id, ok := message.CancelTarget(r.Type, r.Payload); ok {
			out[id.Seq] = id.DeliverAt
		}
	}
	return out, it.Err()
}

// repairDone repairs the dispatch log of the segment at start; it returns
// the logs it rewrote and the entries still held (no decision). cancels
// gives the commitlog's cancel records.
func repairDone(dir string, start int64, o DoneRepairOptions, out io.Writer, cancels func() map[uint64]int64) (int, int, error) {
	donePath := filepath.Join(dir, dispatchlog.Name(start))
	schedPath := filepath.Join(dir, schedulelog.Name(start))
	sal, recs, err := dispatchlog.RecordsSalvage(donePath)
	why := ""
	var ce *segfile.CorruptionError
	switch {
	case errors.As(err, &ce):
		why = fmt.Sprintf("its header is damaged (%v)", ce.Err)
		sal = dispatchlog.Salvage{Set: &dispatchlog.Set{}}
	case err != nil:
		return 0, 0, err
	case sal.Damaged():
		why = fmt.Sprintf("%d damaged regions, the first at offset %d (%v); up to %d done-records unknown",
			len(sal.Damage), sal.Damage[0].Offset, sal.Damage[0].Err, sal.Unknown())
	case sal.Missing && start <= time.Now().UnixMilli(): // a bucket not started yet holds nothing
		why = "it is missing and the bucket has started"
	case sal.Lost:
		why = "it was lost and recreated after it (only the done-records written since are known)"
	default:
		return 0, 0, nil
	}
	rd, err := schedulelog.OpenReader(schedPath)
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s to repair its dispatch log: %w", schedPath, err)
	}
	defer rd.Close()
	cl := cancels()
	var undecided []uint64
	readBack := 0
	it := rd.Scan(schedulelog.FirstOffset, -1)
	for it.Next() {
		switch at, ok := cl[it.Seq()]; {
		case sal.Set.Contains(it.Seq()):
		case ok && at == it.Message().DeliverAt:
			// Its cancel is durable in the commitlog: it is never
			// delivered, whatever is assumed of the rest.
			recs = append(recs, dispatchlog.Done{Seq: it.Seq(), Reason: dispatchlog.Cancelled})
			readBack++
		default:
			undecided = append(undecided, it.Seq())
		}
	}
	if err := it.Err(); err != nil {
		return 0, 0, err
	}
	rel := filepath.Join(filepath.Base(dir), dispatchlog.Name(start))
	fmt.Fprintf(out, "  %s: %s: %d valid done-records, %d cancels read back from the commitlog; %d entries of %s are undecided (delivered or not is unknown)\n",
		rel, why, len(recs)-readBack, readBack, len(undecided), schedulelog.Name(start))
	switch o.Assume {
	case AssumeNothing:
		if len(undecided) == 0 {
			break // nothing at stake: rewrite without a decision
		}
		fmt.Fprintf(out, "    held: run again with --assume-delivered (they are never delivered; those not delivered yet are lost) or --assume-pending (all are delivered; those delivered already are delivered again)\n")
		return 0, len(undecided), nil
	case AssumeDelivered:
		for _, seq := range undecided {
			recs = append(recs, dispatchlog.Done{Seq: seq, Reason: dispatchlog.Delivered})
		}
	case AssumePending:
	default:
		return 0, 0, fmt.Errorf("engine: unknown assumption %q: want %q or %q", o.Assume, AssumeDelivered, AssumePending)
	}
	valid := len(recs) - readBack
	if o.Assume == AssumeDelivered {
		valid -= len(undecided)
	}
	act := fmt.Sprintf("rewritten with the %d valid done-records and %d cancels read back", valid, readBack)
	switch {
	case len(undecided) == 0:
	case o.Assume == AssumeDelivered:
		act += fmt.Sprintf(" and %d assumed delivered", len(undecided))
	default:
		act += fmt.Sprintf("; the %d undecided entries stay pending and are delivered", len(undecided))
	}
	if o.DryRun {
		fmt.Fprintf(out, "    would be %s\n", act)
		return 1, 0, nil
	}
	if !sal.Missing {
		if err := o.Keep(donePath); err != nil {
			return 0, 0, err
		}
	}
	if err := replaceDone(dir, start, rd.Duration(), recs); err != nil {
		return 0, 0, fmt.Errorf("rewriting %s: %w", donePath, err)
	}
	fmt.Fprintf(out, "    %s\n", act)
	return 1, 0, nil
}

// replaceDone atomically replaces the dispatch log of the segment at
// start with one holding recs.
func replaceDone(dir string, start int64, d time.Duration, recs []dispatchlog.Done) error {
	tmp, err := os.MkdirTemp(dir, ".repair-done-*"+segfile.TempSuffix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	w, _, err := dispatchlog.Open(tmp, start, d, dispatchlog.Options{})
	if err != nil {
		return err
	}
	if err := w.AppendSync(recs...); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, dispatchlog.Name(start)), filepath.Join(dir, dispatchlog.Name(start))); err != nil {
		return err
	}
	return segfile.SyncDir(dir)
}

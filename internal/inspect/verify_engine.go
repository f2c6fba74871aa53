package inspect

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// engineFindings says what the engine makes of the schedule segments and
// dispatch logs when it loads their buckets: for each damaged region of a
// segment (a Corruption problem of its own), whether the commitlog still
// holds its messages, so that the engine rebuilds them, or which are lost;
// for each damaged dispatch log, how many entries the engine holds back
// until `hourglass repair` decides; and the missing dispatch log of a
// bucket that has started (the engine creates one with every segment, so
// a missing one was lost, and the engine holds the bucket).
func (v *verifier) engineFindings() error {
	dir := v.o.schedDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	first := commitlogFirst(filepath.Join(v.o.Dir, CommitlogDir))
	// A segment whose entries all lie at or above the checkpoint may have
	// been created just before a crash, before its dispatch log: the
	// server recreates that log (nothing of it can have been delivered).
	ckpt, ckOK, ckErr := reput.ReadCheckpoint(dir)
	ckOK = ckOK && ckErr == nil
	for _, e := range ents {
		start, ok := schedulelog.ParseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		rd, err := schedulelog.OpenReader(path)
		if err != nil {
			continue // a damaged header is a problem of its own; a missing file was retired meanwhile
		}
		it := rd.Scan(schedulelog.FirstOffset, -1)
		var lo uint64
		has, n := false, 0
		var seqs []uint64
		for it.Next() {
			if d, ok := mergedDamage(it.Skipped()); ok && !d.Torn { // a torn tail is a problem of its own, and nothing is lost with it
				v.note(path, damagedEntries(d, lo, has, it.Seq(), true, first, v.gone))
			}
			lo, has = it.Seq(), true
			seqs = append(seqs, it.Seq())
			n++
		}
		if d, ok := mergedDamage(it.Skipped()); ok && !d.Torn {
			v.note(path, damagedEntries(d, lo, has, 0, false, first, v.gone))
		}
		rd.Close()
		donePath := filepath.Join(dir, dispatchlog.Name(start))
		sal, err := dispatchlog.LoadSalvage(donePath)
		var ce *segfile.CorruptionError
		why := ""
		switch {
		case errors.As(err, &ce):
			why = "its dispatch log's header is damaged"
			sal = dispatchlog.Salvage{Set: &dispatchlog.Set{}}
		case err != nil:
			continue
		case sal.Damaged():
			why = fmt.Sprintf("its dispatch log is damaged (up to %d done-records unknown)", sal.Unknown())
		case sal.Lost && n > 0 && start <= v.o.Now.UnixMilli():
			why = "its dispatch log was lost and recreated after it (only the done-records written since are known), and the bucket has started"
		case sal.Missing && n > 0 && start <= v.o.Now.UnixMilli() && (!ckOK || int64(seqs[0]) < ckpt):
			// A note, not a problem: a directory written before the engine
			// created every segment's dispatch log with it lacks the log
			// of a bucket nothing was done in yet, and cannot be told from
			// one that lost it.
			v.note(donePath, fmt.Sprintf("the dispatch log of a bucket that has started is missing: which of its %d entries were delivered is unknown (unless the directory was written before dispatch logs were created with their segments: then none was); the server holds them back until `hourglass repair` decides (--assume-delivered or --assume-pending)", n))
			continue
		default:
			continue
		}
		undecided := 0
		for _, s := range seqs {
			if !sal.Set.Contains(s) {
				undecided++
			}
		}
		if undecided > 0 {
			v.note(donePath, fmt.Sprintf("%s: the server holds back the %d entries of %s not recorded done, neither delivering nor dropping them, until `hourglass repair` decides (--assume-delivered or --assume-pending)",
				why, undecided, e.Name()))
		}
	}
	return nil
}

// damagedEntries describes a damaged region d of a segment: the good
// entries around it have seqs lo (if has) and hi (if hasHi), and the
// commitlog holds offsets from first on (-1: no commitlog) but those of
// the spans gone (skipped by repair, or damaged).
func damagedEntries(d schedulelog.Damage, lo uint64, has bool, hi uint64, hasHi bool, first int64, gone []commitlog.Span) string {
	where := fmt.Sprintf("damaged entries at offset %d (%d bytes)", d.Offset, d.End-d.Offset)
	between := fmt.Sprintf("seqs after %d", lo)
	top := int64(math.MaxInt64)
	if hasHi {
		between = fmt.Sprintf("seqs %d to %d", lo+1, hi-1)
		top = int64(hi)
	}
	switch {
	case !has:
		return where + ": before the first whole entry, so their seqs have no lower bound; the server does not rebuild them from the commitlog and delivers the rest of the bucket; `hourglass repair` reports them"
	case first < 0:
		return fmt.Sprintf("%s (%s): no commitlog holds them: those not delivered before are lost; the server delivers the rest of the bucket", where, between)
	}
	var lost []string
	if int64(lo) < first-1 {
		lost = append(lost, fmt.Sprintf("%d to %d (deleted by retention)", lo+1, first-1))
	}
	for _, g := range gone {
		if from, to := max(g.From, int64(lo)+1), min(g.To, top); from < to {
			lost = append(lost, fmt.Sprintf("%d to %d (skipped by `hourglass repair`, or damaged)", from, to-1))
		}
	}
	if len(lost) > 0 {
		return fmt.Sprintf("%s (%s): the commitlog no longer holds seqs %s: messages there not delivered before are lost; the server rebuilds the rest from the commitlog and delivers the bucket's other entries",
			where, between, strings.Join(lost, ", "))
	}
	return fmt.Sprintf("%s (%s): the commitlog still holds them; the server rebuilds them from there when the bucket loads", where, between)
}

// commitlogFirst returns the first offset the commitlog in dir holds (its
// first segment's base), or -1 if it has none.
func commitlogFirst(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	for _, e := range ents { // sorted: the first segment name is the lowest base
		if clName.MatchString(e.Name()) {
			if n, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// mergedDamage returns the regions one Next skipped, between the same two
// good entries, as one.
func mergedDamage(ds []schedulelog.Damage) (schedulelog.Damage, bool) {
	if len(ds) == 0 {
		return schedulelog.Damage{}, false
	}
	d := ds[0]
	for _, o := range ds[1:] {
		d.End, d.Torn = max(d.End, o.End), d.Torn && o.Torn
	}
	return d, true
}

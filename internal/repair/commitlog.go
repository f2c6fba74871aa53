package repair

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// repairCommitlog is the commitlog step (commitlog.Repair), with the reput
// checkpoint as the position the log must reach.
func repairCommitlog(env *env) (int, error) {
	dir := filepath.Join(env.dir, "commitlog")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	ckpt, ok, err := reput.ReadCheckpoint(filepath.Join(env.dir, "schedule"))
	switch {
	case err != nil:
		return 0, fmt.Errorf("the reput checkpoint cannot be read, so the position the commitlog must reach is unknown: %w", err)
	case !ok:
		ckpt = 0
		fmt.Fprintf(env.out, "  no reput checkpoint: every record is taken as not yet routed\n")
	}
	fixes, err := commitlog.Repair(dir, commitlog.RepairOptions{MinEnd: ckpt, DryRun: env.dryRun, Keep: env.keep,
		Progress: env.progress("scanning the commitlog")})
	if err != nil {
		return 0, err
	}
	changes := 0
	var gaps []seqGap // read when a routed span is lost
	gapsRead := false
	for _, f := range fixes {
		rel, _ := filepath.Rel(env.dir, f.File)
		if f.Kind == commitlog.FixTornTail {
			fmt.Fprintf(env.out, "  %s: a torn tail of %d bytes at offset %d (a write cut short, nothing valid after it): the server truncates it when it starts\n",
				rel, f.Bytes(), f.From)
			continue
		}
		changes++
		what := map[commitlog.FixKind]string{
			commitlog.FixSkipDamage:      "damaged records",
			commitlog.FixSkipToMinEnd:    "the log ends below the reput checkpoint",
			commitlog.FixRecreateSegment: "a missing segment file",
		}[f.Kind]
		act := "skip record written at file position " + fmt.Sprint(f.Pos)
		if f.Kind == commitlog.FixRecreateSegment {
			act = "recreated as one skip record"
		}
		if env.dryRun {
			act = "would be " + act
		}
		fmt.Fprintf(env.out, "  %s: %s (%v): offsets %d..%d (%d bytes); %s\n", rel, what, cause(f.Cause), f.From, f.To, f.Bytes(), act)
		if f.Records > 0 {
			fmt.Fprintf(env.out, "    the span held %d records (their headers still chain)\n", f.Records)
		}
		if routed := min(f.To, ckpt) - f.From; routed > 0 {
			if !gapsRead {
				gaps, gapsRead = damagedSeqGaps(filepath.Join(env.dir, "schedule")), true
			}
			// Routed records are in the schedule segments, except where a
			// segment's entries are damaged: the server rebuilds those from
			// the commitlog, which no longer holds them.
			lostHere := false
			for _, g := range gaps {
				from, to := max(f.From, int64(g.lo)+1), min(f.From+routed, int64(g.hi))
				if from >= to {
					continue
				}
				lostHere = true
				fmt.Fprintf(env.out, "    offsets %d..%d: damaged entries of the schedule segment of bucket %s were rebuilt from these records, now gone: those records are LOST\n",
					from, to, g.bucket)
			}
			if !lostHere {
				fmt.Fprintf(env.out, "    offsets %d..%d (%d bytes) were already routed (below the reput checkpoint %d): the schedule segments hold them, nothing is lost\n",
					f.From, f.From+routed, routed, ckpt)
			}
		}
		if lost := f.To - max(f.From, ckpt); lost > 0 {
			if f.Kind == commitlog.FixRecreateSegment {
				fmt.Fprintf(env.out, "    offsets %d..%d were not routed: whatever records the missing file held there are LOST (how many is unknown); no offset in the span is used again\n",
					max(f.From, ckpt), f.To)
			} else {
				recs := "at least one record"
				if f.Records > 0 && f.From >= ckpt {
					recs = fmt.Sprintf("%d records", f.Records)
				}
				fmt.Fprintf(env.out, "    offsets %d..%d (%d bytes, %s) were not routed: those records are LOST\n",
					max(f.From, ckpt), f.To, lost, recs)
			}
		}
	}
	return changes, nil
}

// seqGap is a damaged region of a schedule segment: the seqs of its
// entries lie strictly between lo and hi (the good entries around it).
type seqGap struct {
	bucket string // the segment's bucket start, RFC 3339
	lo, hi uint64
}

// damagedSeqGaps lists the damaged regions of the schedule segments in
// dir (what the server rebuilds from the commitlog while it holds them).
func damagedSeqGaps(dir string) []seqGap {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []seqGap
	for _, e := range ents {
		start, ok := schedulelog.ParseName(e.Name())
		if !ok {
			continue
		}
		bucket := time.UnixMilli(start).UTC().Format(time.RFC3339)
		r, err := schedulelog.OpenReader(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		it := r.Scan(schedulelog.FirstOffset, -1)
		var lo uint64
		for it.Next() {
			if len(it.Skipped()) > 0 {
				out = append(out, seqGap{bucket: bucket, lo: lo, hi: it.Seq()})
			}
			lo = it.Seq()
		}
		if ds := it.Skipped(); len(ds) > 0 && !ds[len(ds)-1].Torn {
			out = append(out, seqGap{bucket: bucket, lo: lo, hi: math.MaxInt64})
		}
		r.Close()
	}
	return out
}

// cause returns the innermost useful text of a fix's cause.
func cause(err error) string {
	var ce *segfile.CorruptionError
	if errors.As(err, &ce) {
		return ce.Err.Error()
	}
	if err == nil {
		return "damaged"
	}
	return err.Error()
}

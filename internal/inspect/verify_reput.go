package inspect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// reputFiles checks reput's own files in the schedule directory and what
// they say about the segments: the checkpoint and the retired log (missing,
// damaged, or disagreeing), segment headers that disagree with their
// names, and entries of retired buckets that are in a segment again (they
// would be delivered a second time).
func (v *verifier) reputFiles(dir string, l schedListing) error {
	ckPath, rlPath := filepath.Join(dir, reput.CheckpointName), filepath.Join(dir, reput.RetiredName)
	routed := len(l.segs) > 0 || v.end > 0
	repair := fmt.Sprintf("; run `hourglass repair --data-dir %s` with the server stopped", v.o.Dir)

	ck, ckOK, ckErr := reput.ReadCheckpointInfo(dir)
	if ckOK || ckErr != nil {
		v.counted(ckPath)
	}
	rl, rlOK, rlErr := reput.ReadRetired(dir)
	recs := rl.Records
	if rlOK {
		v.counted(rlPath)
	}
	rlGood := rlOK && rlErr == nil

	// The checkpoint.
	switch {
	case ckErr != nil:
		detail := v.o.relErr(ckErr)
		if rlGood {
			detail += "; the next start resumes from the retired log's floor and writes it again (nothing is delivered twice)"
		} else {
			detail += "; with the retired log also lost, the server refuses to start" + repair
		}
		v.problem(ckPath, 0, Corruption, detail)
	case !ckOK && routed:
		detail := "no reput checkpoint"
		if rlGood {
			detail += "; the next start resumes from the retired log's floor and writes it again (nothing is delivered twice)"
		} else {
			detail += " and no retired log: which buckets were delivered and deleted is unknown, and the server refuses to start" + repair
		}
		v.problem(ckPath, -1, Missing, detail)
	case ckOK && v.end >= 0 && ck.Position > v.end:
		v.problem(ckPath, 8, Corruption, fmt.Sprintf("position %d is past the end of the commitlog (%d): commitlog data that was routed is gone", ck.Position, v.end))
	}

	// The retired log.
	var ce *segfile.CorruptionError
	switch {
	case errors.As(rlErr, &ce):
		v.problem(rlPath, ce.Offset, Corruption, v.o.relErr(ce.Err)+"; the server refuses to start"+repair)
	case rlErr != nil:
		return fmt.Errorf("%s: %w", v.o.rel(rlPath), rlErr)
	case !rlOK && ckOK && ck.Version >= 2:
		detail := "the retired log is missing"
		if ck.Retired > 0 {
			detail += fmt.Sprintf("; the checkpoint counts %d retired buckets, and the server refuses to start", ck.Retired) + repair
		} else {
			detail += "; the checkpoint counts no retirement, so the next start creates it again"
		}
		v.problem(rlPath, -1, Missing, detail)
	case rlOK && rl.Torn > 0:
		v.problem(rlPath, rl.Size, TornTail, fmt.Sprintf("%d bytes after the last whole record (an append cut short by a crash); the next start cuts them", rl.Torn))
	}
	if rlGood && ckOK && ck.Version >= 2 && uint64(len(recs)) < ck.Retired {
		v.problem(rlPath, -1, Corruption, fmt.Sprintf("it holds %d retirements, the checkpoint counted %d: records are lost, and the server refuses to start%s", len(recs), ck.Retired, repair))
	}

	// Segments: headers against names, entries of retired buckets.
	for _, name := range l.segs {
		path := filepath.Join(dir, name)
		start, _ := schedulelog.ParseName(name)
		h, err := readHeader(path, schedulelog.Magic)
		if err != nil {
			continue // reported by the segment's own check, or deleted meanwhile
		}
		if h.Start != start {
			v.problem(path, 16, Corruption, fmt.Sprintf("the header's bucket start %s does not match the file name%s",
				time.UnixMilli(h.Start).UTC().Format(time.RFC3339), repair))
			continue
		}
		if rlGood {
			if err := v.reappeared(path, h, recs); err != nil {
				return err
			}
		}
	}
	return nil
}

// reappeared reports the entries of segment path that belong to a retired
// bucket: routed again after the bucket was delivered and deleted.
func (v *verifier) reappeared(path string, h segfile.Header, recs []reput.Retirement) error {
	var spans []reput.Retirement
	for _, r := range recs {
		end := r.Start + r.Duration.Milliseconds()
		if r.Duration > 0 && r.SeqEnd > 0 && r.Start < h.End() && end > h.Start {
			spans = append(spans, r)
		}
	}
	if len(spans) == 0 {
		return nil
	}
	rd, err := schedulelog.OpenReader(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return nil // reported by the segment's own check
	}
	defer rd.Close()
	// Entries its dispatch log marks done are not delivered again: beside a
	// running server they are those of a bucket being retired (the
	// retirement is recorded before the files are deleted).
	done, _, err := dispatchlog.Load(filepath.Join(filepath.Dir(path), dispatchlog.Name(h.Start)))
	if err != nil {
		done = nil // a damaged dispatch log is reported by its own check
	}
	n, first := 0, int64(-1)
	it := rd.Iter()
	for it.Next() {
		if done != nil && done.Contains(it.Seq()) {
			continue
		}
		at := it.Message().DeliverAt
		for _, r := range spans {
			if at >= r.Start && at < r.Start+r.Duration.Milliseconds() && it.Seq() < r.SeqEnd {
				if first < 0 {
					first = it.Offset()
				}
				n++
				break
			}
		}
	}
	if n > 0 {
		v.problem(path, first, Corruption, fmt.Sprintf("%d entries of a bucket that was retired (delivered and deleted) are here again: they would be delivered a second time", n))
	}
	return nil
}

package reput

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// The segment list is built from file names at start-up (I5): a
// segment's duration, which only its header holds, is read the first time
// something needs it (routing or a cancel into the bucket, or its dispatch
// log), and kept. Segments written in this run are known whole.

// resolveAt reads the header of the segment that may hold deliverAt (the
// last one starting at or before it) if its duration is not known yet.
func (r *Reput) resolveAt(deliverAt int64) error {
	r.segsMu.RLock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start > deliverAt }) - 1
	var start int64
	need := i >= 0 && r.segs[i].Duration == 0
	if need {
		start = r.segs[i].Start
	}
	r.segsMu.RUnlock()
	if !need {
		return nil
	}
	return r.resolveStart(start)
}

// resolveStart reads the header of the segment starting at start if its
// duration is not known yet. A damaged header is reported and returned.
func (r *Reput) resolveStart(start int64) error {
	si, err := schedulelog.Stat(r.opts.Dir, start)
	if err != nil {
		var ce *segfile.CorruptionError
		if errors.As(err, &ce) {
			r.reportDamaged(start, err)
		}
		return err
	}
	r.segsMu.Lock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= start })
	if i < len(r.segs) && r.segs[i].Start == start && r.segs[i].Duration == 0 {
		r.segs[i] = si
	}
	r.segsMu.Unlock()
	return nil
}

// reportDamaged logs and counts a segment found damaged, once per bucket.
func (r *Reput) reportDamaged(start int64, err error) {
	r.damagedMu.Lock()
	if r.damagedSeen == nil {
		r.damagedSeen = map[int64]bool{}
	}
	first := !r.damagedSeen[start]
	r.damagedSeen[start] = true
	r.damagedMu.Unlock()
	if first {
		r.stats.damaged.Add(1)
		r.log.Error("reput: damaged schedule segment; its bucket cannot be routed to or cancelled in until it is repaired (hourglass repair)",
			"bucket", time.UnixMilli(start).UTC().Format(time.RFC3339), "err", err)
	}
}

// segmentErr returns the segment starting at bucket, its duration known.
func (r *Reput) segmentErr(bucket int64) (schedulelog.SegmentInfo, bool, error) {
	seg, ok := r.segmentName(bucket)
	if !ok || seg.Duration != 0 {
		return seg, ok, nil
	}
	if err := r.resolveStart(bucket); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return schedulelog.SegmentInfo{}, false, nil
		}
		return schedulelog.SegmentInfo{}, false, err
	}
	seg, ok = r.segmentName(bucket)
	return seg, ok, nil
}

// segmentName returns the listed segment starting at bucket, whose
// duration may be unknown (0).
func (r *Reput) segmentName(bucket int64) (schedulelog.SegmentInfo, bool) {
	r.segsMu.RLock()
	defer r.segsMu.RUnlock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= bucket })
	if i < len(r.segs) && r.segs[i].Start == bucket {
		return r.segs[i], true
	}
	return schedulelog.SegmentInfo{}, false
}

// syncFile is the fsync of reput's own files (the retired log): the
// schedule writers' injected one in tests.
func (r *Reput) syncFile(f *os.File) error {
	if r.opts.schedule.SyncFile != nil {
		return r.opts.schedule.SyncFile(f)
	}
	return f.Sync()
}

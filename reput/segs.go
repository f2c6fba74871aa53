package reput

import (
	"errors"
	"io/fs"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// segList is the schedule segments reput knows, sorted by start. It is
// built from file names at start-up (I5): a segment's duration, which
// only its header holds, is read the first time something needs it
// (routing or a cancel into the bucket, or its dispatch log), and kept.
// Segments written in this run are known whole. Any goroutine may read
// it; the routing goroutine adds and removes segments.
type segList struct {
	dir string
	log *slog.Logger

	mu struct {
		sync.RWMutex
		list []schedulelog.SegmentInfo
		// fresh are the starts of the segments created in this run: their
		// dispatch logs, if missing, are not lost yet (OnSegment has not
		// run for them).
		fresh map[int64]bool
		// removed counts the segments taken off the list (Reput.Removed).
		removed uint64
	}
	// damaged are the buckets whose segments were found damaged, each
	// reported once (Stats.Damaged counts them).
	damaged struct {
		sync.Mutex
		seen map[int64]bool
	}
}

// snapshot returns a copy of the list.
func (s *segList) snapshot() []schedulelog.SegmentInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]schedulelog.SegmentInfo(nil), s.mu.list...)
}

// find returns the segment whose bucket holds deliverAtMs (Reput.FindSegment).
func (s *segList) find(deliverAtMs int64) (schedulelog.SegmentInfo, bool) {
	if err := s.resolveAt(deliverAtMs); err != nil {
		return schedulelog.SegmentInfo{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	i, ok := schedulelog.Find(s.mu.list, deliverAtMs)
	if !ok {
		return schedulelog.SegmentInfo{}, false
	}
	return s.mu.list[i], true
}

// place returns the segment deliverAt belongs to (schedulelog.Place):
// the listed one, or the one to create, of duration d.
func (s *segList) place(deliverAt int64, d time.Duration) (schedulelog.SegmentInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return schedulelog.Place(s.mu.list, deliverAt, d)
}

// add lists a segment reput created, and reports whether it was not
// listed before.
func (s *segList) add(info schedulelog.SegmentInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.fresh == nil {
		s.mu.fresh = map[int64]bool{}
	}
	s.mu.fresh[info.Start] = true
	i := sort.Search(len(s.mu.list), func(i int) bool { return s.mu.list[i].Start >= info.Start })
	if i < len(s.mu.list) && s.mu.list[i].Start == info.Start {
		s.mu.list[i] = info
		return false
	}
	s.mu.list = append(s.mu.list, schedulelog.SegmentInfo{})
	copy(s.mu.list[i+1:], s.mu.list[i:])
	s.mu.list[i] = info
	return true
}

// remove takes the segment starting at bucket off the list.
func (s *segList) remove(bucket int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.mu.list), func(i int) bool { return s.mu.list[i].Start >= bucket })
	if i < len(s.mu.list) && s.mu.list[i].Start == bucket {
		s.mu.list = append(s.mu.list[:i], s.mu.list[i+1:]...)
		s.mu.removed++
	}
	delete(s.mu.fresh, bucket)
}

// removals returns how many segments were taken off the list.
func (s *segList) removals() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.removed
}

// isFresh reports whether the segment starting at bucket was created in
// this run.
func (s *segList) isFresh(bucket int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.fresh[bucket]
}

// resolveAt reads the header of the segment that may hold deliverAt (the
// last one starting at or before it) if its duration is not known yet.
func (s *segList) resolveAt(deliverAt int64) error {
	s.mu.RLock()
	i := sort.Search(len(s.mu.list), func(i int) bool { return s.mu.list[i].Start > deliverAt }) - 1
	var start int64
	need := i >= 0 && s.mu.list[i].Duration == 0
	if need {
		start = s.mu.list[i].Start
	}
	s.mu.RUnlock()
	if !need {
		return nil
	}
	return s.resolveStart(start)
}

// resolveStart reads the header of the segment starting at start if its
// duration is not known yet. A damaged header is reported and returned.
func (s *segList) resolveStart(start int64) error {
	si, err := schedulelog.Stat(s.dir, start)
	if err != nil {
		var ce *segfile.CorruptionError
		if errors.As(err, &ce) {
			s.reportDamaged(start, err)
		}
		return err
	}
	s.mu.Lock()
	i := sort.Search(len(s.mu.list), func(i int) bool { return s.mu.list[i].Start >= start })
	if i < len(s.mu.list) && s.mu.list[i].Start == start && s.mu.list[i].Duration == 0 {
		s.mu.list[i] = si
	}
	s.mu.Unlock()
	return nil
}

// reportDamaged logs and counts a segment found damaged, once per bucket.
func (s *segList) reportDamaged(start int64, err error) {
	s.damaged.Lock()
	if s.damaged.seen == nil {
		s.damaged.seen = map[int64]bool{}
	}
	first := !s.damaged.seen[start]
	s.damaged.seen[start] = true
	s.damaged.Unlock()
	if first {
		s.log.Error("reput: damaged schedule segment; its bucket cannot be routed to or cancelled in until it is repaired (hourglass repair)",
			"bucket", time.UnixMilli(start).UTC().Format(time.RFC3339), "err", err)
	}
}

// damagedCount is the number of buckets reported damaged.
func (s *segList) damagedCount() int64 {
	s.damaged.Lock()
	defer s.damaged.Unlock()
	return int64(len(s.damaged.seen))
}

// get returns the segment starting at bucket, its duration known.
func (s *segList) get(bucket int64) (schedulelog.SegmentInfo, bool, error) {
	seg, ok := s.named(bucket)
	if !ok || seg.Duration != 0 {
		return seg, ok, nil
	}
	if err := s.resolveStart(bucket); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return schedulelog.SegmentInfo{}, false, nil
		}
		return schedulelog.SegmentInfo{}, false, err
	}
	seg, ok = s.named(bucket)
	return seg, ok, nil
}

// named returns the listed segment starting at bucket, whose duration
// may be unknown (0).
func (s *segList) named(bucket int64) (schedulelog.SegmentInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.mu.list), func(i int) bool { return s.mu.list[i].Start >= bucket })
	if i < len(s.mu.list) && s.mu.list[i].Start == bucket {
		return s.mu.list[i], true
	}
	return schedulelog.SegmentInfo{}, false
}

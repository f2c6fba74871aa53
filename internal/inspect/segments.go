package inspect

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// State says where a schedule segment stands at a given time.
type State string

// Segment states, decided in this order:
const (
	// Damaged: the segment or its dispatch log could not be read to the
	// end; counts cover what was read.
	Damaged State = "damaged"
	// Empty: the segment holds no entries.
	Empty State = "empty"
	// Done: every entry is done; the server deletes the segment once its
	// bucket is over and reput's checkpoint covers it.
	Done State = "done"
	// Overdue: the bucket is over and entries are still pending (the
	// server was down, or is draining a backlog oldest bucket first).
	Overdue State = "overdue"
	// Loaded: now is at least the preload lead before the bucket's start:
	// a running server holds its pending entries in memory.
	Loaded State = "loaded"
	// Future: not loaded yet; it costs disk only.
	Future State = "future"
)

// Segment describes one schedule segment and its dispatch log.
type Segment struct {
	Name     string        // file name, e.g. 20261130T050000Z.sched
	Start    time.Time     // bucket start, UTC
	Duration time.Duration // bucket length
	Size     int64         // bytes of the .sched file
	DoneSize int64         // bytes of the .done file, 0 when there is none
	Entries  int           // entries read
	// Done is the number of entries that are done; Delivered, Cancelled
	// and DeadLettered split it by the reason first recorded.
	Done, Delivered, Cancelled, DeadLettered int
	Pending                                  int // Entries - Done
	State                                    State
	// TornAt is the offset of an incomplete record at the end of the
	// segment (a write in progress, or a crash's torn tail), 0 if none.
	TornAt int64
	// Err is the damage that stopped reading the segment or its dispatch
	// log (then State is Damaged).
	Err error
	// DoneUnknown says the dispatch log could not be read, so Done and
	// Pending are not known (Pending counts every entry).
	DoneUnknown bool
}

// End is the first instant after the bucket.
func (s *Segment) End() time.Time { return s.Start.Add(s.Duration) }

// doneIndex says why each done seq is done: records sorted by seq, the
// first record of a seq kept.
type doneIndex []dispatchlog.Done

func loadDone(path string) (doneIndex, int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	recs, err := dispatchlog.Records(path)
	if err != nil {
		return nil, fi.Size(), err
	}
	slices.SortStableFunc(recs, func(a, b dispatchlog.Done) int { return cmp.Compare(a.Seq, b.Seq) })
	recs = slices.CompactFunc(recs, func(a, b dispatchlog.Done) bool { return a.Seq == b.Seq })
	return doneIndex(recs), fi.Size(), nil
}

// reason returns why seq is done, or 0 if it is not.
func (d doneIndex) reason(seq uint64) dispatchlog.Reason {
	i, ok := slices.BinarySearchFunc(d, seq, func(r dispatchlog.Done, s uint64) int { return cmp.Compare(r.Seq, s) })
	if !ok {
		return 0
	}
	return d[i].Reason
}

// entryFunc is called for each entry of a scanned segment with its
// offset, seq, message (valid during the call) and done reason (0:
// pending; reasonUnknown: the dispatch log could not be read).
type entryFunc func(off int64, seq uint64, m *message.Message, r dispatchlog.Reason) error

// reasonUnknown is passed to an entryFunc when the dispatch log is damaged.
const reasonUnknown dispatchlog.Reason = 0xff

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// scanSegment reads the segment at path and its dispatch log, calling fn
// for each entry. It returns a Segment with counts; damage goes in
// Segment.Err, and the error is for failures to read at all (or fn's).
// A segment deleted before it could be opened returns fs.ErrNotExist.
func (o *Options) scanSegment(name string, fn entryFunc) (Segment, error) {
	dir := o.schedDir()
	path := filepath.Join(dir, name)
	seg := Segment{Name: name}
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		var ce *segfile.CorruptionError
		if errors.As(err, &ce) {
			if start, ok := schedulelog.ParseName(name); ok {
				seg.Start = time.UnixMilli(start).UTC()
			}
			seg.Err, seg.State = err, Damaged
			if fi, serr := os.Stat(path); serr == nil {
				seg.Size = fi.Size()
			}
			return seg, nil
		}
		return seg, err
	}
	defer rd.Close()
	seg.Start = time.UnixMilli(rd.Start()).UTC()
	seg.Duration = rd.Duration()
	if fi, err := os.Stat(path); err == nil {
		seg.Size = fi.Size()
	}
	done, doneSize, derr := loadDone(filepath.Join(dir, dispatchlog.Name(rd.Start())))
	seg.DoneSize = doneSize
	if derr != nil {
		var ce *segfile.CorruptionError
		if !errors.As(derr, &ce) {
			return seg, derr
		}
		seg.Err, seg.DoneUnknown = derr, true
		done = nil
	}
	it := rd.Iter()
	for it.Next() {
		seg.Entries++
		r := done.reason(it.Seq())
		if seg.DoneUnknown {
			r = reasonUnknown
		}
		switch r {
		case dispatchlog.Delivered:
			seg.Delivered++
		case dispatchlog.Cancelled:
			seg.Cancelled++
		case dispatchlog.DeadLettered:
			seg.DeadLettered++
		}
		if r != 0 && r != reasonUnknown {
			seg.Done++
		}
		if fn != nil {
			if err := fn(it.Offset(), it.Seq(), it.Message(), r); err == errStop {
				break
			} else if err != nil {
				return seg, err
			}
		}
	}
	if err := it.Err(); err != nil {
		var ce *segfile.CorruptionError
		if !errors.As(err, &ce) {
			return seg, err
		}
		seg.Err = err
	}
	if off, ok := it.Torn(); ok {
		seg.TornAt = off
	}
	seg.Pending = seg.Entries - seg.Done
	seg.State = o.state(&seg)
	return seg, nil
}

func (o *Options) state(s *Segment) State {
	switch {
	case s.Err != nil:
		return Damaged
	case s.Entries == 0:
		return Empty
	case s.Pending == 0:
		return Done
	case !o.Now.Before(s.End()):
		return Overdue
	case !o.Now.Before(s.Start.Add(-o.lead(s.Duration))):
		return Loaded
	}
	return Future
}

// Totals add up segments.
type Totals struct {
	Segments                           int
	Size                               int64 // .sched and .done bytes
	Entries, Done, Pending             int
	Delivered, Cancelled, DeadLettered int
	ByState                            map[State]int
}

func (t *Totals) add(s *Segment) {
	if t.ByState == nil {
		t.ByState = map[State]int{}
	}
	t.Segments++
	t.Size += s.Size + s.DoneSize
	t.Entries += s.Entries
	t.Done += s.Done
	if !s.DoneUnknown {
		t.Pending += s.Pending // a segment with a damaged dispatch log adds none: unknown
	}
	t.Delivered += s.Delivered
	t.Cancelled += s.Cancelled
	t.DeadLettered += s.DeadLettered
	t.ByState[s.State]++
}

// Segments reads every schedule segment in time order, with its entries
// and done counts, and adds them up.
func Segments(o Options) ([]Segment, Totals, error) {
	var tot Totals
	if err := o.check(); err != nil {
		return nil, tot, err
	}
	l, err := listSchedule(o.schedDir())
	if err != nil {
		return nil, tot, err
	}
	p := o.progress()
	p.Begin("segments", int64(len(l.segs)))
	defer p.End()
	var out []Segment
	for _, name := range l.segs {
		seg, err := o.scanSegment(name, nil)
		p.Add(1)
		if errors.Is(err, fs.ErrNotExist) {
			continue // retired while we listed
		}
		if err != nil {
			return out, tot, err
		}
		tot.add(&seg)
		out = append(out, seg)
	}
	return out, tot, nil
}

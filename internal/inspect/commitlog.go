package inspect

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/reput"
)

// clHeaderSize is the commitlog segment header (docs/FORMAT.md).
const clHeaderSize = 32

var clName = regexp.MustCompile(`^[0-9]{20}\.log$`)

// ClSegment is one commitlog segment file.
type ClSegment struct {
	Name    string
	Base    int64 // offset of its first data byte
	Size    int64 // file size (preallocated)
	Records int   // records read in it
	Used    int64 // bytes of data: from Base to the end of its last record
	// Role is "sealed", "active" (the last holding data) or "spare"
	// (preallocated, after the active one).
	Role string
}

// Capacity is the segment's data space.
func (s *ClSegment) Capacity() int64 { return max(0, s.Size-clHeaderSize) }

// Commitlog describes the commitlog and reput's position in it.
type Commitlog struct {
	Segments []ClSegment
	First    int64 // offset of the oldest retained data
	End      int64 // offset one past the last whole record
	Records  int
	// Checkpoint is reput's durable position: every record below it is in
	// the schedule segments or dispatch logs. HasCheckpoint is false when
	// there is none (then reput starts from First).
	Checkpoint    int64
	HasCheckpoint bool
	CheckpointErr error // a damaged checkpoint
	// Err is what stopped the reading of records (damage); the counts
	// cover what came before it.
	Err error
}

// listCommitlog returns the segment files in offset order, with sizes.
func listCommitlog(dir string) ([]ClSegment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []ClSegment
	for _, e := range ents {
		if !clName.MatchString(e.Name()) {
			continue
		}
		base, err := strconv.ParseInt(e.Name()[:20], 10, 64)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted by retention
		}
		segs = append(segs, ClSegment{Name: e.Name(), Base: base, Size: fi.Size()})
	}
	slices.SortFunc(segs, func(a, b ClSegment) int { return cmp.Compare(a.Base, b.Base) })
	return segs, nil
}

// openCommitlog opens the commitlog read-only: a snapshot of what is
// visible now, never recovering or truncating anything.
func (o *Options) openCommitlog() (*commitlog.Log, error) {
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(o.Dir, CommitlogDir), ReadOnly: true})
	return l, err
}

// ReadCommitlog lists the commitlog's segments, counts the records in
// each, and reads reput's checkpoint.
func ReadCommitlog(o Options) (Commitlog, error) {
	var c Commitlog
	if err := o.check(); err != nil {
		return c, err
	}
	dir := filepath.Join(o.Dir, CommitlogDir)
	segs, err := listCommitlog(dir)
	if err != nil {
		return c, fmt.Errorf("commitlog: %w", err)
	}
	c.Segments = segs
	c.Checkpoint, c.HasCheckpoint, c.CheckpointErr = reput.ReadCheckpoint(o.schedDir())
	if len(segs) == 0 {
		return c, nil
	}
	c.First = segs[0].Base
	c.End = c.First
	l, err := o.openCommitlog()
	if err != nil {
		c.Err = err
		setRoles(&c)
		return c, nil
	}
	defer l.Close()
	c.First, c.End = l.FirstOffset(), l.EndOffset()
	p := o.progress()
	p.Begin("commitlog", c.End-c.First)
	defer p.End()
	it, err := l.NewIterator(c.First)
	if err != nil {
		c.Err = err
		return c, nil
	}
	defer it.Close()
	i, last := 0, c.First
	for it.Next() {
		off := it.Offset()
		for i+1 < len(c.Segments) && off >= c.Segments[i+1].Base {
			i++
		}
		s := &c.Segments[i]
		s.Records++
		s.Used = off + int64(record.Size(len(it.Record().Payload))) - s.Base
		c.Records++
		p.Add(it.Pos() - last)
		last = it.Pos()
	}
	c.Err = it.Err()
	setRoles(&c)
	return c, nil
}

func setRoles(c *Commitlog) {
	active := len(c.Segments) - 1
	for active > 0 && c.Segments[active].Records == 0 {
		active--
	}
	for i := range c.Segments {
		switch {
		case i < active:
			c.Segments[i].Role = "sealed"
		case i == active:
			c.Segments[i].Role = "active"
		default:
			c.Segments[i].Role = "spare"
		}
	}
}

// ClRecord is one commitlog record, decoded.
type ClRecord struct {
	Offset int64
	Type   uint8
	Size   int // framed bytes
	// Routed says reput's checkpoint is past it.
	Routed bool
	// Schedule records:
	ID        message.ID
	Topic     string
	DeliverAt time.Time
	Attempt   uint32
	Body      []byte // a copy
	// Cancel records: the message to cancel.
	Target message.ID
	// Err is set for a payload that does not decode.
	Err error
}

// TypeName names a commitlog record type.
func TypeName(t uint8) string {
	switch t {
	case message.TypeSchedule:
		return "schedule"
	case message.TypeCancel:
		return "cancel"
	}
	return fmt.Sprintf("type-%d", t)
}

// DumpCommitlog calls fn for each record from the first at or after
// offset from, at most limit records if limit is positive. An offset below
// the oldest retained data starts at the oldest; one past the end is an
// error that says what the range is.
func DumpCommitlog(o Options, from int64, limit int, fn func(*ClRecord) error) error {
	if err := o.check(); err != nil {
		return err
	}
	l, err := o.openCommitlog()
	if err != nil {
		return err
	}
	defer l.Close()
	first, end := l.FirstOffset(), l.EndOffset()
	if from > end {
		return fmt.Errorf("offset %d is past the end of the commitlog: its records are in [%d, %d)", from, first, end)
	}
	// Records start at segment bases: start at the base of the segment
	// holding from, and skip what lies before from.
	start := first
	if segs, err := listCommitlog(filepath.Join(o.Dir, CommitlogDir)); err == nil {
		for _, s := range segs {
			if s.Base <= from && s.Base >= first {
				start = s.Base
			}
		}
	}
	it, err := l.NewIterator(start)
	if errors.Is(err, commitlog.ErrOffsetTrimmed) {
		it, err = l.NewIterator(l.FirstOffset())
	}
	if err != nil {
		return err
	}
	defer it.Close()
	ckpt, hasCkpt, _ := reput.ReadCheckpoint(o.schedDir())
	n := 0
	var m message.Message
	for it.Next() {
		if it.Offset() < from {
			continue
		}
		if limit > 0 && n >= limit {
			return nil
		}
		n++
		rec := it.Record()
		r := &ClRecord{Offset: it.Offset(), Type: rec.Type, Size: record.Size(len(rec.Payload)),
			Routed: hasCkpt && it.Offset() < ckpt}
		switch rec.Type {
		case message.TypeSchedule:
			if err := message.DecodeSchedule(rec.Payload, &m); err != nil {
				r.Err = err
				break
			}
			r.ID = message.ID{DeliverAt: m.DeliverAt, Seq: uint64(it.Offset())}
			r.Topic, r.DeliverAt, r.Attempt = string(m.Topic), time.UnixMilli(m.DeliverAt).UTC(), m.Attempt
			r.Body = append([]byte(nil), m.Body...)
		case message.TypeCancel:
			r.Target, r.Err = message.DecodeCancel(rec.Payload)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return it.Err()
}

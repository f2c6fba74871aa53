package inspect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// Entry is one entry of a schedule segment.
type Entry struct {
	Offset    int64 // in the segment file
	ID        message.ID
	Topic     string
	DeliverAt time.Time
	Attempt   uint32
	Headers   []message.Header // copies
	Body      []byte           // a copy
	Origin    message.ID       // the first attempt's ID for a retry
	State     string           // pending, delivered, cancelled, dead-lettered, or unknown (dispatch log damaged)
}

// DumpFilter selects the entries Dump yields.
type DumpFilter struct {
	Topic       string // only this topic, if set
	PendingOnly bool   // only entries not known to be done
	Limit       int    // at most this many, if positive
}

// FindSegment resolves what names a segment: a path to a .sched file, a
// file name in the data directory's schedule directory, or (when at is not
// zero) the segment whose bucket holds at. It returns the file name within
// the schedule directory.
func FindSegment(o Options, file string, at time.Time) (string, error) {
	if err := o.check(); err != nil {
		return "", err
	}
	dir := o.schedDir()
	if file == "" {
		l, err := listSchedule(dir)
		if err != nil {
			return "", err
		}
		ms := at.UnixMilli()
		var near []string
		for _, name := range l.segs {
			rd, err := schedulelog.OpenReader(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			start, end := rd.Start(), rd.Start()+rd.Duration().Milliseconds()
			rd.Close()
			if start <= ms && ms < end {
				return name, nil
			}
			near = append(near, name)
		}
		if len(near) == 0 {
			return "", fmt.Errorf("no schedule segment holds %s: %s has none", at.UTC().Format(time.RFC3339), o.rel(dir))
		}
		return "", fmt.Errorf("no schedule segment holds %s; there are %d, from %s to %s (see 'inspect segments')",
			at.UTC().Format(time.RFC3339), len(near), near[0], near[len(near)-1])
	}
	if _, ok := schedulelog.ParseName(filepath.Base(file)); !ok {
		return "", fmt.Errorf("%s is not a schedule segment: want a name like 20261130T050000Z.sched", file)
	}
	for _, p := range []string{file, filepath.Join(dir, file)} {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() {
			abs, aerr := filepath.Abs(p)
			sdir, serr := filepath.Abs(dir)
			if aerr != nil || serr != nil || filepath.Dir(abs) != sdir {
				return "", fmt.Errorf("%s is not in %s: dump reads segments of --data-dir, where their dispatch logs are", file, dir)
			}
			return filepath.Base(p), nil
		}
		if strings.ContainsRune(file, filepath.Separator) {
			break
		}
	}
	return "", fmt.Errorf("no segment %s in %s", filepath.Base(file), dir)
}

// Dump reads the segment name (in the schedule directory) and calls fn
// for each entry that passes the filter, in file order (seq order).
// The returned Segment has the counts of the whole segment, up to any
// damage (Segment.Err).
func Dump(o Options, name string, f DumpFilter, fn func(*Entry) error) (Segment, error) {
	if err := o.check(); err != nil {
		return Segment{}, err
	}
	n := 0
	seg, err := o.scanSegment(name, func(off int64, seq uint64, m *message.Message, r dispatchlog.Reason) error {
		if f.Topic != "" && string(m.Topic) != f.Topic || f.PendingOnly && r != 0 && r != reasonUnknown {
			return nil
		}
		if f.Limit > 0 && n >= f.Limit {
			return nil // keep counting the segment
		}
		n++
		e := &Entry{
			Offset:    off,
			ID:        message.ID{DeliverAt: m.DeliverAt, Seq: seq},
			Topic:     string(m.Topic),
			DeliverAt: time.UnixMilli(m.DeliverAt).UTC(),
			Attempt:   m.Attempt,
			Body:      append([]byte(nil), m.Body...),
			Origin:    m.Origin,
			State:     "pending",
		}
		for _, h := range m.Headers {
			e.Headers = append(e.Headers, message.Header{Key: append([]byte(nil), h.Key...), Value: append([]byte(nil), h.Value...)})
		}
		switch r {
		case 0:
		case reasonUnknown:
			e.State = "unknown"
		default:
			e.State = r.String()
		}
		return fn(e)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return seg, fmt.Errorf("segment %s is gone (retired by the server after everything in it was done)", name)
	}
	return seg, err
}

package inspect

import (
	"errors"
	"io/fs"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
)

// Timeline counts pending messages by hour ahead of Now.
type Timeline struct {
	Now   time.Time
	Hours []int64 // Hours[i]: due in [Now + i h, Now + (i+1) h)
	// Overdue are due before Now; Later are due at or after the last hour.
	Overdue, Later int64
	// Damaged lists segments that could not be read to the end (their
	// messages after the damage are not counted) or whose dispatch log is
	// damaged (all their messages are counted as pending).
	Damaged []string
}

// Total is the number of pending messages counted.
func (t *Timeline) Total() int64 {
	n := t.Overdue + t.Later
	for _, h := range t.Hours {
		n += h
	}
	return n
}

// ReadTimeline reads every schedule segment and counts the entries not
// done by hour ahead, for hours hours.
func ReadTimeline(o Options, hours int) (Timeline, error) {
	t := Timeline{Now: o.Now.UTC(), Hours: make([]int64, max(hours, 0))}
	if err := o.check(); err != nil {
		return t, err
	}
	l, err := listSchedule(o.schedDir())
	if err != nil {
		return t, err
	}
	now := o.Now.UnixMilli()
	horizon := now + int64(hours)*time.Hour.Milliseconds()
	p := o.progress()
	p.Begin("timeline", int64(len(l.segs)))
	defer p.End()
	for _, name := range l.segs {
		seg, err := o.scanSegment(name, func(_ int64, _ uint64, m *message.Message, r dispatchlog.Reason) error {
			switch at := m.DeliverAt; {
			case r != 0 && r != reasonUnknown:
			case at < now:
				t.Overdue++
			case at >= horizon:
				t.Later++
			default:
				t.Hours[(at-now)/time.Hour.Milliseconds()]++
			}
			return nil
		})
		p.Add(1)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return t, err
		}
		if seg.Err != nil {
			t.Damaged = append(t.Damaged, name)
		}
	}
	return t, nil
}

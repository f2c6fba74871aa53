package crashtest

import (
	"time"

	"github.com/hourglassmq/hourglass/recur"
)

// missedRun follows one definition's grid, delivered occurrence by
// occurrence, for the bound of FIRE_ALL: the server counts the missed
// occurrences it delivers in a row (an occurrence is missed when it was
// due before the server process firing it opened; recur.Def.Missed, kept
// across restarts, reset by an occurrence fired in time), and once it has
// delivered recur.MaxMissed of them it arms the first occurrence after
// the moment it fires the last one, not the next on the grid
// (docs/DESIGN.md "Recurring schedules"). The run of grid times skipped
// then is allowed (capped) when
//
//   - the occurrences delivered in a row before it, at least
//     recur.MaxMissed of them (an earlier capped run does not break the
//     row: the server's count is not reset by it), may each have been
//     missed: some server process was started before the occurrence was
//     first received and found ready (or gone) after the occurrence was
//     due, so it may have opened after it; and
//   - the last time skipped is not after the last occurrence before the
//     run was first received: the server armed the first occurrence after
//     the moment it fired that one, which was before it was received.
//
// An occurrence fired in time was due after its server was ready, or is
// received before a later server was started, so a chain that stopped in
// a running server, or whose armed occurrence a restart lost, is not
// allowed by this unless the run of missed occurrences before it is
// MaxMissed long and was still unreceived when the chain resumed.
type missedRun struct {
	starts []ServerStart
	slack  time.Duration
	n      int       // occurrences delivered in a row that may have been missed
	last   time.Time // the last occurrence delivered
	recv   time.Time // when it was first received
}

// delivered notes the occurrence at t, first received at recv.
func (m *missedRun) delivered(t, recv time.Time) {
	m.last, m.recv = t, recv
	for _, s := range m.starts {
		if !s.Began.After(recv.Add(m.slack)) && t.Before(s.Up.Add(m.slack)) {
			m.n++
			return
		}
	}
	m.n = 0
}

// capped reports whether the grid times run, skipped after the last
// occurrence delivered, are allowed by FIRE_ALL's bound; a run that is
// not breaks the row.
func (m *missedRun) capped(run []time.Time) bool {
	ok := m.n >= recur.MaxMissed && !m.last.IsZero() && !run[len(run)-1].After(m.recv.Add(m.slack))
	if !ok {
		m.n = 0
	}
	return ok
}

// firstReceived is the earliest Received of ds.
func firstReceived(ds []*Delivery) time.Time {
	var t time.Time
	for _, d := range ds {
		if t.IsZero() || d.Received.Before(t) {
			t = d.Received
		}
	}
	return t
}

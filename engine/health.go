package engine

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Stages of the data path whose failures Health reports.
const (
	StageRoute = "route" // reput: commitlog -> schedule segments
	StageLoad  = "load"  // the driver loading a bucket into the wheel
	StageFire  = "fire"  // handing due messages to the sink, recording them done
)

// ErrStalled is wrapped by every StallError, for errors.Is.
var ErrStalled = errors.New("engine: stage stalled")

// StallError says that a stage of the data path has failed since Since and
// is retrying; Err is its latest failure (a full disk, too many open files,
// a failing device). Schedule returns it, once the stall is older than
// DefaultStallAfter, so that producers retry instead of piling up work
// that cannot be delivered.
type StallError struct {
	Stage    string
	Since    time.Time
	Attempts int
	Err      error
	// Held is set when retrying cannot help: data is held back until an
	// operator runs `hourglass repair` (a damaged or lost done log). A
	// held stage makes Health fail but does not refuse Schedules, which
	// go to other buckets.
	Held bool
}

func (e *StallError) Error() string {
	return fmt.Sprintf("engine: %s stalled since %s (%d attempts): %v",
		e.Stage, e.Since.UTC().Format(time.RFC3339), e.Attempts, e.Err)
}

// Unwrap returns the stage's latest failure and ErrStalled, so that
// errors.Is finds both (syscall.ENOSPC, say, and ErrStalled).
func (e *StallError) Unwrap() []error { return []error{e.Err, ErrStalled} }

// health records the stalled stages. Any goroutine may call its methods.
type health struct {
	now   func() time.Time
	after time.Duration

	mu     sync.Mutex
	stalls map[string]*StallError // guarded by mu
}

func newHealth(now func() time.Time, after time.Duration) *health {
	return &health{now: now, after: after, stalls: map[string]*StallError{}}
}

// fail records a failed attempt of stage; the stall's Since is its first
// failure since the stage last succeeded.
func (h *health) fail(stage string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stalls[stage]
	if s == nil {
		s = &StallError{Stage: stage, Since: h.now()}
		h.stalls[stage] = s
	}
	s.Attempts++
	s.Err = err
}

// hold records that stage holds data back until an operator acts.
func (h *health) hold(stage string, err error) {
	h.fail(stage, err)
	h.mu.Lock()
	h.stalls[stage].Held = true
	h.mu.Unlock()
}

// ok records that stage succeeded: it is no longer stalled.
func (h *health) ok(stage string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.stalls, stage)
}

// check returns the oldest stall older than the bound, or nil; with
// transient set it ignores held stages.
func (h *health) check(transient bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.stalls) == 0 {
		return nil
	}
	now := h.now()
	var old []*StallError
	for _, s := range h.stalls {
		if transient && s.Held {
			continue
		}
		if now.Sub(s.Since) >= h.after || s.Held {
			c := *s
			old = append(old, &c)
		}
	}
	if len(old) == 0 {
		return nil
	}
	sort.Slice(old, func(i, j int) bool { return old[i].Since.Before(old[j].Since) })
	return old[0]
}

// stalled returns a copy of every current stall, bound or not, by stage.
func (h *health) stalled() []StallError {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]StallError, 0, len(h.stalls))
	for _, s := range h.stalls {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stage < out[j].Stage })
	return out
}

// Health returns nil while every stage of the data path works, and a
// *StallError for the longest-stalled stage once one has failed for
// DefaultStallAfter or longer, or holds data back (at once). The stage retries by itself; Health turns
// nil again when it succeeds.
func (e *Engine) Health() error { return e.health.check(false) }

// Stalls returns every stage that is failing now, however briefly, for
// metrics and the operator's view.
func (e *Engine) Stalls() []StallError { return e.health.stalled() }

// refuse records why the engine must not serve past its recovery without
// an operator; the first reason wins.
func (e *Engine) refuse(err error) {
	e.refusal.once.Do(func() {
		e.refusal.err = err
		close(e.refusal.ch)
	})
}

// Refused is closed when a start-up check finds what the engine must not
// serve past without an operator: a bucket due at start whose done log is
// damaged or lost, so that which of its messages were delivered is
// unknown, or a damaged record in the commitlog it retains. RefusedErr
// then says which file and which command repairs it. The engine hands
// nothing to its sink before every start-up check has passed, so once
// Refused is closed it never does (Ready stays open): a start that refuses
// has delivered nothing, fired no recurring occurrence and recorded no
// delivery done (reput still routes the commitlog's cancels and
// reschedules to dispatch logs). It still takes Schedules and Cancels and answers reads. A
// program should stop (hourglass serve exits 1).
func (e *Engine) Refused() <-chan struct{} { return e.refusal.ch }

// RefusedErr is the reason Refused was closed, or nil.
func (e *Engine) RefusedErr() error {
	select {
	case <-e.refusal.ch:
		return e.refusal.err
	default:
		return nil
	}
}

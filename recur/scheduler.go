package recur

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/calendar"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Errors of the Scheduler's operations.
var (
	ErrExists   = errors.New("recur: a schedule with this name exists")
	ErrNotFound = errors.New("recur: no schedule with this name")
	ErrInvalid  = errors.New("recur: invalid schedule")
)

// Scheduler keeps the recurring schedules of one engine: it creates,
// changes and deletes them (each change one commitlog append holding the
// stored definition and, when it arms one, the next occurrence), and as
// the engine's sink (Wrap) it arms each schedule's next occurrence when
// the armed one is delivered, in the same append that records it fired,
// before the occurrence reaches the real sink. Its methods are safe for
// concurrent use.
type Scheduler struct {
	eng      Store         // set by Attach or AttachStore
	attached chan struct{} // closed by Attach or AttachStore
	next     engine.Sink
	log      *slog.Logger
	opened   time.Time // occurrences due before it were missed
	locks    [256]sync.Mutex
	seed     maphash.Seed
}

// New returns a Scheduler whose occurrences, and every other message the
// engine hands it as its sink, go on to next. opened is when the server
// started: an occurrence due before it was missed. Give it to the engine
// as its Sink, then Attach the engine.
func New(next engine.Sink, log *slog.Logger, opened time.Time) *Scheduler {
	if log == nil {
		log = slog.Default()
	}
	return &Scheduler{next: next, log: log, opened: opened, seed: maphash.MakeSeed(), attached: make(chan struct{})}
}

// HandlesExpiry makes s an engine.ExpiryHandler that answers for the sink
// it wraps: the queue keeps expired messages from consumers itself (and
// dead-letters them to <topic>.dlq), another sink has the engine record
// them dead-lettered.
func (s *Scheduler) HandlesExpiry() bool {
	h, ok := s.next.(engine.ExpiryHandler)
	return ok && h.HandlesExpiry()
}

// Attach gives s the engine whose sink it is, which also stores the
// definitions (in its catalog) and occurrences; deliveries wait for it.
func (s *Scheduler) Attach(eng *engine.Engine) { s.AttachStore(engineStore{eng}) }

// AttachStore gives s the store of its definitions and occurrences, whose
// engine's sink s is; deliveries wait for it.
func (s *Scheduler) AttachStore(st Store) {
	s.eng = st
	close(s.attached)
}

// lock serializes the changes of one schedule with its occurrences'
// firing.
func (s *Scheduler) lock(name string) *sync.Mutex { return &s.locks[s.lockIndex(name)] }

func (s *Scheduler) lockIndex(name string) uint64 {
	return maphash.String(s.seed, name) % uint64(len(s.locks))
}

// load returns the stored schedule name.
// loadRouted is load once the catalog has every write made before: a
// firing records its schedule's counters (Fired, FiredMs, Held) under the
// schedule's lock but returns before reput routes them, and a change
// made under the lock after it must start from them. The caller holds
// the schedule's lock.
func (s *Scheduler) loadRouted(ctx context.Context, name string) (*Def, error) {
	if err := s.eng.WaitRouted(ctx); err != nil {
		return nil, err
	}
	return s.load(name)
}

func (s *Scheduler) load(name string) (*Def, error) {
	b, ok, err := s.eng.Load(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return DecodeDef(name, b)
}

// occurrence is the message of d's occurrence at t. Its key,
// OccurrenceKey, is a header (engine.IdempotencyHeader), which reput
// indexes for Get, Cancel and Reschedule by key (the latest message routed
// with it), not an idempotency key: an occurrence armed again at the time
// of one an Update or Pause cancelled must be a new message, and the
// engine's idempotency window would answer with the cancelled one's ID and
// store nothing. Arming needs no deduplication: it happens under the
// schedule's lock, in the append that records the armed time.
func (d *Def) occurrence(t time.Time) engine.Request {
	hs := make([]message.Header, 0, len(d.Headers)+3)
	for _, h := range d.Headers {
		hs = append(hs, message.Header{Key: []byte(h[0]), Value: []byte(h[1])})
	}
	hs = append(hs,
		message.Header{Key: []byte(ScheduleHeader), Value: []byte(d.Name)},
		message.Header{Key: []byte(OccurrenceHeader), Value: []byte(time.UnixMilli(t.UnixMilli()).UTC().Format(time.RFC3339Nano))},
		message.Header{Key: []byte(engine.IdempotencyHeader), Value: []byte(OccurrenceKey(d.Name, t.UnixMilli()))})
	return engine.Request{Topic: d.Topic, Headers: hs, Body: d.Body, At: d.deliverAt(t)}
}

func (d *Def) control() message.Control {
	return message.Control{Kind: message.ControlSchedule, Name: []byte(d.Name), Value: d.Encode()}
}

// armNext sets d to arm its first occurrence after after, kept to the
// working time of cal (nil: none), or to have ended, and returns the
// request that arms it, if any.
func (d *Def) armNext(sp *Spec, cal *calendar.Calendar, after time.Time) []engine.Request {
	t, ok := d.next(sp, cal, after)
	if !ok {
		d.ArmedMs, d.Ended = 0, d.EndMs > 0
		return nil
	}
	d.ArmedMs, d.Ended = t.UnixMilli(), false
	return []engine.Request{d.occurrence(t)}
}

// store writes d, and the occurrence reqs arms, in one append, and waits
// until the catalog holds it.
func (s *Scheduler) store(ctx context.Context, d *Def, reqs []engine.Request) error {
	if err := s.eng.Write(ctx, reqs, []message.Control{d.control()}, ""); err != nil {
		return err
	}
	return s.eng.WaitRouted(ctx)
}

// Create stores d and arms its first occurrence; it returns when that is.
func (s *Scheduler) Create(ctx context.Context, d *Def) (time.Time, error) {
	return s.put(ctx, d, false)
}

// put stores d, a new schedule or (update) in place of the stored one of
// its name, and arms its next occurrence unless it is paused; it returns
// when that is. An update keeps the stored one's paused state and
// counters, and cancels its armed occurrence.
func (s *Scheduler) put(ctx context.Context, d *Def, update bool) (time.Time, error) {
	sp, err := s.check(d)
	if err != nil {
		return time.Time{}, err
	}
	mu := s.lock(d.Name)
	mu.Lock()
	defer mu.Unlock()
	old, err := s.loadRouted(ctx, d.Name)
	switch {
	case update && err != nil:
		return time.Time{}, err
	case update:
		d.CreatedMs, d.Paused, d.FiredMs, d.Fired, d.Held = old.CreatedMs, old.Paused, old.FiredMs, old.Fired, old.Held
	case err == nil:
		return time.Time{}, fmt.Errorf("%w: %q (update it, or delete it first)", ErrExists, d.Name)
	case !errors.Is(err, ErrNotFound):
		return time.Time{}, err
	}
	now := s.eng.Now()
	if !update {
		d.CreatedMs, d.FiredMs, d.Fired, d.Held = now.UnixMilli(), 0, 0, Held{}
	}
	d.ArmedMs, d.Missed, d.Ended = 0, 0, false
	var reqs []engine.Request
	if !d.Paused {
		if reqs = d.armNext(sp, s.calendar(d), now); len(reqs) == 0 && d.Calendar != "" && d.EndMs == 0 {
			return time.Time{}, fmt.Errorf("%w: no occurrence of %q falls in the working time of the calendar %q within five years", ErrInvalid, d.Spec, d.Calendar)
		}
	}
	// The armed occurrence is found before the new one is stored: armed
	// for the same time, the new one has its key, and a lookup by key
	// answers the latest message routed with it.
	var id message.ID
	var found bool
	var lerr error
	if update {
		id, found, lerr = s.armed(ctx, old)
	}
	if err := s.store(ctx, d, reqs); err != nil {
		return time.Time{}, err
	}
	if update {
		s.cancelOccurrence(ctx, old, id, found, lerr)
	}
	return armedTime(d), nil
}

func armedTime(d *Def) time.Time {
	if d.ArmedMs == 0 {
		return time.Time{}
	}
	return time.UnixMilli(d.ArmedMs).UTC()
}

// check validates d's fields and parses its spec.
func (s *Scheduler) check(d *Def) (*Spec, error) {
	switch {
	case d.Name == "" || len(d.Name) > MaxName:
		return nil, fmt.Errorf("%w: name %q: 1 to %d bytes", ErrInvalid, d.Name, MaxName)
	case d.EndMs > 0 && d.StartMs > 0 && d.EndMs < d.StartMs:
		return nil, fmt.Errorf("%w: end %s is before start %s", ErrInvalid,
			time.UnixMilli(d.EndMs).UTC().Format(time.RFC3339), time.UnixMilli(d.StartMs).UTC().Format(time.RFC3339))
	}
	for _, c := range d.Name {
		if !(c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return nil, fmt.Errorf("%w: name %q: use letters, digits, '.', '_' and '-'", ErrInvalid, d.Name)
		}
	}
	switch d.Misfire {
	case "", FireOnce, FireAll, Skip:
	default:
		return nil, fmt.Errorf("%w: misfire policy %q: want %s, %s or %s", ErrInvalid, d.Misfire, FireOnce, FireAll, Skip)
	}
	if d.JitterMs < 0 || d.JitterMs > MaxJitter.Milliseconds() {
		return nil, fmt.Errorf("%w: jitter %d ms: from 0 to %d (%v)", ErrInvalid, d.JitterMs, MaxJitter.Milliseconds(), MaxJitter)
	}
	if err := checkOverlap(d.Overlap); err != nil {
		return nil, err
	}
	if err := s.checkCalendar(d); err != nil {
		return nil, err
	}
	return d.spec()
}

// Update replaces the definition of the schedule d names, keeping its
// paused state and counters: its armed occurrence is cancelled and the
// next one of the new definition armed.
func (s *Scheduler) Update(ctx context.Context, d *Def) (time.Time, error) {
	return s.put(ctx, d, true)
}

// armed returns the message of d's armed occurrence, if one is pending.
func (s *Scheduler) armed(ctx context.Context, d *Def) (message.ID, bool, error) {
	if d.ArmedMs == 0 {
		return message.ID{}, false, nil
	}
	return s.eng.Lookup(ctx, d.Topic, OccurrenceKey(d.Name, d.ArmedMs))
}

// cancelArmed cancels d's armed occurrence, if any. One being delivered
// is past cancelling: the firing path, waiting on d's lock, finds its
// schedule changed and arms nothing.
func (s *Scheduler) cancelArmed(ctx context.Context, d *Def) {
	id, ok, err := s.armed(ctx, d)
	s.cancelOccurrence(ctx, d, id, ok, err)
}

// cancelOccurrence cancels id, d's armed occurrence (if ok), as armed
// found it (with err).
func (s *Scheduler) cancelOccurrence(ctx context.Context, d *Def, id message.ID, ok bool, err error) {
	if err == nil && ok {
		_, err = s.eng.Cancel(ctx, id)
	}
	if err != nil {
		s.log.Warn("recur: cancelling the armed occurrence failed; it is dropped when it fires", "schedule", d.Name, "err", err)
	}
}

// Pause stops the schedule's occurrences until Resume.
func (s *Scheduler) Pause(ctx context.Context, name string) error {
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	d, err := s.loadRouted(ctx, name)
	if err != nil || d.Paused {
		return err
	}
	old := *d
	d.Paused, d.ArmedMs = true, 0
	if err := s.store(ctx, d, nil); err != nil {
		return err
	}
	s.cancelArmed(ctx, &old)
	return nil
}

// Resume arms the next occurrence from now on of a paused schedule.
func (s *Scheduler) Resume(ctx context.Context, name string) (time.Time, error) {
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	d, err := s.loadRouted(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	if !d.Paused {
		return armedTime(d), nil
	}
	sp, err := d.spec()
	if err != nil {
		return time.Time{}, err
	}
	// An occurrence held when it was paused is not delivered.
	d.Paused, d.Missed, d.BufferedMs = false, 0, 0
	reqs := d.armNext(sp, s.calendar(d), s.eng.Now())
	if err := s.store(ctx, d, reqs); err != nil {
		return time.Time{}, err
	}
	return armedTime(d), nil
}

// Delete removes the schedule: once it returns, no further occurrence is
// delivered (the armed one is cancelled, or dropped when it fires).
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	d, err := s.loadRouted(ctx, name)
	if err != nil {
		return err
	}
	if err := s.eng.Write(ctx, nil, []message.Control{{Kind: message.ControlScheduleDelete, Name: []byte(name)}}, ""); err != nil {
		return err
	}
	if err := s.eng.WaitRouted(ctx); err != nil {
		return err
	}
	s.cancelArmed(ctx, d)
	return nil
}

// Info is a schedule with what is known of its occurrences.
type Info struct {
	Def   *Def
	Next  []time.Time // its next fire times from now
	Armed message.ID  // the armed occurrence's message, if pending
}

// Get returns the schedule name and its next n fire times.
func (s *Scheduler) Get(ctx context.Context, name string, n int) (Info, error) {
	d, err := s.loadRouted(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return s.info(ctx, d, n)
}

func (s *Scheduler) info(ctx context.Context, d *Def, n int) (Info, error) {
	in := Info{Def: d}
	sp, err := d.spec()
	if err != nil {
		return in, err
	}
	if d.ArmedMs > 0 {
		if id, ok, err := s.eng.Lookup(ctx, d.Topic, OccurrenceKey(d.Name, d.ArmedMs)); err == nil && ok {
			in.Armed = id
		}
	}
	if d.Paused || d.Ended {
		return in, nil
	}
	t := s.eng.Now()
	if d.ArmedMs > 0 {
		at := time.UnixMilli(d.ArmedMs)
		in.Next = append(in.Next, at.UTC())
		t = at
	}
	cal := s.calendar(d)
	for len(in.Next) < n {
		nt, ok := d.next(sp, cal, t)
		if !ok {
			break
		}
		in.Next = append(in.Next, nt.UTC())
		t = nt
	}
	return in, nil
}

// List returns up to n schedules after the name after (of topic, if not
// empty), by name, each with its next fire times, and the name to go on
// after ("" when there are no more).
func (s *Scheduler) List(ctx context.Context, after, topic string, n, nextN int) ([]Info, string, error) {
	var out []Info
	var from []byte
	if after != "" {
		from = []byte(after)
	}
	for len(out) < n {
		var page []*Def
		var derr error
		next, err := s.eng.Scan(from, n, func(k, v []byte) {
			d, err := DecodeDef(string(k), v)
			if err != nil {
				derr = err
				return
			}
			page = append(page, d)
		})
		if err != nil || derr != nil {
			return nil, "", errors.Join(err, derr)
		}
		for _, d := range page {
			if topic != "" && d.Topic != topic {
				continue
			}
			in, err := s.info(ctx, d, nextN)
			if err != nil {
				return nil, "", err
			}
			out = append(out, in)
			if len(out) == n {
				return out, d.Name, nil
			}
		}
		if next == nil {
			return out, "", nil
		}
		from = next
	}
	return out, "", nil
}

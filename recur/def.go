package recur

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hourglassmq/hourglass/calendar"
)

// Misfire says what a schedule does with occurrences that fell while the
// server was down.
type Misfire string

// Misfire policies.
const (
	// FireOnce (the default): the armed occurrence is delivered, late, once
	// for all that were missed; then the next future occurrence follows.
	// NATS message schedules and EventBridge Scheduler do the same: a
	// consumer that runs a job "every hour" wants it run once after an
	// outage, not a burst of stale runs.
	FireOnce Misfire = "fire-once"
	// FireAll delivers every missed occurrence once, oldest first, up to
	// MaxMissed in a row; then the next future occurrence follows.
	FireAll Misfire = "fire-all"
	// Skip delivers none of them.
	Skip Misfire = "skip"
)

// MaxMissed bounds the missed occurrences FireAll delivers in a row.
const MaxMissed = 100

// MaxName bounds a schedule's name in bytes (its occurrences' keys are
// "<name>@<time>", at most 200 bytes like an idempotency key).
const MaxName = 160

// Def is a recurring schedule as it is stored (the value of its control
// record, JSON; docs/FORMAT.md): its definition and the state of its
// occurrences. The JSON names are part of the on-disk format.
type Def struct {
	Name    string      `json:"-"` // the catalog's key
	Topic   string      `json:"topic"`
	Spec    string      `json:"spec"`
	Body    []byte      `json:"body,omitempty"`
	Headers [][2]string `json:"headers,omitempty"`
	// StartMs and EndMs bound the occurrences (UTC epoch ms; 0: none).
	StartMs int64   `json:"start_ms,omitempty"`
	EndMs   int64   `json:"end_ms,omitempty"`
	TZ      string  `json:"tz,omitempty"`
	Misfire Misfire `json:"misfire,omitempty"`
	Paused  bool    `json:"paused,omitempty"`
	// JitterMs delays each occurrence's delivery by 0 to JitterMs ms
	// (JitterOf), never before its time.
	JitterMs int64 `json:"jitter_ms,omitempty"`
	// Overlap is what an occurrence does while the previous one is not
	// settled; "" is Allow.
	Overlap Overlap `json:"overlap,omitempty"`
	// Calendar names the calendar (package calendar, the catalog's
	// calendars table) whose working time the occurrences keep to, as
	// CalendarPolicy says; "" for none.
	Calendar       string         `json:"calendar,omitempty"`
	CalendarPolicy CalendarPolicy `json:"calendar_policy,omitempty"`
	// CreatedMs is when it was created.
	CreatedMs int64 `json:"created_ms"`
	// Progress is what its occurrences have done so far, stored with it
	// (its fields are the stored form's, beside the definition's).
	Progress
}

// Progress is what a schedule's occurrences have done: the armed one, the
// last fired, the counts, and what the overlap policy holds. The scheduler
// writes it; the definition above is the user's.
type Progress struct {
	// ArmedMs is the time of the armed occurrence (a pending message keyed
	// OccurrenceKey(Name, ArmedMs)); 0 when none is armed (paused, ended).
	ArmedMs int64 `json:"armed_ms,omitempty"`
	// FiredMs is the time of the last occurrence whose delivery began.
	FiredMs int64 `json:"fired_ms,omitempty"`
	// Fired counts the occurrences delivered since it was created.
	Fired int64 `json:"fired,omitempty"`
	// Missed counts the missed occurrences delivered in a row (FireAll).
	Missed int `json:"missed,omitempty"`
	// Ended: no occurrence is left before EndMs.
	Ended bool `json:"ended,omitempty"`
	// Held is what the overlap policy keeps.
	Held
}

// Held is the state of a schedule's overlap policy (part of Def's stored
// form).
type Held struct {
	// LastMs is the time of the last occurrence passed on to the sink
	// (Overlap other than Allow): the previous one for the next; LastID
	// is the message that passed it on (the one message of it passed on
	// again if handed over again), whose latest incarnation (a retry
	// follows it) says whether it is settled.
	LastMs int64  `json:"last_ms,omitempty"`
	LastID string `json:"last_id,omitempty"`
	// BufferedMs is the time of the occurrence held until the previous one
	// is settled (BufferOne), 0 if none; CheckMs is the delivery time of
	// the copy of it that looks again (the one message that may pass it
	// on).
	BufferedMs int64 `json:"buffered_ms,omitempty"`
	CheckMs    int64 `json:"check_ms,omitempty"`
	// Skipped counts the occurrences the overlap policy did not deliver.
	Skipped int64 `json:"skipped,omitempty"`
}

// Encode returns d as stored.
func (d *Def) Encode() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err) // a Def always encodes
	}
	return b
}

// DecodeDef decodes a stored schedule named name.
func DecodeDef(name string, b []byte) (*Def, error) {
	d := &Def{}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("recur: stored schedule %q: %w", name, err)
	}
	d.Name = name
	return d, nil
}

// spec parses d's spec in its zone, once per spec and zone (specCache).
func (d *Def) spec() (*Spec, error) { return specs.parse(d.Spec, d.TZ) }

// specCache remembers parsed specs: a hot second of occurrences re-arms
// many schedules of few specs, and parsing one (and loading its zone)
// costs more than the rest of re-arming it.
type specCache struct {
	mu sync.Mutex
	m  map[[2]string]*Spec
}

// maxSpecs bounds specCache; past it, it starts over.
const maxSpecs = 4096

var specs specCache

func (c *specCache) parse(spec, tz string) (*Spec, error) {
	k := [2]string{spec, tz}
	c.mu.Lock()
	s := c.m[k]
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := Parse(spec, tz)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxSpecs {
		c.m = map[[2]string]*Spec{}
	}
	c.m[k] = s
	c.mu.Unlock()
	return s, nil
}

// misfire is d's policy, FireOnce by default.
func (d *Def) misfire() Misfire {
	if d.Misfire == "" {
		return FireOnce
	}
	return d.Misfire
}

// next returns the first occurrence of d strictly after after and at or
// after its start, kept to the working time of cal (nil: none) as
// d.CalendarPolicy says, or false if there is none before its end.
func (d *Def) next(s *Spec, cal *calendar.Calendar, after time.Time) (time.Time, bool) {
	for range maxCalendarSkips {
		t, ok := d.nextOfSpec(s, after)
		if !ok || cal == nil || cal.Working(t) {
			return t, ok
		}
		// Every occurrence from t up to the next working instant is
		// outside working time.
		w, err := cal.Next(t)
		if err != nil {
			return time.Time{}, false
		}
		if d.CalendarPolicy == CalendarShift {
			if d.EndMs > 0 && w.UnixMilli() > d.EndMs {
				return time.Time{}, false
			}
			return w, true
		}
		after = w.Add(-time.Nanosecond)
	}
	return time.Time{}, false
}

// maxCalendarSkips bounds the non-working stretches next skips: five
// years of a daily spec whose time is never working time.
const maxCalendarSkips = 5 * 366

// nextOfSpec returns the first occurrence of d's spec strictly after
// after and at or after its start, or false if there is none before its
// end.
func (d *Def) nextOfSpec(s *Spec, after time.Time) (time.Time, bool) {
	if d.StartMs > 0 {
		if start := time.UnixMilli(d.StartMs); after.Before(start) {
			after = start.Add(-time.Nanosecond)
		}
	}
	t := s.Next(after)
	if t.IsZero() || (d.EndMs > 0 && t.UnixMilli() > d.EndMs) {
		return time.Time{}, false
	}
	return t, true
}

// OccurrenceKey is the idempotency key of d's occurrence at atMs: the
// schedule's name and the occurrence's time, so that Cancel, Reschedule
// and Get find an occurrence by it.
func OccurrenceKey(name string, atMs int64) string {
	return name + "@" + time.UnixMilli(atMs).UTC().Format("2006-01-02T15:04:05.000Z")
}

// Headers an occurrence carries.
const (
	// ScheduleHeader names the schedule an occurrence belongs to.
	ScheduleHeader = "hourglass-schedule"
	// OccurrenceHeader is the occurrence's time (RFC 3339, UTC, ms).
	OccurrenceHeader = "hourglass-occurrence"
	// HeldHeader ("true") marks the copy of an occurrence the overlap
	// policy BufferOne held: it looks again whether the previous one is
	// settled, and is delivered once it is.
	HeldHeader = "hourglass-held"
	// BackfillHeader ("true") marks an occurrence Backfill stored.
	BackfillHeader = "hourglass-backfill"
)

// MaxJitter bounds a schedule's jitter.
const MaxJitter = 7 * 24 * time.Hour

// JitterOf is the delay of the occurrence at atMs of the schedule name
// with jitter jitterMs (0 to jitterMs ms): the xxhash64 of its key
// OccurrenceKey, modulo jitterMs+1. The same occurrence has the same
// offset on every node and after every restart.
func JitterOf(name string, atMs, jitterMs int64) time.Duration {
	if jitterMs <= 0 {
		return 0
	}
	return time.Duration(xxhash.Sum64String(OccurrenceKey(name, atMs))%uint64(jitterMs+1)) * time.Millisecond
}

// deliverAt is when d's occurrence at t is delivered: t plus its jitter.
func (d *Def) deliverAt(t time.Time) time.Time {
	return t.Add(JitterOf(d.Name, t.UnixMilli(), d.JitterMs))
}

package recur

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
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
	// CreatedMs is when it was created.
	CreatedMs int64 `json:"created_ms"`

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
// after its start, or false if there is none before its end.
func (d *Def) next(s *Spec, after time.Time) (time.Time, bool) {
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
)

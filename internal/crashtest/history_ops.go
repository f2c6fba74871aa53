package crashtest

import (
	"fmt"
	"time"
)

// The history of the calls that operate what the server holds (issues 21
// and 22): Reschedule, Redrive, SetPolicy (pause and resume) and the
// recurring-schedule RPCs.

// RescheduleAnswer is the answer to a Reschedule.
type RescheduleAnswer int

const (
	RescheduleNone             RescheduleAnswer = iota // no answer (in doubt or rejected)
	RescheduleRescheduled                              // RESCHEDULE_RESULT_RESCHEDULED
	RescheduleAlreadyDelivered                         // RESCHEDULE_RESULT_ALREADY_DELIVERED
	RescheduleUnknown                                  // RESCHEDULE_RESULT_UNKNOWN
	RescheduleAlreadyCancelled                         // RESCHEDULE_RESULT_ALREADY_CANCELLED
)

func (a RescheduleAnswer) String() string {
	return [...]string{"none", "rescheduled", "already-delivered", "unknown", "already-cancelled"}[a]
}

// Reschedule is one Reschedule call of a message the harness scheduled,
// by ID or (ByKey) by its topic and key.
type Reschedule struct {
	Key, Topic string
	ID         string // the ID named; "" when by key
	ByKey      bool   `json:",omitempty"`
	Mode       string // "now", "earlier" or "later" than the time it had
	Cycle      int
	Sent       time.Time
	Answered   time.Time
	Outcome    Outcome
	Answer     RescheduleAnswer
	NewID      string `json:",omitempty"` // RESCHEDULED: the replacement's ID
	// Edit (Mode "edit"): an Edit, which is a Reschedule keeping the time
	// (a new ID, the same origin): the version of the content it gave
	// (body "<key>~e<Edit>", header EditHeader), counting from 1 per key.
	Edit int `json:",omitempty"`
	// NotBefore is the earliest harness-clock time the replacement may be
	// handed out: the time asked for (the send time plus a delay, or an
	// absolute time), never before the call was sent (the server takes a
	// time in the past, and "now", as its clock on arrival).
	NotBefore time.Time
}

// Redrive is one Redrive call of a dead-letter topic.
type Redrive struct {
	DLQ      string // the dead-letter topic drained
	Max      int32  // max_messages
	Cycle    int
	Sent     time.Time
	Answered time.Time
	Outcome  Outcome
	Redriven int64 `json:",omitempty"` // answered: moved back by this call
	Skipped  int64 `json:",omitempty"`
	More     bool  `json:",omitempty"`
}

// PolicyChange is one SetPolicy call that pauses (Paused; frozen with
// Freeze) or resumes a topic.
type PolicyChange struct {
	Topic    string
	Paused   bool
	Freeze   bool `json:",omitempty"`
	Cycle    int
	Sent     time.Time
	Answered time.Time
	Outcome  Outcome
}

// ScheduleOp is one attempt of a recurring-schedule call: Op "create" or
// "update" begins the definition number Epoch of the schedule Name (its
// occurrences carry the body EpochBody(Name, Epoch)), "delete" ends the
// last one. A call in doubt is tried again until it is answered.
type ScheduleOp struct {
	Name, Op string
	Epoch    int
	Spec     string        `json:",omitempty"`
	Period   time.Duration `json:",omitempty"` // of the spec: "@every <Period>", or a cron spec of that period
	// Jitter is the definition's jitter: each occurrence is delivered 0 to
	// Jitter after its time, never before it.
	Jitter   time.Duration `json:",omitempty"`
	Topic    string        `json:",omitempty"`
	Cycle    int
	Sent     time.Time
	Answered time.Time
	Outcome  Outcome
	// Earlier: an attempt before this one took effect (a create answered
	// ALREADY_EXISTS, a delete NOT_FOUND): as good as OK, without Next.
	Earlier bool `json:",omitempty"`
	// Next is the first occurrence an OK create or update armed.
	Next time.Time `json:",omitempty"`
}

// EpochBody is the body of the occurrences of definition epoch of the
// schedule name: the checker tells a schedule's definitions apart by it.
func EpochBody(name string, epoch int) string { return fmt.Sprintf("%s#%d", name, epoch) }

// operated is the part of History that operates what the server holds;
// History.mu guards it.
type operated struct {
	rescheds  []Reschedule
	redrives  []Redrive
	policies  []PolicyChange
	schedOps  []ScheduleOp
	drainFrom time.Time
	drainEnd  time.Time
	starts    []ServerStart
	delivered map[string]bool  // keys (bodies) delivered at least once
	moved     map[string]moved // key -> its replacement, by the last Reschedule answered RESCHEDULED
}

// moved is a message's replacement: its ID and not-before time.
type moved struct {
	id        string
	notBefore time.Time
}

func (h *History) AddReschedule(x Reschedule) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rescheds = append(h.rescheds, x)
	if x.Outcome == OK && x.Answer == RescheduleRescheduled {
		if h.moved == nil {
			h.moved = map[string]moved{}
		}
		h.moved[x.Key] = moved{x.NewID, x.NotBefore}
	}
}

func (h *History) AddRedrive(x Redrive) {
	h.mu.Lock()
	h.redrives = append(h.redrives, x)
	h.mu.Unlock()
}
func (h *History) AddPolicy(x PolicyChange) {
	h.mu.Lock()
	h.policies = append(h.policies, x)
	h.mu.Unlock()
}
func (h *History) AddScheduleOp(x ScheduleOp) {
	h.mu.Lock()
	h.schedOps = append(h.schedOps, x)
	h.mu.Unlock()
}

// ServerStart is one server process the harness started, or in a cluster
// run one node started or the partitions of a killed node taken over by
// the others. The server (a cluster partition) takes the time it opened
// (recur: occurrences due before it are missed) between Began and Up.
type ServerStart struct {
	Cycle int
	Began time.Time // before the process was started
	Up    time.Time // when the harness found it ready, or gone
}

// AddStart records a server process started at began and found ready, or
// gone, now.
func (h *History) AddStart(cycle int, began time.Time) {
	h.mu.Lock()
	h.starts = append(h.starts, ServerStart{Cycle: cycle, Began: began, Up: time.Now()})
	h.mu.Unlock()
}

// SetDrainFrom records when the final drain began.
func (h *History) SetDrainFrom(t time.Time) { h.mu.Lock(); h.drainFrom = t; h.mu.Unlock() }

// SetDrainEnd records when the drain found nothing owed.
func (h *History) SetDrainEnd(t time.Time) { h.mu.Lock(); h.drainEnd = t; h.mu.Unlock() }

// Pending is a message PendingSchedule picked: its key, topic, current
// ID and the time it is due then (its replacement's, if it was
// rescheduled or edited), and whether it is a poison message.
type Pending struct {
	Key, Topic, ID string
	NotBefore      time.Time
	Poison         bool
}

// PendingSchedule returns a random recent acknowledged schedule that no
// consumer has received yet (as far as the history tells), for a producer
// to reschedule or edit. pick gets the number of candidates and returns
// an index; ok is false when the pick is not one.
func (h *History) PendingSchedule(pick func(n int) int) (Pending, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.schedules)
	if n == 0 {
		return Pending{}, false
	}
	lo := max(0, n-200)
	s := h.schedules[lo+pick(n-lo)]
	if s.Outcome != OK || h.delivered[s.Key] {
		return Pending{}, false
	}
	p := Pending{Key: s.Key, Topic: s.Topic, ID: s.ID, NotBefore: s.NotBefore, Poison: s.Poison}
	if m, ok := h.moved[s.Key]; ok {
		p.ID, p.NotBefore = m.id, m.notBefore
	}
	return p, true
}

package crashtest

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Outcome is what the harness learned from one RPC.
type Outcome int

const (
	// OK: the server answered the call with success.
	OK Outcome = iota
	// InDoubt: the call failed in a way that leaves its effect unknown
	// (the server died or the connection broke while it was in flight).
	InDoubt
	// Rejected: the server answered with an error, or the call provably
	// never reached it (connection refused): it had no effect.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case InDoubt:
		return "in-doubt"
	case Rejected:
		return "rejected"
	}
	return "?"
}

// CancelAnswer is the answer to a Cancel.
type CancelAnswer int

const (
	CancelNone             CancelAnswer = iota // no answer (in doubt or rejected)
	CancelCancelled                            // CANCEL_RESULT_CANCELLED
	CancelAlreadyDelivered                     // CANCEL_RESULT_ALREADY_DELIVERED
	CancelUnknown                              // CANCEL_RESULT_UNKNOWN
)

func (a CancelAnswer) String() string {
	return [...]string{"none", "cancelled", "already-delivered", "unknown"}[a]
}

// Schedule is one message the harness asked the server to schedule. Key is
// the message body, unique per message for the whole run: deliveries are
// matched to schedules by it, so that a message whose Schedule is in doubt
// (no ID came back) is still recognised when it is delivered.
type Schedule struct {
	Key, Topic string
	Cycle      int
	Sent       time.Time // harness clock when the call was sent
	Answered   time.Time // harness clock when it returned
	Outcome    Outcome
	ID         string // the ID the server answered, if OK
	// NotBefore is the earliest harness-clock time the message may be
	// handed out: send time plus the delay for a relative delay or level,
	// the requested time for an absolute one, the time the server answered
	// for one in working time (send time plus its duration while not
	// answered); skew is applied by Check.
	NotBefore time.Time
	Kind      string // "delay", "at", "level", "working" (KindWorking): how the time was given
	// Poison marks a message every consumer fails on purpose (it carries
	// the header PoisonHeader): it must end acked on "<topic>.dlq".
	Poison bool `json:",omitempty"`
}

// Cancel is one Cancel call, by ID or (ByKey) by the message's topic and
// idempotency key (the harness's key: every message is scheduled with it).
type Cancel struct {
	Key, ID  string // ID: the ID named; "" when by key
	Cycle    int
	Sent     time.Time
	Answered time.Time
	Outcome  Outcome
	Answer   CancelAnswer
	ByKey    bool   `json:",omitempty"`
	Topic    string `json:",omitempty"` // with ByKey
}

// Delivery is one message a consumer received.
type Delivery struct {
	Key      string // the body
	ID       string // the ID the message carried (a retry has its own)
	OriginID string // the first attempt's ID (= ID for a first attempt)
	Topic    string
	Attempt  uint32
	Receipt  string
	Cycle    int
	Issued   time.Time // when the Receive that returned it was sent
	Received time.Time // when that Receive returned
	// --cluster: the delivery stream's sequence of the copy handed out
	// (from the receipt) and the server's deliver_at.
	StreamSeq uint64    `json:",omitempty"`
	DeliverAt time.Time `json:",omitempty"`
	// RedriveOf is the dead letter a redriven copy was moved back from:
	// the ID in its idempotency key "redrive:<ID>" (Redrive keys each copy
	// so). "" for any other message.
	RedriveOf string `json:",omitempty"`
	// Schedule and Occurrence are the headers hourglass-schedule and
	// hourglass-occurrence of a recurring schedule's occurrence ("" for
	// the workload's own messages, whose Key is then not a harness key
	// but the schedule's body).
	Schedule   string `json:",omitempty"`
	Occurrence string `json:",omitempty"`
	// Edit is the version of the content it carried: n for a body
	// "<key>~e<n>" an Edit gave it, 0 for the body Schedule gave it;
	// EditHeader its header EditHeader ("" for none), which an Edit sets
	// to the same n.
	Edit       int    `json:",omitempty"`
	EditHeader string `json:",omitempty"`
}

// SettleKind is Ack or Nack.
type SettleKind int

const (
	Ack SettleKind = iota
	Nack
)

// Settle is one Ack or Nack of a received message (by its receipt).
type Settle struct {
	Key, ID   string
	Topic     string // the topic the Ack or Nack named (a .dlq topic for a dead letter)
	Kind      SettleKind
	NackDelay time.Duration // for a Nack
	Cycle     int
	Sent      time.Time
	Answered  time.Time
	Outcome   Outcome
	// Sched names the recurring schedule of a settled occurrence ("" for
	// the workload's own messages).
	Sched string `json:",omitempty"`
	// StreamSeq (--cluster): the delivery stream's sequence the receipt
	// named.
	StreamSeq uint64 `json:",omitempty"`
}

// ReceiveFail is a Receive that failed in doubt (not refused): the server
// may have leased messages of Topic to it that the harness never saw, and
// a lease that then ran out raised their attempt counts.
type ReceiveFail struct {
	Topic  string
	Cycle  int
	Issued time.Time // when the Receive was sent
	Failed time.Time // when it returned its error
}

// Cut describes bytes --corrupt-tail removed before a restart, and what
// they held, so that losses and duplicates can be attributed to it.
type Cut struct {
	Cycle int
	At    time.Time // when the cut was made (the server was down)
	File  string
	Mode  string // "torn-append" (nothing existing removed) or "cut" (bytes of the last record zeroed or truncated)
	Bytes int64
	// Keys of messages whose schedule or queue record was (partly) cut.
	Keys []string
	// CancelIDs are targets of cancel records that were cut.
	CancelIDs []string
	// AckTopic is the topic whose ack log lost bytes ("" if none).
	AckTopic string
	// QueueTopic is the topic whose queue log lost bytes ("" if none):
	// its offsets are reused after the restart, so an ack of the cut
	// record can swallow the message written there next.
	QueueTopic string
	// CommitlogFrom is the commitlog offset where a commitlog cut began
	// (-1 if none): records at or above it reuse the cut offsets.
	CommitlogFrom int64
	// Torn is true when bytes of a record remain that do not decode: the
	// server must report a torn tail.
	Torn bool
}

// History is everything the harness did and saw. It is safe for
// concurrent use; Snapshot returns a copy for the checker.
type History struct {
	mu         sync.Mutex
	schedules  []Schedule
	cancels    []Cancel
	deliveries []Delivery
	settles    []Settle
	rfails     []ReceiveFail
	cuts       []Cut
	operated   // reschedules, redrives, policies, recurring schedules (history_ops.go)
}

func (h *History) AddSchedule(s Schedule) {
	answeredTime(&s)
	h.mu.Lock()
	h.schedules = append(h.schedules, s)
	h.mu.Unlock()
}
func (h *History) AddCancel(c Cancel) { h.mu.Lock(); h.cancels = append(h.cancels, c); h.mu.Unlock() }
func (h *History) AddDelivery(d Delivery) {
	h.mu.Lock()
	h.deliveries = append(h.deliveries, d)
	if h.delivered == nil {
		h.delivered = map[string]bool{}
	}
	h.delivered[d.Key] = true
	h.mu.Unlock()
}
func (h *History) AddSettle(s Settle) { h.mu.Lock(); h.settles = append(h.settles, s); h.mu.Unlock() }
func (h *History) AddCut(c Cut)       { h.mu.Lock(); h.cuts = append(h.cuts, c); h.mu.Unlock() }
func (h *History) AddReceiveFail(f ReceiveFail) {
	h.mu.Lock()
	h.rfails = append(h.rfails, f)
	h.mu.Unlock()
}

// Events is a copy of a History's events, what Check reads.
type Events struct {
	Schedules  []Schedule
	Cancels    []Cancel
	Deliveries []Delivery
	Settles    []Settle
	// ReceiveFails are the Receives that failed in doubt.
	ReceiveFails []ReceiveFail
	Cuts         []Cut
	Reschedules  []Reschedule   `json:",omitempty"`
	Redrives     []Redrive      `json:",omitempty"`
	Policies     []PolicyChange `json:",omitempty"`
	ScheduleOps  []ScheduleOp   `json:",omitempty"`
	// DrainFrom is when the final drain began (zero before): a recurring
	// schedule alive then owes an occurrence at or after it.
	DrainFrom time.Time `json:",omitempty"`
	// DrainEnd is when the drain found nothing owed and began its quiet
	// second (zero before): the schedules outlive the run, so an
	// occurrence first handed out after it may be left unacked.
	DrainEnd time.Time `json:",omitempty"`
	// Starts are the server processes the harness started, in order.
	Starts []ServerStart `json:",omitempty"`
}

// Snapshot copies the events recorded so far.
func (h *History) Snapshot() Events {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Events{
		Schedules:    append([]Schedule(nil), h.schedules...),
		Cancels:      append([]Cancel(nil), h.cancels...),
		Deliveries:   append([]Delivery(nil), h.deliveries...),
		Settles:      append([]Settle(nil), h.settles...),
		ReceiveFails: append([]ReceiveFail(nil), h.rfails...),
		Cuts:         append([]Cut(nil), h.cuts...),
		Reschedules:  append([]Reschedule(nil), h.rescheds...),
		Redrives:     append([]Redrive(nil), h.redrives...),
		Policies:     append([]PolicyChange(nil), h.policies...),
		ScheduleOps:  append([]ScheduleOp(nil), h.schedOps...),
		DrainFrom:    h.drainFrom,
		DrainEnd:     h.drainEnd,
		Starts:       append([]ServerStart(nil), h.starts...),
	}
}

// OKSchedule returns a random acknowledged schedule's key, topic and
// current ID (the replacement of its last Reschedule answered
// RESCHEDULED, else the ID Schedule answered), for a producer to cancel;
// pick gets the number of candidates and returns an index. ok is false
// when there is none.
func (h *History) OKSchedule(pick func(n int) int) (key, topic, id string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.schedules)
	if n == 0 {
		return "", "", "", false
	}
	// Prefer recent ones: their delivery time is near, so the cancel races
	// the firing. Look at most at the last 200.
	lo := max(0, n-200)
	s := h.schedules[lo+pick(n-lo)]
	if s.Outcome != OK {
		return "", "", "", false
	}
	id = s.ID
	if m, ok := h.moved[s.Key]; ok {
		id = m.id
	}
	return s.Key, s.Topic, id, true
}

// writeEvents saves every event as JSON, kept with the data directory so a
// violation can be traced message by message.
func writeEvents(path string, ev Events) error {
	b, err := json.MarshalIndent(ev, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

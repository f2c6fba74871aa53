package crashtest

import (
	"fmt"
	"time"
)

// Violation is one broken promise, named by message and cycle.
type Violation struct {
	Kind   string    `json:"kind"`
	Key    string    `json:"key,omitempty"`
	ID     string    `json:"id,omitempty"`
	Cycle  int       `json:"cycle"`
	At     time.Time `json:"at"`
	Detail string    `json:"detail"`
	// Cut is true when the message was named by bytes --corrupt-tail cut:
	// allowed unless the fsync policy was "always".
	Cut bool `json:"attributable_to_cut,omitempty"`
	// Allowed is true for a kind the run was told to --allow.
	Allowed bool `json:"allowed,omitempty"`
	// Damage names the --damage that allows it (a loss or replay
	// hourglass repair reported; see damagecheck.go), "" if none does.
	Damage string `json:"allowed_by_damage,omitempty"`
	// Occ is the time of the occurrence a violation of a recurring
	// schedule concerns (its Key is then the definition's body).
	Occ time.Time `json:"occurrence,omitempty"`
	// Run is how many occurrences in a row a VOccurrenceSkipped spans,
	// from Occ on.
	Run int `json:"run,omitempty"`
}

// counts reports whether v fails a run under policy fsync.
func (v Violation) counts(fsync string) bool {
	return !v.Allowed && v.Damage == "" && (!v.Cut || fsync == "always")
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s: cycle %d", v.Kind, v.Cycle)
	if v.Key != "" {
		s += " message " + v.Key
	}
	if v.ID != "" {
		s += " (id " + v.ID + ")"
	}
	s += ": " + v.Detail
	if v.Damage != "" {
		s += " [allowed: " + v.Damage + "]"
	}
	return s
}

// CheckParams are what Check needs besides the events.
type CheckParams struct {
	// Fsync is the server's policy; losses attributable to a cut are
	// allowed unless it is "always".
	Fsync string
	// SkewBound bounds |server clock - harness clock|, measured.
	SkewBound time.Duration
	// Precision is added to SkewBound for the server's millisecond
	// timestamps (default 1ms).
	Precision time.Duration
	// Cluster judges a --cluster run, whose Receive, Ack and Nack are
	// served from JetStream consumers (docs/CLUSTER.md "Receiving"); what
	// differs from one node is listed in Check's comment.
	Cluster bool
	// MaxAttempts is the server's --max-attempts (0: the harness's
	// MaxAttempts): the failed deliveries after which a message goes to
	// "<topic>.dlq".
	MaxAttempts int
}

// Counts are the summary numbers of a checked history.
type Counts struct {
	Scheduled        int `json:"scheduled"`          // Schedules answered OK
	ScheduledWorking int `json:"scheduled_working"`  // of them, in a calendar's working time (KindWorking)
	ScheduleInDoubt  int `json:"schedule_in_doubt"`  // Schedules whose outcome is unknown
	ScheduleRejected int `json:"schedule_rejected"`  // refused or never sent
	InDoubtDelivered int `json:"in_doubt_delivered"` // in-doubt Schedules that turned out durable
	Delivered        int `json:"delivered"`          // messages (keys) delivered at least once
	Deliveries       int `json:"deliveries"`         // Receive results in all
	Cancelled        int `json:"cancelled"`          // Cancels answered "cancelled"
	CancelOther      int `json:"cancel_other"`       // answered already-delivered or unknown
	CancelInDoubt    int `json:"cancel_in_doubt"`
	CancelledInDoubt int `json:"cancelled_in_doubt"` // never delivered after a Cancel in doubt: it took effect
	Acked            int `json:"acked"`
	AckInDoubt       int `json:"ack_in_doubt"`
	AckRejected      int `json:"ack_rejected"` // not leased any more (lease ran out)
	Nacked           int `json:"nacked"`
	NackInDoubt      int `json:"nack_in_doubt"`
	Lost             int `json:"lost"` // all three lost kinds
	Early            int `json:"early"`
	// Duplicates: deliveries of a copy of an ID beyond its first
	// (deliverycheck's duplicates), by cause in the fields after it.
	Duplicates    int `json:"duplicates"`
	DupUnacked    int `json:"dup_unacked"`      // redelivery of an ID never acked: allowed
	DupAckInDoubt int `json:"dup_ack_in_doubt"` // redelivery after an Ack/Nack in doubt: allowed
	DupAfterAck   int `json:"dup_after_ack"`    // after a durable ack: violation
	DupStream     int `json:"dup_stream"`       // --cluster: the same ID stored twice in the delivery stream: allowed, counted
	CutAttributed int `json:"cut_attributed"`   // violations named by cut bytes
	Pending       int `json:"pending"`          // messages still owed (drain not finished)
	// Dead letters.
	ReceiveInDoubt     int `json:"receive_in_doubt"`     // Receives that failed in doubt (may have leased unseen messages)
	Poison             int `json:"poison"`               // poison messages scheduled (answered OK)
	PoisonCancelled    int `json:"poison_cancelled"`     // of them answered "cancelled": owed nothing
	DeadLettered       int `json:"dead_lettered"`        // messages delivered on a .dlq topic, poison or not
	DeadLetteredPoison int `json:"dead_lettered_poison"` // of them poison
	DLQDeliveries      int `json:"dlq_deliveries"`       // Receive results on .dlq topics
	NotDeadLettered    int `json:"not_dead_lettered"`    // poison messages that did not end acked on their .dlq topic
	// DupDeadLetterAgain: a .dlq delivery after a durable ack of that ID
	// there, when a restart let the message be dead-lettered twice (its
	// topic handed it out again in a later server life): allowed.
	DupDeadLetterAgain int `json:"dup_dead_letter_again"`
	// AfterDeadLetterRestart: handed out on its topic after its dead
	// letter's ack, in a later server life than its first lease: allowed.
	AfterDeadLetterRestart int `json:"after_dead_letter_restart"`
	// Operating what is held (issue 21).
	CancelByKey          int `json:"cancel_by_key"`          // Cancels by topic and key (of all answers)
	CancelByKeyUnjudged  int `json:"cancel_by_key_unjudged"` // answered cancelled when a retry or a Reschedule in doubt may have been what the key named
	Rescheduled          int `json:"rescheduled"`            // Reschedules answered RESCHEDULED
	RescheduleOther      int `json:"reschedule_other"`       // answered already delivered, unknown or already cancelled
	RescheduleInDoubt    int `json:"reschedule_in_doubt"`    // no answer: moved or not
	RescheduleRejected   int `json:"reschedule_rejected"`    // refused (server down)
	RescheduleByKey      int `json:"reschedule_by_key"`      // of all, by topic and key
	RescheduleUnjudged   int `json:"reschedule_unjudged"`    // by key, moving an incarnation the history cannot name
	RedriveCalls         int `json:"redrive_calls"`          // Redrives answered OK
	RedriveInDoubt       int `json:"redrive_in_doubt"`       // Redrives cut short
	Redriven             int `json:"redriven"`               // dead letters the answers said were moved
	RedrivenCopies       int `json:"redriven_copies"`        // distinct copies delivered back on their topics
	RedriveConsumed      int `json:"redrive_consumed"`       // copies whose dead letter a consumer also acked on the .dlq: allowed
	Paused               int `json:"paused"`                 // pauses answered OK
	Resumed              int `json:"resumed"`                // resumes answered OK
	PolicyInDoubt        int `json:"policy_in_doubt"`        // pauses and resumes in doubt
	DeliveredWhilePaused int `json:"delivered_while_paused"` // violation
	Frozen               int `json:"frozen"`                 // frozen pauses answered OK
	FrozenEarly          int `json:"frozen_early"`           // violation: before its time plus a frozen pause
	Edited               int `json:"edited"`                 // Edits answered EDITED (counted among the reschedules too)
	EditOld              int `json:"edit_old"`               // violation: old content after an Edit answered EDITED, or half an edit
	// Recurring schedules (issue 22).
	Schedules              int `json:"schedules"`                 // created
	ScheduleCalls          int `json:"schedule_calls"`            // create, update and delete attempts
	ScheduleCallsInDoubt   int `json:"schedule_calls_in_doubt"`   // attempts in doubt (tried again)
	Occurrences            int `json:"occurrences"`               // distinct occurrences delivered
	OccurrenceDeliveries   int `json:"occurrence_deliveries"`     // Receive results of occurrences
	OccurrenceAfterEnd     int `json:"occurrence_after_end"`      // due before a delete or update answered, delivered after: allowed
	OccurrenceUnackedAtEnd int `json:"occurrence_unacked_at_end"` // first handed out after the drain found nothing owed, not acked before the run ended: allowed
	OccurrenceMissedCap    int `json:"occurrence_missed_cap"`     // skipped after FIRE_ALL delivered recur.MaxMissed missed in a row: allowed
	OccurrenceTwice        int `json:"occurrence_twice"`          // violation
	OccurrenceSkipped      int `json:"occurrence_skipped"`        // violation (or still owed)
	OccurrenceAfterDelete  int `json:"occurrence_after_delete"`   // violation
	OccurrenceAfterUpdate  int `json:"occurrence_after_update"`   // violation
	OccurrenceUnexpected   int `json:"occurrence_unexpected"`     // violation
}

// Result is the verdict on a history.
type Result struct {
	Counts     Counts      `json:"counts"`
	Violations []Violation `json:"violations"`
	// Pending lists keys still owed a delivery or an ack (for the drain).
	Pending []string `json:"-"`
}

// Failed reports whether any violation counts against the server.
func (r *Result) Failed(fsync string) bool {
	for _, v := range r.Violations {
		if !v.Cut || fsync == "always" {
			return true
		}
	}
	return false
}

// First returns the earliest violation that counts, if any.
func (r *Result) First(fsync string) (Violation, bool) {
	for _, v := range r.Violations {
		if !v.Cut || fsync == "always" {
			return v, true
		}
	}
	return Violation{}, false
}

// keyState gathers one message's events.
type keyState struct {
	cluster    bool // judged as a --cluster run's (CheckParams.Cluster)
	sched      *Schedule
	cancels    []*Cancel
	deliveries []*Delivery
	settles    []*Settle
	rescheds   []*Reschedule
	// redriven (--cluster) are the stream copies judgeRedrivenCluster
	// found redriven: no stream duplicates.
	redriven map[streamKey]bool
}

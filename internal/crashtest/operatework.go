package crashtest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// operations are the calls operating what the server holds that a
// workload makes, each on or off as a whole.
type operations struct {
	reschedule  bool // producers Reschedule, by ID and by topic and key
	edit        bool // producers Edit, by ID and by topic and key (editwork.go)
	cancelByKey bool // producers Cancel by topic and key too (by ID always)
	redrive     bool // a redriver per cycle; consumers visit .dlq topics half as often
	pause       bool // a pauser per cycle; the drain resumes every topic first
	freeze      bool // the pauser's pauses are frozen half the time (a single node's)
	recurring   bool // recurring schedules on SchedTopic, managed per cycle and finished before the drain
	working     bool // messages in a calendar's working time (CalendarName), once a cycle has created it
}

// Names of operations, as Summary.Operations lists them.
const (
	opReschedule  = "reschedule"
	opEdit        = "edit"
	opCancelByKey = "cancel-by-key"
	opRedrive     = "redrive"
	opPause       = "pause"
	opFreeze      = "freeze"
	opRecurring   = "recurring"
	opWorking     = "working-time"
)

// names lists the operations o makes.
func (o operations) names() []string {
	var out []string
	for _, op := range []struct {
		on   bool
		name string
	}{{o.reschedule, opReschedule}, {o.edit, opEdit}, {o.cancelByKey, opCancelByKey}, {o.redrive, opRedrive}, {o.pause, opPause}, {o.freeze, opFreeze}, {o.recurring, opRecurring}, {o.working, opWorking}} {
		if op.on {
			out = append(out, op.name)
		}
	}
	return out
}

// allOperations: one node serves every one of them.
var allOperations = operations{reschedule: true, edit: true, cancelByKey: true, redrive: true, pause: true, freeze: true, recurring: true, working: true}

// clusterOperations are those a cluster serves on any node: all of one
// node's (docs/CLUSTER.md "Managing scheduled messages", "Managing the
// queue", "Recurring schedules") but calendars, which a cluster does not
// have yet, and frozen pauses and Edit, which it refuses. The checks judge them as
// on one node, with the cluster's documented differences (Check).
var clusterOperations = operations{reschedule: true, cancelByKey: true, redrive: true, pause: true, recurring: true}

// operators starts, with wg, the per-cycle workers of the operations w
// makes (a redriver, a pauser, the recurring schedules' manager), each
// with a generator of its own, calling through l until ctx ends.
func (w *workload) operators(ctx context.Context, wg *sync.WaitGroup, l lanes, cycle int) {
	for i, op := range []struct {
		on bool
		fn func(context.Context, lanes, int, *rand.Rand)
	}{{w.operating.redrive, w.redriver}, {w.operating.pause, w.pauser}, {w.operating.recurring, w.manageSchedules}, {w.operating.working, w.ensureCalendar}} {
		if !op.on {
			continue
		}
		rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(cycle)<<16|0x2000|uint64(i)))
		wg.Go(func() { op.fn(ctx, l, cycle, rng) })
	}
}

// settleOperations, before the drain, leaves nothing paused and no
// recurring-schedule call in doubt, bounded by the drain grace.
func (w *workload) settleOperations(ctx context.Context, l lanes) {
	if !w.operating.pause && !w.operating.recurring {
		return
	}
	octx, stop := context.WithTimeout(ctx, w.cfg.DrainGrace)
	defer stop()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, 0xd8000))
	if w.operating.pause {
		w.resumeAll(octx, l, w.cfg.Cycles+1, rng)
	}
	if w.operating.recurring {
		w.finishSchedules(octx, l, w.cfg.Cycles+1, rng)
	}
}

// The workload's calls that operate what the server holds (issue 21):
// reschedules (a producer's operation), redrives and pauses (a redriver
// and a pauser per cycle). None of them is retried in doubt: a second
// Reschedule of a message whose first one took effect would move it again,
// and what a redrive or a pause in doubt did is what the checker judges.

// reschedule moves a recently acknowledged message no consumer has
// received yet (as far as the history tells) with a unary call over
// Connect or gRPC, by its current ID or by its topic and key: to now,
// earlier than it is due, or later (by 0.1 s to two segment durations past
// its time), by a delay or to an absolute time.
func (w *workload) reschedule(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	u := l.choose(rng)
	byKey := rng.IntN(2) == 0
	mode := [...]string{"now", "earlier", "later"}[rng.IntN(3)]
	abs := rng.IntN(2) == 0
	frac, extra := rng.Float64(), time.Duration(rng.Int64N(int64(2*w.cfg.SegmentDuration)))
	pm, ok := w.hist.PendingSchedule(rng.IntN)
	if !ok {
		return
	}
	key, topic, id, due := pm.Key, pm.Topic, pm.ID, pm.NotBefore
	sent := time.Now()
	x := Reschedule{Key: key, Topic: topic, Mode: mode, Cycle: cycle, Sent: sent, NotBefore: sent}
	req := &hourglassv1.RescheduleRequest{Id: id}
	x.ID = id
	if byKey {
		req, x.ID, x.ByKey = &hourglassv1.RescheduleRequest{Topic: topic, Key: key}, "", true
		w.count("reschedule-key", u.proto)
	} else {
		w.count("reschedule", u.proto)
	}
	left := max(0, due.Sub(sent))
	var d time.Duration
	switch mode {
	case "now":
		req.When = &hourglassv1.RescheduleRequest_Now{Now: true}
	case "earlier":
		d = time.Duration(frac * float64(left))
	case "later":
		d = left + 100*time.Millisecond + extra
	}
	if mode != "now" {
		d = d.Truncate(time.Millisecond)
		x.NotBefore = sent.Add(d)
		if abs {
			req.When = &hourglassv1.RescheduleRequest_DeliverAt{DeliverAt: timestamppb.New(x.NotBefore)}
		} else {
			req.When = &hourglassv1.RescheduleRequest_DelayMs{DelayMs: d.Milliseconds()}
		}
	}
	res, err := call(ctx, u.Reschedule, req)
	x.Answered, x.Outcome = time.Now(), classify(err)
	if x.Outcome == OK {
		switch res.Result {
		case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED:
			x.Answer, x.NewID = RescheduleRescheduled, res.Id
		case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED:
			x.Answer = RescheduleAlreadyDelivered
		case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_CANCELLED:
			x.Answer = RescheduleAlreadyCancelled
		default:
			x.Answer = RescheduleUnknown
		}
	}
	w.hist.AddReschedule(x)
}

// redriver calls Redrive on a random producers' dead-letter topic every
// 0.5 to 2 s until ctx ends, moving up to 4 dead letters back to their topic
// each time (where poison messages fail again and are dead-lettered
// again). A redrive cut short by a kill is not retried: a later call
// moves what it left, and the server keys each copy by its dead letter's
// ID so that nothing is moved twice.
func (w *workload) redriver(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	for ctx.Err() == nil {
		sleep(ctx, 500*time.Millisecond+time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
		u := l.choose(rng)
		dlq := dlqTopic(w.topics[rng.IntN(len(w.topics))])
		n := int32(1 + rng.IntN(4))
		if ctx.Err() != nil {
			return
		}
		w.count("redrive", u.proto)
		x := Redrive{DLQ: dlq, Max: n, Cycle: cycle, Sent: time.Now()}
		res, err := call(ctx, u.Redrive, &hourglassv1.RedriveRequest{DeadLetterTopic: dlq, MaxMessages: n})
		x.Answered, x.Outcome = time.Now(), classify(err)
		if x.Outcome == OK {
			x.Redriven, x.Skipped, x.More = res.Redriven, res.Skipped, res.More
		}
		w.hist.AddRedrive(x)
	}
}

// pauser first resumes every topic a pause may still hold (one before a
// kill, or in doubt), then every 1.5 to 4 s pauses a random producers'
// topic for 0.3 to 1.2 s (a frozen pause half the time, when the
// workload freezes) and resumes it, until ctx ends.
func (w *workload) pauser(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	w.resumeAll(ctx, l, cycle, rng)
	for ctx.Err() == nil {
		sleep(ctx, 1500*time.Millisecond+time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
		topic := w.topics[rng.IntN(len(w.topics))]
		hold := 300*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))
		ln := l.choose(rng)
		if ctx.Err() != nil {
			return
		}
		w.setPaused(ctx, ln, cycle, topic, true, w.operating.freeze && rng.IntN(2) == 0)
		sleep(ctx, hold)
		w.resume(ctx, l, cycle, topic, rng)
	}
}

// resumeAll resumes every topic a pause may hold, each until answered OK
// or ctx ends.
func (w *workload) resumeAll(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	w.mu.Lock()
	var held []string
	for t := range w.paused {
		held = append(held, t)
	}
	w.mu.Unlock()
	slices.Sort(held)
	for _, t := range held {
		w.resume(ctx, l, cycle, t, rng)
	}
}

// resume resumes topic until a SetPolicy is answered OK or ctx ends,
// every 100 ms: half the time by setting paused to false, half by naming
// it in defaults.
func (w *workload) resume(ctx context.Context, l lanes, cycle int, topic string, rng *rand.Rand) {
	for ctx.Err() == nil {
		ln, byDefault := l.choose(rng), rng.IntN(2) == 0
		if w.setPaused(ctx, ln, cycle, topic, false, byDefault) == OK {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// setPaused pauses (frozen, with freezeOrDefault) or resumes (by naming
// paused in defaults, with freezeOrDefault) topic with one SetPolicy
// through ln, and records it. A topic is taken as paused from the moment
// its pause is sent until a resume is answered OK.
func (w *workload) setPaused(ctx context.Context, ln lane, cycle int, topic string, paused, freezeOrDefault bool) Outcome {
	req := &hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{Paused: &paused}}
	byDefault, freeze := !paused && freezeOrDefault, paused && freezeOrDefault
	op := "resume"
	if freeze {
		req.Policy.Freeze = &freeze
	}
	if paused {
		op = "pause"
		w.mu.Lock()
		w.paused[topic] = true
		w.mu.Unlock()
	} else if byDefault {
		req = &hourglassv1.SetPolicyRequest{Topic: topic, Defaults: []string{"paused"}}
	}
	w.count(op, ln.proto)
	x := PolicyChange{Topic: topic, Paused: paused, Freeze: freeze, Cycle: cycle, Sent: time.Now()}
	_, err := call(ctx, ln.SetPolicy, req)
	x.Answered, x.Outcome = time.Now(), classify(err)
	w.hist.AddPolicy(x)
	if !paused && x.Outcome == OK {
		w.mu.Lock()
		delete(w.paused, topic)
		w.mu.Unlock()
	}
	return x.Outcome
}

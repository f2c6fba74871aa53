package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// SchedTopic is the topic the harness's recurring schedules deliver to;
// consumers receive it (and its dead-letter topic) besides the producers'.
const SchedTopic = "ctr"

// recurPlan is a run's recurring-schedule calls (issue 22), in order:
// in cycle 1 it creates cr-a (@every 1s), cr-b (@every 2s) and cr-c
// (@every 1s), all FIRE_ALL (every occurrence is owed, downtime included),
// and cr-j ("* * * * * *", every second on the second) with a jitter of
// 800 ms (issue 44: each occurrence delivered up to 800 ms after its time,
// never before; the checker's grid and early rules hold as they are, on
// the occurrence's time without jitter);
// a third of the way through the run it updates cr-b to @every 1s, half
// way it deletes cr-c and creates cr-d (@every 2s). Each call is tried
// until answered, in later cycles and in the drain if need be, so that the
// checker knows where each definition begins and ends. One goroutine at a
// time uses it (the cycle's manager, then the drain).
type recurPlan struct {
	steps []recurStep
	next  int // the first step not done
}

type recurStep struct {
	cycle int        // the first cycle it may run in
	op    ScheduleOp // name, op, epoch, spec, period, topic
	tried bool       // an attempt was sent: it is finished even in the drain
}

func newRecurPlan(cycles int) *recurPlan {
	upd, del := min(cycles, 1+cycles/3), min(cycles, 1+cycles/2)
	step := func(cycle int, name, op string, epoch int, period time.Duration) recurStep {
		x := ScheduleOp{Name: name, Op: op, Epoch: epoch, Topic: SchedTopic}
		if op != "delete" {
			x.Period, x.Spec = period, fmt.Sprintf("@every %v", period)
		}
		return recurStep{cycle: cycle, op: x}
	}
	return &recurPlan{steps: []recurStep{
		step(1, "cr-a", "create", 1, time.Second),
		step(1, "cr-b", "create", 1, 2*time.Second),
		step(1, "cr-c", "create", 1, time.Second),
		jittered(step(1, "cr-j", "create", 1, time.Second), "* * * * * *", 800*time.Millisecond),
		step(upd, "cr-b", "update", 2, time.Second),
		step(del, "cr-c", "delete", 1, 0),
		step(del, "cr-d", "create", 1, 2*time.Second),
	}}
}

// jittered gives st's definition the cron spec spec (of the same period)
// and jitter j.
func jittered(st recurStep, spec string, j time.Duration) recurStep {
	st.op.Spec, st.op.Jitter = spec, j
	return st
}

// manageSchedules runs the plan's steps due by cycle, in order, each 0.1
// to 0.7 s after the one before (or after the cycle began), until ctx
// ends.
func (w *workload) manageSchedules(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	p := w.recur
	for p.next < len(p.steps) && p.steps[p.next].cycle <= cycle && ctx.Err() == nil {
		st := &p.steps[p.next]
		if !st.tried {
			sleep(ctx, 100*time.Millisecond+time.Duration(rng.Int64N(int64(600*time.Millisecond))))
		}
		if w.scheduleStep(ctx, l, cycle, st, rng) {
			p.next++
		}
	}
}

// finishSchedules finishes the step an earlier cycle began and left in
// doubt (the drain calls it, so that no call is left in doubt).
func (w *workload) finishSchedules(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	p := w.recur
	if p == nil {
		return
	}
	for p.next < len(p.steps) && p.steps[p.next].tried && ctx.Err() == nil {
		if w.scheduleStep(ctx, l, cycle, &p.steps[p.next], rng) {
			p.next++
		}
	}
}

// scheduleStep sends st every 100 ms until it is answered (done) or ctx
// ends: OK, ALREADY_EXISTS for a create or NOT_FOUND for a delete (an
// attempt before took effect), or an error that says it never will.
func (w *workload) scheduleStep(ctx context.Context, l lanes, cycle int, st *recurStep, rng *rand.Rand) (done bool) {
	for ctx.Err() == nil {
		ln := l.choose(rng)
		x := st.op
		x.Cycle, x.Sent = cycle, time.Now()
		st.tried = true
		w.count(x.Op+"-schedule", ln.proto)
		def := &hourglassv1.RecurringSchedule{Name: x.Name, Topic: x.Topic, Spec: x.Spec, Body: []byte(EpochBody(x.Name, x.Epoch)),
			MisfirePolicy: hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL, JitterMs: x.Jitter.Milliseconds()}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		var next time.Time
		var err error
		switch x.Op {
		case "create":
			var res *hourglassv1.CreateScheduleResponse
			if res, err = ln.CreateSchedule(cctx, &hourglassv1.CreateScheduleRequest{Schedule: def}); err == nil && res.Next != nil {
				next = res.Next.AsTime()
			}
		case "update":
			var res *hourglassv1.UpdateScheduleResponse
			if res, err = ln.UpdateSchedule(cctx, &hourglassv1.UpdateScheduleRequest{Schedule: def}); err == nil && res.Next != nil {
				next = res.Next.AsTime()
			}
		default:
			_, err = ln.DeleteSchedule(cctx, &hourglassv1.DeleteScheduleRequest{Name: x.Name})
		}
		cancel()
		x.Answered, x.Outcome, x.Next = time.Now(), classify(err), next
		code := codeOf(err)
		if (x.Op == "create" && code == codes.AlreadyExists) || (x.Op == "delete" && code == codes.NotFound) {
			x.Outcome, x.Earlier = OK, true
		}
		w.hist.AddScheduleOp(x)
		if x.Outcome == OK || (x.Outcome == Rejected && !worthRetry(err)) {
			return true
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return false
}

// worthRetry reports whether a call refused with err may succeed later:
// the server was down (connection refused) or out of a resource.
func worthRetry(err error) bool {
	switch codeOf(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

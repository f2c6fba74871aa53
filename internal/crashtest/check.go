package crashtest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Violation kinds. Each is a broken promise of the server, judged only from
// what its RPCs answered and when (harness clock).
const (
	// VLost: a Schedule answered OK, never answered "cancelled", was never
	// delivered.
	VLost = "lost"
	// VLostRetry: a Nack with a delay was answered OK, but the retry it
	// promised never arrived.
	VLostRetry = "lost-retry"
	// VLostRedelivery: a delivered message was never durably acked (no Ack
	// answered OK or in doubt) and never handed out again.
	VLostRedelivery = "lost-redelivery"
	// VEarly: received before its delivery time (minus the skew bound).
	VEarly = "early"
	// VAfterAck: an ID handed out by a Receive sent after an Ack (or a
	// delayed Nack, which acks the original) of that ID was answered OK.
	VAfterAck = "delivered-after-ack"
	// VAfterCancel: delivered by a Receive that returned after a Cancel of
	// the message was answered "cancelled".
	VAfterCancel = "delivered-after-cancel"
	// VCancelUntruthful: a Cancel answered "cancelled" for a message a
	// Receive had already returned (or was returning) before the answer.
	VCancelUntruthful = "cancel-untruthful"
	// VPhantom: a delivery of a body the harness never scheduled, or whose
	// Schedule was rejected.
	VPhantom = "phantom"
	// VIDMismatch: a first attempt's ID differs from the ID Schedule
	// answered, or a retry names another origin.
	VIDMismatch = "id-mismatch"
	// VDeadLetterEarly: delivered on "<topic>.dlq" before it could have
	// failed MaxAttempts times on its topic, as far as the history can
	// tell (its deliveries there, plus one for each Receive of that topic
	// that failed in doubt while it existed), or with an attempt count
	// below MaxAttempts.
	VDeadLetterEarly = "dead-lettered-early"
	// VNotDeadLettered: a poison message (failed on every delivery) that
	// did not end acked on its dead-letter topic, or any message handed out
	// on its topic with an attempt count of MaxAttempts or more.
	VNotDeadLettered = "not-dead-lettered"
	// VAfterDeadLetter: handed out on its topic by a Receive sent after
	// the Ack of its dead letter was answered OK, in the same server life
	// as every lease it could have been dead-lettered from (a restart
	// between the dead-letter append and the ack on the topic leaves both
	// copies: allowed, counted in AfterDeadLetterRestart).
	VAfterDeadLetter = "delivered-after-dead-letter"
	// Process-level violations, added by the runner.
	VUncleanStop = "unclean-stop"   // SIGTERM did not end in "stopped cleanly" and exit 0
	VStartFailed = "start-failed"   // the server did not become ready after a restart
	VUnreported  = "unreported-cut" // a cut commitlog-format file was not reported as truncated
	// VSeqReused: two messages answered OK with IDs of the same commitlog
	// offset (an offset used twice: the log's end went back).
	VSeqReused = "seq-reused"
	// --damage (damagecheck.go).
	VRefusalUnclear   = "refusal-unclear"   // refused to start without naming the damaged file or `hourglass repair`
	VDamageUnreported = "damage-unreported" // started on damage and never named the file in its log
	VRepairFailed     = "repair-failed"     // hourglass repair exited non-zero, or changed a file without a copy in quarantine/, or its report after a killed run did not name what that run gave up
	// VKeyForgotten: a keyed Schedule sent again after a restart, whose
	// record the commitlog still holds, was answered with another ID than
	// the first (stored twice) rather than the first or a refusal.
	VKeyForgotten = "key-forgotten"
)

// Kinds lists every violation kind.
var Kinds = []string{VLost, VLostRetry, VLostRedelivery, VEarly, VAfterAck, VAfterCancel, VCancelUntruthful,
	VPhantom, VIDMismatch, VDeadLetterEarly, VNotDeadLettered, VAfterDeadLetter, VUncleanStop, VStartFailed, VUnreported,
	VSeqReused, VRefusalUnclear, VDamageUnreported, VRepairFailed, VKeyForgotten,
	VAfterReschedule, VRescheduleUntruthful, VRescheduleBoth, VRescheduledLost, VRedrivenTwice, VRedriveUnfounded,
	VDeliveredWhilePaused, VFrozenEarly, VOccurrenceTwice, VOccurrenceSkipped, VOccurrenceAfterDelete, VOccurrenceAfterUpdate, VOccurrenceUnexpected, VFlowConcurrency, VFlowOrder, VFlowRate, VFlowLost,
	VEditOld, VEditTorn, VExpiredDelivered, VExpiredAcked, VExpiredEarly, VExpiredNotDropped, VExpiryLost}

// Check judges a history. The rules, message by message (key = body):
//
//   - Every Schedule answered OK and never answered "cancelled" must end
//     delivered and durably acked: walking its deliveries, acks and nacks
//     in harness time, the last must be an Ack answered OK (or in doubt),
//     or a Nack in doubt. Otherwise it is lost: never delivered (VLost),
//     a Nack-with-delay answered OK whose retry never came (VLostRetry), or
//     delivered but never acked and never handed out again (VLostRedelivery).
//     Schedules in doubt are never lost; their deliveries are counted.
//   - A Cancel answered "cancelled" means no delivery of the message ever:
//     a delivery whose Receive returned after the answer is
//     VAfterCancel; one returned before it (the server had handed it out
//     already, or concurrently) is VCancelUntruthful. Both break I7:
//     the engine decides cancel and fire atomically, so there is no
//     legitimate overlap. A Cancel in doubt allows either: delivered, or
//     never delivered (not lost; counted in CancelledInDoubt).
//   - Nothing may arrive before NotBefore - SkewBound - Precision; a retry
//     (ID != origin) not before the earliest Nack-with-delay sent before it
//     plus its delay.
//   - A second delivery of the same ID on the same topic is a violation
//     (VAfterAck) when the Receive that returned it was sent after an Ack
//     or a delayed Nack of that ID on that topic was answered OK;
//     otherwise it is an allowed redelivery, counted as after an ack in
//     doubt or as never acked.
//
// Dead letters (the built-in queue moves a message to "<topic>.dlq" when a
// failure brings its attempt count to MaxAttempts: it appends it there,
// then acks it on its topic; a crash in between leaves both copies):
//
//   - A delivery on a topic other than its own or its own .dlq is
//     VPhantom. One on its .dlq needs MaxAttempts deliveries of the
//     message on its topic first, each recorded or possibly inside a
//     Receive of that topic that failed in doubt (the server may have
//     leased it, and the lease run out, unseen), and an attempt count of
//     at least MaxAttempts; else VDeadLetterEarly. A restart lowers
//     attempt counts to the last checkpoint's, never raises them, so this
//     holds across crashes. A delivery on its topic with an attempt count
//     of MaxAttempts or more is VNotDeadLettered.
//   - A poison message must end acked on its .dlq (VNotDeadLettered).
//   - After the Ack of a dead letter was answered OK, the message is
//     handed out on its topic again only if the server restarted between
//     the dead-lettering and that Receive (VAfterDeadLetter), and the
//     same ID on the .dlq again only if, besides, the message was handed
//     out on its topic in a later server life (VAfterAck). The history
//     does not say when the dead-lettering happened, only that it
//     followed a lease of that ID: "a restart in between" is judged by
//     server lives (cycles) against the first lease of the ID, recorded
//     or in doubt.
//
// Operating what is held (keyrules.go, reschedcheck.go, redrivecheck.go,
// pausecheck.go). A message lives as incarnations: the ID Schedule
// answered, replacements (a Reschedule: new ID, same origin and attempt),
// retries (a Nack with a delay: attempt raised), redriven copies (a new
// ID, attempt 0, keyed "redrive:<dead letter's ID>", which its retries
// keep). A call by (topic, key) names the latest incarnation routed with
// the key; the history names it only when no retry or Reschedule in doubt
// may be it and the Reschedules answered RESCHEDULED form a chain.
//
//   - A Cancel answered cancelled: the incarnation it named is never
//     delivered (VAfterCancel, VCancelUntruthful as above); when that is
//     the first (by ID, not moved by a Reschedule sent before the answer)
//     or a key's named one, no delivery of the message at all. A Cancel by
//     key whose incarnation the history cannot name is counted, not judged.
//   - A Reschedule answered RESCHEDULED: the incarnation it moved is never
//     delivered (VAfterReschedule if returned after the answer, else
//     VRescheduleUntruthful); the replacement is delivered (VRescheduledLost
//     unless a Cancel or Reschedule answered after it was sent may have
//     removed it), never before its new time (VEarly; "now" and past times
//     mean the send time); its redeliveries are judged as any ID's. Other
//     answers change nothing. A Reschedule in doubt allows the old
//     incarnation or a replacement (a first attempt under an ID no answer
//     named), never both (VRescheduleBoth, judged when it is the message's
//     only one in doubt and its incarnation is named); neither is a loss.
//   - Redrive: each dead letter comes back at most once as a first attempt
//     (VRedrivenTwice, within the server's idempotency window), only after
//     a Redrive of its dead-letter topic was sent and its message could
//     have failed MaxAttempts times (VRedriveUnfounded); a poison copy's
//     lineage ends acked on the .dlq or redriven again (VNotDeadLettered).
//     How many copies a Redrive's redriven count promises is not judged: a
//     message dead-lettered twice across a crash is counted twice and
//     moved once.
//   - Pause: nothing of a topic is handed out by a Receive sent after its
//     pause was answered OK and returned before the next resume was sent
//     (VDeliveredWhilePaused); a frozen pause, VFrozenEarly (freezecheck.go).
//   - Edit: a Reschedule that keeps the time and gives new content, judged
//     as one; besides, the new content is what is delivered after it was
//     answered EDITED (VEditOld, VEditTorn: editcheck.go).
//   - Recurring schedules: checkSchedules (recurcheck.go); their
//     occurrences are routed there by the hourglass-schedule header.
//
// Violations of a message named by cut bytes are marked Cut.
//
// With p.Cluster (--cluster) the same rules judge what the cluster's
// Receive, Ack and Nack (JetStream consumers of the delivery stream) did,
// with these differences, each a documented difference from one node
// (docs/CLUSTER.md "Receiving"):
//
//   - Each delivery carries the delivery stream's sequence of the copy it
//     is (from its receipt). A second copy of an ID in the stream (the
//     owner republished it, JetStream's duplicate window did not absorb
//     it) is a separate message to the consumers: its deliveries count as
//     DupStream (allowed: the cluster promises at least once), and an Ack
//     of one copy says nothing of the other.
//   - A Nack with a delay keeps the ID: it does not ack the message (a
//     redelivery of that ID after it is no duplicate after an ack), and
//     the redelivery may not come before the Nack's sending plus its
//     delay (VEarly); the server's deliver_at is a not-before too.
//   - An Ack answered OK is durable (in a majority of the consumer's
//     replicas): a later Receive handing that copy out again is
//     VAfterAck, as on one node. Acking twice answers OK.
//   - Commitlog offsets are per partition: VSeqReused is not judged.
//   - "A restart" in the dead-letter rules is any SIGKILL of the run
//     (a node's or a NATS server's): cycles count as server lives.
//   - Dead letters: the attempt count is JetStream's delivery count, and a
//     message goes to "<topic>.dlq" at the Nack of its MaxAttempts-th
//     delivery or at the fetch after a last lease ran out; the rules are
//     one node's. A message stored twice in the delivery stream is
//     dead-lettered copy by copy: one copy handed out on its topic after
//     the other's dead letter was acked is no VAfterDeadLetter
//     (dlqJudge.storedTwice). The workload records every Consume stream
//     of a cluster as a Receive in doubt: the node drops the pull it has
//     in flight when the stream ends, and what it fetched was leased.
//   - Cancels and Reschedules (by ID or by key, sent to any node and
//     decided by the partition's owner) are judged as on one node, but no
//     Nack makes a retry that carries the key (keyState.retried), so a
//     call by key after a Nack with a delay is judged, not counted.
//   - Redrive publishes a dead letter to its topic again under the same
//     ID, as attempt 0, and no key names the dead letter: a redriven copy
//     is a later stream copy of the ID on its topic received after a
//     Redrive of its .dlq was sent (no stream duplicate), and the redrive
//     rules follow the chain of copies (judgeRedrivenCluster), within the
//     delivery stream's 2-minute duplicate window (clusterDupWindow)
//     instead of the idempotency window. A kill between a redrive's
//     publish and its ack leaves the dead letter in both topics: its Ack
//     on the .dlq and the copy on the topic are one of the stored-twice
//     cases above.
//   - Pause (a JetStream consumer pause, which the consumer's leader has
//     applied when SetPolicy answers, whichever node answered) and
//     recurring schedules (FIRE_ALL: the occurrences of a takeover gap
//     come late, as those of one node's restart) are judged as on one
//     node.
func Check(ev Events, p CheckParams) Result {
	if p.Precision == 0 {
		p.Precision = time.Millisecond
	}
	maxA := p.MaxAttempts
	if maxA == 0 {
		maxA = MaxAttempts
	}
	var res Result
	c := &res.Counts
	add := func(v Violation) { res.Violations = append(res.Violations, v) }

	keys := map[string]*keyState{}
	st := func(k string) *keyState {
		s := keys[k]
		if s == nil {
			s = &keyState{cluster: p.Cluster}
			keys[k] = s
		}
		return s
	}
	for i := range ev.Schedules {
		s := &ev.Schedules[i]
		st(s.Key).sched = s
		switch s.Outcome {
		case OK:
			c.Scheduled++
			c.Poison += ones(s.Poison)
			c.ScheduledWorking += ones(s.Kind == KindWorking)
		case InDoubt:
			c.ScheduleInDoubt++
		default:
			c.ScheduleRejected++
		}
	}
	for i := range ev.Cancels {
		x := &ev.Cancels[i]
		st(x.Key).cancels = append(st(x.Key).cancels, x)
		switch {
		case x.Outcome == InDoubt:
			c.CancelInDoubt++
		case x.Outcome == OK && x.Answer == CancelCancelled:
			c.Cancelled++
		case x.Outcome == OK:
			c.CancelOther++
		}
	}
	// A recurring schedule's occurrences (and their acks) are judged by
	// checkSchedules: their body is the schedule's, not a harness key.
	var occ []*Delivery
	var occSettles []*Settle
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		if d.Schedule != "" {
			occ = append(occ, d)
			continue
		}
		st(d.Key).deliveries = append(st(d.Key).deliveries, d)
	}
	for i := range ev.Reschedules {
		x := &ev.Reschedules[i]
		st(x.Key).rescheds = append(st(x.Key).rescheds, x)
	}
	redrives := countRedrives(ev, c)
	rfails := map[string][]*ReceiveFail{} // by topic
	for i := range ev.ReceiveFails {
		f := &ev.ReceiveFails[i]
		rfails[f.Topic] = append(rfails[f.Topic], f)
	}
	c.ReceiveInDoubt = len(ev.ReceiveFails)
	for i := range ev.Settles {
		x := &ev.Settles[i]
		if x.Sched != "" {
			occSettles = append(occSettles, x)
		} else {
			st(x.Key).settles = append(st(x.Key).settles, x)
		}
		switch {
		case x.Kind == Ack && x.Outcome == OK:
			c.Acked++
		case x.Kind == Ack && x.Outcome == InDoubt:
			c.AckInDoubt++
		case x.Kind == Ack:
			c.AckRejected++
		case x.Outcome == OK:
			c.Nacked++
		case x.Outcome == InDoubt:
			c.NackInDoubt++
		}
	}

	cutKeys, cutCancels, cutAcks := map[string]bool{}, map[string]bool{}, map[string][]time.Time{}
	cutQueues, cutFrom := map[string]bool{}, int64(-1)
	for _, k := range ev.Cuts {
		if k.QueueTopic != "" {
			cutQueues[k.QueueTopic] = true
		}
		if k.CommitlogFrom >= 0 && (cutFrom < 0 || k.CommitlogFrom < cutFrom) {
			cutFrom = k.CommitlogFrom
		}
		for _, key := range k.Keys {
			cutKeys[key] = true
		}
		for _, id := range k.CancelIDs {
			cutCancels[id] = true
		}
		if k.AckTopic != "" {
			cutAcks[k.AckTopic] = append(cutAcks[k.AckTopic], k.At)
		}
	}

	// An offset is used once: two messages answered OK under IDs of one
	// commitlog offset mean the log's end went back (a cut under a relaxed
	// fsync policy reuses the cut offsets: marked Cut). A cluster's
	// partitions each have their own commitlog: not checked there.
	if !p.Cluster {
		bySeq := map[int64]*Schedule{}
		for i := range ev.Schedules {
			s := &ev.Schedules[i]
			if s.Outcome != OK || seqOf(s.ID) < 0 {
				continue
			}
			seq := seqOf(s.ID)
			if o := bySeq[seq]; o != nil && o.Key != s.Key {
				add(Violation{Kind: VSeqReused, Key: s.Key, ID: s.ID, Cycle: s.Cycle, At: s.Answered, Cut: cutFrom >= 0 && seq >= cutFrom,
					Detail: fmt.Sprintf("answered with commitlog offset %d, which %s (id %s, cycle %d) was answered with", seq, o.Key, o.ID, o.Cycle)})
			} else if o == nil {
				bySeq[seq] = s
			}
		}
	}

	slack := p.SkewBound + p.Precision
	order := slices.Sorted(maps.Keys(keys))
	counts := newDeliveryCounts(order, keys, occ, slack, p.Cluster)
	for i, key := range order {
		s := keys[key]
		sc := s.sched
		if sc == nil || sc.Outcome == Rejected {
			for _, d := range s.deliveries {
				counts.msgs.Record(uint64(i), time.Time{}, d.Received)
				why := "its body was never scheduled"
				if sc != nil {
					why = "its Schedule was rejected or never reached the server"
				}
				add(Violation{Kind: VPhantom, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Detail: why})
			}
			continue
		}
		if sc.Outcome == InDoubt && len(s.deliveries) > 0 {
			c.InDoubtDelivered++
		}
		// Named by a cut: its own record was cut; a cancel of it was cut;
		// its topic's queue log was cut (the cut offsets are reused, and an
		// ack of the cut record applies to the record written there next);
		// or its commitlog offset is at or above a commitlog cut (reused).
		// Its dead-letter topic's queue log counts as its topic's.
		cutNamed := cutKeys[key] || (sc.ID != "" && cutCancels[sc.ID]) || cutQueues[sc.Topic] || cutQueues[dlqTopic(sc.Topic)] ||
			(cutFrom >= 0 && seqOf(sc.ID) >= cutFrom)

		dl := dlqJudge{p: p, maxA: maxA, sc: sc, dlq: dlqTopic(sc.Topic)}
		for _, d := range s.deliveries {
			switch {
			case d.Topic == dl.dlq:
				dl.dead = append(dl.dead, d)
			case d.Topic == sc.Topic:
				dl.orig = append(dl.orig, d)
			default:
				add(Violation{Kind: VPhantom, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Cut: cutNamed,
					Detail: fmt.Sprintf("handed out on topic %q; its Schedule named %q", d.Topic, sc.Topic)})
			}
		}
		for _, f := range rfails[sc.Topic] {
			if f.Failed.After(sc.Sent) {
				dl.doubt = append(dl.doubt, f)
			}
		}
		c.DLQDeliveries += len(dl.dead)
		if len(dl.dead) > 0 {
			c.DeadLettered++
			if sc.Poison {
				c.DeadLetteredPoison++
			}
		}
		for _, v := range dl.judge(s.settles, c) {
			v.Key, v.Cut = key, cutNamed
			add(v)
		}

		// Cancels and Reschedules truthful, IDs, early deliveries,
		// redriven copies (keyrules.go, reschedcheck.go, redrivecheck.go).
		vs := s.judgeCancels(key, c)
		vs = append(vs, s.judgeReschedules(key, c)...)
		vs = append(vs, s.judgeIDs(key, uint64(i), counts.msgs, p)...)
		var rv []Violation
		var owedCopy bool
		if p.Cluster {
			rv, owedCopy = s.judgeRedrivenCluster(key, &dl, redrives, c)
		} else {
			rv, owedCopy = s.judgeRedriven(key, &dl, redrives, c)
		}
		vs = append(vs, rv...)
		for _, v := range vs {
			if v.Kind != VEarly && v.Kind != VIDMismatch {
				v.Cut = cutNamed // a cut explains losses and replays, not these
			}
			add(v)
			if v.Kind == VRescheduledLost {
				c.Lost++
				owedCopy = true
			}
		}
		if owedCopy {
			c.Pending++
			res.Pending = append(res.Pending, key)
		}

		s.judgeRepeats(key, cutNamed, cutAcks, &dl, counts, p, c, add)

		// Loss: walk the message's life in harness time.
		ended, endedMaybe := s.ended()
		if sc.Outcome != OK || ended {
			if sc.Outcome == OK && sc.Poison {
				c.PoisonCancelled++
			}
			continue
		}
		// Owed a delivery: answered OK, and no Cancel (in doubt or not)
		// may have taken it back.
		if !cancelInDoubt(s.cancels) && !endedMaybe {
			counts.msgs.Acked(i, i+1)
		}
		type step struct {
			at   time.Time
			kind int // 0 delivery, 1 ack ok/doubt, 2 nack ok, 3 nack doubt
		}
		var steps []step
		// A delivery happened somewhere between its Receive's sending and
		// return: place it at the sending, so that a Receive overlapping
		// an Ack never makes the message look unacked (a loss is only
		// reported when no order of the overlapping calls explains it).
		// For the same reason an Ack is placed at its answer and a Nack
		// answered OK at its sending: a Nack that dead-letters the message
		// appends it to the .dlq before it acks it on its topic and
		// answers, so the dead letter can be received and acked before the
		// Nack is answered (seed 2 of the first run with dead letters).
		for _, d := range s.deliveries {
			steps = append(steps, step{d.Issued, 0})
		}
		for _, x := range s.settles {
			switch {
			case x.Kind == Ack && x.Outcome != Rejected:
				steps = append(steps, step{x.Answered, 1})
			case x.Kind == Nack && x.Outcome == OK:
				steps = append(steps, step{x.Sent, 2})
			case x.Kind == Nack && x.Outcome == InDoubt:
				steps = append(steps, step{x.Answered, 3})
			}
		}
		slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
		last := -1
		if len(steps) > 0 {
			last = steps[len(steps)-1].kind
		}
		var v *Violation
		switch {
		case counts.msgs.Lost(i):
			detail := fmt.Sprintf("Schedule answered OK (%s, due %s) and never delivered", sc.Kind, sc.NotBefore.UTC().Format("15:04:05.000"))
			for _, x := range s.cancels {
				if x.Outcome == OK {
					detail += "; a Cancel answered " + x.Answer.String()
				}
			}
			v = &Violation{Kind: VLost, At: sc.Answered, Detail: detail}
		case last == -1:
			// Not owed: a Cancel in doubt may have taken effect before the
			// server died (its record durable, the answer lost); never
			// delivered is one of its two allowed outcomes.
			c.CancelledInDoubt++
		case last == 2:
			v = &Violation{Kind: VLostRetry, At: steps[len(steps)-1].at, Detail: "a Nack with a delay was answered OK; the retry never arrived"}
		case last == 0:
			v = &Violation{Kind: VLostRedelivery, At: steps[len(steps)-1].at, Detail: "delivered, never durably acked, and never handed out again"}
		}
		if sc.Poison && last != -1 && !dl.ackedDead(s.settles) && (v == nil || len(dl.dead) == 0) {
			v = &Violation{Kind: VNotDeadLettered, At: steps[len(steps)-1].at, Detail: dl.notDeadDetail(s.settles)}
		}
		switch {
		case v != nil && owedCopy:
			// Its replacement or a redriven copy owes: reported above.
		case v != nil && v.Kind == VNotDeadLettered:
			c.NotDeadLettered++
			c.Pending++
			res.Pending = append(res.Pending, key)
			v.Key, v.ID, v.Cycle, v.Cut = key, sc.ID, sc.Cycle, cutNamed
			add(*v)
		case v != nil:
			c.Lost++
			c.Pending++
			res.Pending = append(res.Pending, key)
			v.Key, v.ID, v.Cycle, v.Cut = key, sc.ID, sc.Cycle, cutNamed
			add(*v)
		}
	}
	res.Violations = append(append(res.Violations, checkPauses(ev, c)...), checkFreezes(ev, p, c)...)
	res.Violations = append(res.Violations, checkEdits(ev, cutKeys, cutFrom >= 0, c)...)
	cutOcc := false
	for _, k := range ev.Cuts {
		cutOcc = cutOcc || k.CommitlogFrom >= 0 || k.QueueTopic == SchedTopic || k.AckTopic == SchedTopic
	}
	vs, owed := checkSchedules(ev, occ, occSettles, p, cutOcc, counts.copies, c)
	res.Violations = append(res.Violations, vs...)
	counts.total(c, len(occ))
	res.Pending = append(res.Pending, owed...)
	c.Pending += len(owed)
	for _, v := range res.Violations {
		if v.Cut {
			c.CutAttributed++
		}
	}
	slices.Sort(res.Pending)
	res.Pending = slices.Compact(res.Pending)
	c.Pending = len(res.Pending)
	slices.SortStableFunc(res.Violations, func(a, b Violation) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Key, b.Key))
	})
	return res
}

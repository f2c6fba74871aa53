package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hourglassmq/hourglass/recur"
)

// WriteTable prints the summary as a table, then the violations (the
// first one named on its own line) and where the files were kept.
func (s *Summary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := s.Counts
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("seed", s.Seed)
	if s.Cluster != nil {
		row("segment duration", s.SegmentDuration)
	} else {
		row("fsync / segment duration", s.Fsync+" / "+s.SegmentDuration)
	}
	row("cycles", s.Cycles)
	row("kills (SIGKILL) / SIGTERM", fmt.Sprintf("%d / %d", s.Kills, s.Terms))
	row("kill moments", mapString(s.KillMoments))
	row("scheduled (answered OK)", c.Scheduled)
	row("  of them in working time (cr-cal)", c.ScheduledWorking)
	row("schedule in doubt / of them delivered", fmt.Sprintf("%d / %d", c.ScheduleInDoubt, c.InDoubtDelivered))
	row("schedule rejected (server down)", c.ScheduleRejected)
	row("delivered (messages / deliveries)", fmt.Sprintf("%d / %d", c.Delivered, c.Deliveries))
	row("cancelled / other answers / in doubt (of them never delivered)", fmt.Sprintf("%d / %d / %d (%d)", c.Cancelled, c.CancelOther, c.CancelInDoubt, c.CancelledInDoubt))
	row("acked / in doubt / refused", fmt.Sprintf("%d / %d / %d", c.Acked, c.AckInDoubt, c.AckRejected))
	row("nacked / in doubt", fmt.Sprintf("%d / %d", c.Nacked, c.NackInDoubt))
	row("lost", c.Lost)
	row("early", c.Early)
	if cs := s.Cluster; cs != nil {
		row("cluster: hourglass nodes / NATS nodes / partitions / lease TTL", fmt.Sprintf("%d / %d / %d / %s", cs.Nodes, cs.NATSNodes, cs.Partitions, cs.LeaseTTL))
		row("SIGKILLs: hourglass / NATS", fmt.Sprintf("%d / %d", cs.HourglassKills, cs.NATSKills))
		row("stream duplicates (same ID twice; allowed)", cs.StreamDuplicates)
		row("lateness (received - due): p50 / p99 / max", fmt.Sprintf("%.1f ms / %.1f ms / %.1f ms", cs.LatenessP50Ms, cs.LatenessP99Ms, cs.LatenessMaxMs))
		row("hourglass restart to ready: median / max", fmt.Sprintf("%.1f ms / %.1f ms (%d restarts)", s.RecoveryMedian, s.RecoveryMax, s.Restarts))
		row("NATS restart to healthy: max", fmt.Sprintf("%.1f ms", cs.NATSRestartMaxMs))
	}
	row("duplicates (a copy handed out again; by cause below)", c.Duplicates)
	row("duplicates: never acked (allowed)", c.DupUnacked)
	row("duplicates: after ack in doubt (allowed)", c.DupAckInDoubt)
	row("duplicates: after durable ack (violation)", c.DupAfterAck)
	row("max-attempts / poison share", fmt.Sprintf("%d / %d%%", s.MaxAttempts, s.PoisonPercent))
	row("poison scheduled / cancelled / dead-lettered / not (violation)", fmt.Sprintf("%d / %d / %d / %d", c.Poison, c.PoisonCancelled, c.DeadLetteredPoison, c.NotDeadLettered))
	row("dead-lettered (messages / deliveries on .dlq; not poison: allowed)", fmt.Sprintf("%d / %d (%d)", c.DeadLettered, c.DLQDeliveries, c.DeadLettered-c.DeadLetteredPoison))
	row("after a restart (allowed): dead-lettered twice / back on its topic", fmt.Sprintf("%d / %d", c.DupDeadLetterAgain, c.AfterDeadLetterRestart))
	row("Receives in doubt", c.ReceiveInDoubt)
	ops := func(op string) bool { return slices.Contains(s.Operations, op) }
	if ops(opReschedule) {
		row("reschedules: rescheduled / other answers / in doubt / refused (by key; unjudged)", fmt.Sprintf("%d / %d / %d / %d (%d; %d)",
			c.Rescheduled, c.RescheduleOther, c.RescheduleInDoubt, c.RescheduleRejected, c.RescheduleByKey, c.RescheduleUnjudged))
		row("  violations: after / untruthful / in doubt, both / replacement lost", fmt.Sprintf("%d / %d / %d / %d",
			s.kind(VAfterReschedule), s.kind(VRescheduleUntruthful), s.kind(VRescheduleBoth), s.kind(VRescheduledLost)))
	}
	if ops(opEdit) {
		row("edits answered EDITED (of the reschedules above) / violations: old content, torn", fmt.Sprintf("%d / %d, %d",
			c.Edited, s.kind(VEditOld), s.kind(VEditTorn)))
	}
	if ops(opCancelByKey) {
		row("cancels by key (of the cancels above; unjudged)", fmt.Sprintf("%d (%d)", c.CancelByKey, c.CancelByKeyUnjudged))
	}
	if ops(opRedrive) {
		row("redrives: answered / in doubt; moved (answers) / copies delivered", fmt.Sprintf("%d / %d; %d / %d", c.RedriveCalls, c.RedriveInDoubt, c.Redriven, c.RedrivenCopies))
		row("  also acked on the .dlq (allowed) / violations: twice / unfounded", fmt.Sprintf("%d / %d / %d", c.RedriveConsumed, s.kind(VRedrivenTwice), s.kind(VRedriveUnfounded)))
	}
	if ops(opPause) {
		row("pauses / resumes / in doubt; delivered while paused (violation)", fmt.Sprintf("%d / %d / %d; %d", c.Paused, c.Resumed, c.PolicyInDoubt, c.DeliveredWhilePaused))
		row("frozen pauses; delivered before due + freeze (violation)", fmt.Sprintf("%d; %d", c.Frozen, c.FrozenEarly))
	}
	if ops(opRecurring) {
		row("recurring: schedules / calls (in doubt) / occurrences (deliveries)", fmt.Sprintf("%d / %d (%d) / %d (%d)", c.Schedules, c.ScheduleCalls, c.ScheduleCallsInDoubt, c.Occurrences, c.OccurrenceDeliveries))
		row("  due before a delete or update answered, delivered after (allowed)", c.OccurrenceAfterEnd)
		row("  handed out after the drain was done, not acked by the end (allowed)", c.OccurrenceUnackedAtEnd)
		row(fmt.Sprintf("  skipped after %d missed in a row, FIRE_ALL's bound (allowed)", recur.MaxMissed), c.OccurrenceMissedCap)
		row("  violations: twice / skipped / after delete / after update / unexpected", fmt.Sprintf("%d / %d / %d / %d / %d",
			c.OccurrenceTwice, c.OccurrenceSkipped, c.OccurrenceAfterDelete, c.OccurrenceAfterUpdate, c.OccurrenceUnexpected))
	}
	if s.Cluster == nil {
		row("recovery per restart: median / max", fmt.Sprintf("%.1f ms / %.1f ms (%d restarts)", s.RecoveryMedian, s.RecoveryMax, s.Restarts))
	}
	row("operations", strings.Join(s.Operations, ", "))
	row("calls by operation/protocol", mapString(s.Ops))
	row("clock skew / bound", fmt.Sprintf("%.3f ms / %.3f ms", s.SkewMs, s.SkewBoundMs))
	if s.CorruptTail {
		row("corrupt-tail: files / bytes", fmt.Sprintf("%d / %d (%s)", s.Cuts, s.CutBytes, mapString(s.CutsByMode)))
		row("violations attributable to cuts", c.CutAttributed)
	}
	row("drain", fmt.Sprintf("%.1f s, complete: %v", s.DrainMs/1000, s.DrainComplete))
	row("wall time", fmt.Sprintf("%.1f s", s.WallSeconds))
	row("violations", s.ViolationCount)
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Damage != nil {
		s.Damage.writeTable(w)
	}
	if cs := s.Cluster; cs != nil && len(cs.Kills) > 0 {
		fmt.Fprintln(w, "\ntakeover per kill (Consume streams: open on the killed node when it died; re-owned: until the")
		fmt.Fprintln(w, "last of the partitions it owned had another owner in HG_OWNERS; first delivery: until the first")
		fmt.Fprintln(w, "message of any of them, of any partition for a NATS kill, was received as a first attempt;")
		fmt.Fprintln(w, "lateness after: the 99th percentile and the largest received-minus-due of those messages due from the")
		fmt.Fprintln(w, "kill to the next one, first attempts not held by a pause of their topic):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  cycle\tkilled\tpartitions\tConsume streams\tre-owned\tfirst delivery\tlateness after: p99 / max")
		for _, k := range cs.Kills {
			parts := "-"
			if len(k.Partitions) > 0 {
				parts = fmt.Sprint(k.Partitions)
			}
			reowned, streams := "n/a", "-"
			if strings.HasPrefix(k.Target, "hourglass ") {
				reowned, streams = msOrNone(k.ReownedMs), fmt.Sprint(k.ConsumeStreams)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%.0f / %.0f ms\n", k.Cycle, k.Target, parts, streams, reowned, msOrNone(k.FirstDeliveryMs), k.LateP99Ms, k.MaxLateMs)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		writeNATSTimeline(w, cs.Kills)
	}
	first := true
	for _, v := range s.Violations {
		if !v.counts(s.Fsync) {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nFIRST VIOLATION: %s\n", v)
			first = false
			continue
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
	if s.ViolationCount > len(s.Violations) {
		fmt.Fprintf(w, "  ... and %d more\n", s.ViolationCount-len(s.Violations))
	}
	var allowed []Violation
	for _, v := range s.Violations {
		if v.Allowed {
			allowed = append(allowed, v)
		}
	}
	if len(allowed) > 0 {
		fmt.Fprintf(w, "\n%d violations of kinds allowed by --allow %s (reported, not failing):\n", len(allowed), strings.Join(s.Allowed, ","))
		for _, v := range allowed[:min(len(allowed), 10)] {
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	var byDamage []Violation
	for _, v := range s.Violations {
		if v.Damage != "" {
			byDamage = append(byDamage, v)
		}
	}
	if len(byDamage) > 0 {
		fmt.Fprintf(w, "\n%d violations are losses or replays hourglass repair reported (allowed):\n", len(byDamage))
		for _, v := range byDamage[:min(len(byDamage), 10)] {
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	if c.CutAttributed > 0 && s.Fsync != "always" {
		fmt.Fprintf(w, "\n%d violations are attributable to bytes --corrupt-tail cut under --fsync %s (allowed):\n", c.CutAttributed, s.Fsync)
		n := 0
		for _, v := range s.Violations {
			if v.Cut && n < 10 {
				fmt.Fprintf(w, "  %s\n", v)
				n++
			}
		}
	}
	if s.WorkDir != "" && s.Cluster != nil {
		fmt.Fprintf(w, "\nkept: %s: hourglass nodes' data h0..h2 and logs h0.log..h2.log, NATS nodes' stores and logs nats/n0..n2, events events.json\n", s.WorkDir)
	} else if s.WorkDir != "" {
		fmt.Fprintf(w, "\nkept: data directory %s/data, server log %s/server.log, events %s/events.json\n", s.WorkDir, s.WorkDir, s.WorkDir)
	}
	if s.Failed {
		fmt.Fprintln(w, "\nFAIL")
	} else {
		fmt.Fprintln(w, "\nPASS")
	}
	return nil
}

// WriteJSON prints the summary as one JSON object.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

func mapString(m map[string]int) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

func msOrNone(v float64) string {
	if v < 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f ms", v)
}

// kind counts the violations of kind k the summary holds (all of them:
// ViolationsByKind, not only the first 50 it lists).
func (s *Summary) kind(k string) int { return s.ViolationsByKind[k] }

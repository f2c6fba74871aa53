package crashtest

import (
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// relevance says how closely damage d is tied to violation v of the
// message sc (nil if unknown): a schedule segment or dispatch log only
// concerns its bucket's messages (by the first attempt's delivery time in
// the ID; seg is the segment duration), a queue log only its topic's and
// its dead-letter topic's (never a delivery after a Cancel, which the
// queue knows nothing of), the commitlog and the checkpoint any message.
func relevance(d DamageEvent, v Violation, sc *Schedule, seg time.Duration) int {
	switch d.Kind {
	case DSchedFlip, DDoneFlip, DDoneDelete:
		start, err := time.Parse("20060102T150405Z", strings.TrimSuffix(strings.TrimSuffix(filepath.Base(d.Path), ".sched"), ".done"))
		if sc == nil || err != nil || sc.ID == "" {
			return relAny
		}
		id, err := message.ParseID(sc.ID)
		if err != nil {
			return relAny
		}
		if id.DeliverAt >= start.UnixMilli() && id.DeliverAt < start.Add(seg).UnixMilli() {
			return relBucket
		}
		return relNone
	case DQueueLogFlip, DQueueAckFlip:
		t := strings.Split(filepath.ToSlash(d.Rel), "/")
		switch {
		case sc == nil || len(t) < 3:
			return relAny
		case v.Kind == VAfterCancel || v.Kind == VCancelUntruthful:
			return relNone
		case t[2] == sc.Topic || t[2] == dlqTopic(sc.Topic):
			return relTopic
		}
		return relNone
	}
	return relAny
}

// suspect returns the index in evs (sorted by time) of the damage a
// violation most likely follows from, or -1. The most closely tied damage
// wins (relevance: its bucket, then its topic, then any); among equals,
// for a loss the first damage after the Schedule's answer (v.At) or, for
// damage to its bucket, which holds later arrivals too, else the last one
// before it; for anything else the last damage before it.
func suspect(v Violation, evs []DamageEvent, sc *Schedule, seg time.Duration) int {
	loss := slices.Contains(lossKinds, v.Kind)
	best, bestLvl, bestAfter := -1, relNone, false
	for i, d := range evs {
		after := d.At.After(v.At)
		lvl := relevance(d, v, sc, seg)
		switch {
		case lvl == relNone:
			continue
		case loss && !after && lvl < relBucket:
			continue
		case !loss && after:
			continue
		}
		switch {
		case lvl > bestLvl:
		case lvl < bestLvl:
			continue
		case loss && after && bestAfter:
			continue // keep the first after
		case loss && !after && bestAfter:
			continue // after beats before
		}
		best, bestLvl, bestAfter = i, lvl, after
	}
	return best
}

// summarizeDamage counts evs by kind and attributes the violations
// (suspect; scheds are the Schedules by key, seg the segment duration).
func summarizeDamage(evs []DamageEvent, vs []Violation, fsync string, repairCmd bool, scheds map[string]*Schedule, seg time.Duration) *DamageSummary {
	s := &DamageSummary{RepairCommand: repairCmd, ByKind: map[string]*DamageStats{}, Events: evs}
	for _, k := range DamageKinds {
		s.ByKind[k] = &DamageStats{}
	}
	for _, d := range evs {
		st := s.ByKind[d.Kind]
		st.Injected++
		switch d.Outcome {
		case RestartStarted:
			st.Started++
			if d.Named {
				st.Reported++
			}
		case RestartRefused:
			st.Refused++
			if d.Named && d.RepairHint {
				st.Named++
			}
		case RestartHung, RestartExit0:
			st.Hung++
		}
		if d.Repair != nil {
			s.RepairKills += d.Repair.Kills
		}
		if d.Repair != nil && d.Repair.ExitCode == 0 && !d.Undone {
			st.Repaired++
			st.RepairLost += len(d.Repair.Lost) + len(d.Repair.LostIDs) + len(d.Repair.AcksLost)
		}
		if d.Undone {
			st.Undone++
		}
	}
	for _, v := range vs {
		if kind, _, _ := strings.Cut(v.Damage, " "); s.ByKind[kind] != nil {
			s.ByKind[kind].Allowed++
			continue
		}
		switch i := suspect(v, evs, scheds[v.Key], seg); {
		case i < 0:
		case v.counts(fsync):
			st := s.ByKind[evs[i].Kind]
			st.Violations++
			if st.ByViolation == nil {
				st.ByViolation = map[string]int{}
			}
			st.ByViolation[v.Kind]++
		}
	}
	return s
}

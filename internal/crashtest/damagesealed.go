package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Sealed commitlog segments under --damage: the server retains the newest
// sealed segment (damaged schedule entries of recent buckets are rebuilt
// from it) and checks it at start, so a flipped byte there must stop the
// start like any commitlog damage. And a keyed Schedule sent again after
// any restart must get its first ID (or be refused), never a second
// message: the catalog holds the keys of every routed record.

// DCommitlogSealedFlip is one byte XORed inside a record of a sealed
// commitlog segment (one before the active segment).
const DCommitlogSealedFlip = "commitlog-sealed-flip"

// scanSealed adds the records of the sealed commitlog segments of clDir
// (those before active) as candidates of DCommitlogSealedFlip. Every
// record counts, the last one too: a sealed segment is never torn.
func scanSealed(c damageCands, clDir, active string) error {
	ents, err := os.ReadDir(clDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(clDir, e.Name())
		if !strings.HasSuffix(e.Name(), ".log") || p >= active {
			continue
		}
		base, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64)
		if err != nil {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if recs := scanRecords(data, commitlogHeader); len(recs) > 0 {
			c[DCommitlogSealedFlip] = append(c[DCommitlogSealedFlip], damageFile{path: p, recs: recs, base: base})
		}
	}
	return nil
}

// Filler seals the first commitlog segment (128 MiB) once, early in a
// --damage run, so that sealed-segment damage has a target that holds the
// first cycle's keyed Schedules: this many messages of fillerBody bytes,
// due a day ahead (serve's --max-delay here), on a topic no consumer
// reads; the history does not know them.
const (
	fillerMessages = 136
	fillerBody     = 1_000_000
	fillerTopic    = "filler"
)

// fillSealed schedules the filler on the running server unless its
// commitlog has sealed a segment already.
func (r *runner) fillSealed(ctx context.Context, cycle int) error {
	if ents, _ := os.ReadDir(filepath.Join(r.dataDir, "commitlog")); len(ents) > 2 || r.dmg.filled {
		return nil // a sealed segment, an active one and a spare: sealed already
	}
	t0 := time.Now()
	c := connectUnary{r.wl.client(r.srv.addr)}
	body := make([]byte, fillerBody)
	for i := range fillerMessages {
		body[0] = byte(i)
		if _, err := call(ctx, c.Schedule, &hourglassv1.ScheduleRequest{Topic: fillerTopic, Body: body,
			When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: (23 * time.Hour).Milliseconds()}}); err != nil {
			return fmt.Errorf("crashtest: filling the commitlog to seal a segment: %w", err)
		}
	}
	r.dmg.filled = true
	r.progress("cycle %d: %d MB of filler sealed the first commitlog segment in %v", cycle, fillerMessages*fillerBody/1_000_000, time.Since(t0).Round(time.Millisecond))
	return nil
}

// farBucket reports whether the schedule segment or dispatch log name is
// of a bucket that starts more than six hours from now (the filler's).
func farBucket(name string) bool {
	base, _, _ := strings.Cut(name, ".")
	start, err := time.Parse("20060102T150405Z", base)
	return err == nil && start.After(time.Now().Add(6*time.Hour))
}

// keysSentAgain bounds the keyed Schedules checkKeys sends again after a
// start.
const keysSentAgain = 20

// checkKeys sends again, after a start, keyed Schedules answered OK whose
// records the commitlog still holds and whose key's window (the server's
// default, 10 minutes) is not over, each with its key: the answer must be
// the ID of the first, or a refusal; another ID means the key was
// forgotten and the message stored twice (VKeyForgotten). Left out: keys
// whose records a repair reported LOST (never routed, so never staged in
// the catalog: storing again is right), and keys that a later record names
// (a Reschedule's replacement, a Nack's retry).
func (r *runner) checkKeys(ctx context.Context, cycle int) {
	ev := r.hist.Snapshot()
	first := firstCommitlogOffset(r.dataDir)
	gone := lostSpans(r.dmg.events, r.dataDir)
	moved := map[string]bool{}
	for _, x := range ev.Reschedules {
		moved[x.Key] = true
	}
	for _, x := range ev.Settles {
		if x.Kind == Nack && x.NackDelay > 0 {
			moved[x.Key] = true
		}
	}
	var cands []Schedule
	for _, s := range ev.Schedules {
		seq := seqOf(s.ID)
		if s.Outcome != OK || s.ID == "" || seq < first || moved[s.Key] || time.Since(s.Answered) > 9*time.Minute ||
			slices.ContainsFunc(gone, func(sp LostSpan) bool { return seq >= sp.From && seq < sp.To }) {
			continue
		}
		cands = append(cands, s)
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(cycle)<<16|0x6b6579))
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	c := connectUnary{r.wl.client(r.srv.addr)}
	for _, s := range cands[:min(len(cands), keysSentAgain)] {
		res, err := call(ctx, c.Schedule, &hourglassv1.ScheduleRequest{Topic: s.Topic, Body: []byte(s.Key), IdempotencyKey: s.Key,
			When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: (23 * time.Hour).Milliseconds()}})
		switch {
		case err != nil:
			r.dmg.keys.Refused++
		case res.Id == s.ID:
			r.dmg.keys.Same++
		default:
			r.dmg.keys.Forgotten++
			r.extra = append(r.extra, Violation{Kind: VKeyForgotten, Key: s.Key, ID: res.Id, Cycle: cycle, At: time.Now(),
				Detail: fmt.Sprintf("sent again with its key after the restart, answered %s; the first Schedule was answered %s (offset %d, retained from %d): stored twice", res.Id, s.ID, seqOf(s.ID), first)})
		}
	}
}

// KeyChecks counts checkKeys' answers.
type KeyChecks struct {
	Same      int `json:"same"`      // the first ID
	Refused   int `json:"refused"`   // refused (or failed)
	Forgotten int `json:"forgotten"` // another ID: a violation
}

// lostSpans returns the commitlog spans the repairs of evs reported
// lost.
func lostSpans(evs []DamageEvent, dataDir string) []LostSpan {
	var out []LostSpan
	for _, e := range evs {
		if e.Repair == nil || e.Undone {
			continue
		}
		for _, sp := range e.Repair.Lost {
			if log, _ := logOf(sp.File, dataDir); log == "commitlog" {
				out = append(out, sp)
			}
		}
	}
	return out
}

// resumeLost marks paused again, for the drain's resumeAll, each topic
// whose Resume answered OK may have had its record in a commitlog span a
// repair reported lost (bounded by the Schedules answered around it, as
// a cancel's): the server may hold the topic paused again, as an operator
// reading repair's report would find, and resumes it.
func (r *runner) resumeLost() {
	ev := r.hist.Snapshot()
	for _, d := range r.dmg.events {
		if d.Repair == nil || d.Undone {
			continue
		}
		for _, sp := range d.Repair.Lost {
			if l, _ := logOf(sp.File, r.dataDir); l != "commitlog" {
				continue
			}
			for _, x := range ev.Policies {
				if x.Paused || x.Outcome != OK || !x.Sent.Before(d.At) {
					continue
				}
				if lo, hi := opBounds(ev, x.Sent, x.Answered, true); lo < sp.To && hi > sp.From {
					r.wl.mu.Lock()
					r.wl.paused[x.Topic] = true
					r.wl.mu.Unlock()
				}
			}
		}
	}
}

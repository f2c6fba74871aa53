package cluster

// The recurring-schedule RPCs on any node: each is routed to the
// Scheduler of the schedule's partition on its owner (recur.go), and
// ListSchedules merges every partition's.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/recur"
)

// Schedules returns the recurring schedules of the cluster as the API
// serves them: each call is decided by the Scheduler of the schedule's
// partition on its owner, forwarded there unless forwarded is set (the
// call was forwarded here). List merges every partition's.
func (n *Node) Schedules(forwarded bool) recur.Service {
	return schedules{n: n, forwarded: forwarded}
}

type schedules struct {
	n         *Node
	forwarded bool
}

// on runs local on the Scheduler of name's partition if this node owns
// it, else remote on a client of its owner.
func (s schedules) on(ctx context.Context, name, what string, local func(*recur.Scheduler) error, remote func(forward) error) error {
	p := SchedulePartition(name, s.n.opts.Partitions)
	pt, fw, err := s.n.route(ctx, p, s.forwarded, what)
	if err != nil {
		return err
	}
	if pt == nil {
		if err := remote(fw); err != nil {
			return fw.err(what, err)
		}
		return nil
	}
	sch, err := pt.scheduler(ctx)
	if err != nil {
		return err
	}
	return local(sch)
}

func (s schedules) Create(ctx context.Context, d *recur.Def) (next time.Time, err error) {
	err = s.on(ctx, d.Name, "CreateSchedule",
		func(sch *recur.Scheduler) (err error) { next, err = sch.Create(ctx, d); return err },
		func(fw forward) (err error) { next, err = fw.c.CreateSchedule(ctx, clientSchedule(d)); return err })
	return next, err
}

func (s schedules) Update(ctx context.Context, d *recur.Def) (next time.Time, err error) {
	err = s.on(ctx, d.Name, "UpdateSchedule",
		func(sch *recur.Scheduler) (err error) { next, err = sch.Update(ctx, d); return err },
		func(fw forward) (err error) { next, err = fw.c.UpdateSchedule(ctx, clientSchedule(d)); return err })
	return next, err
}

func (s schedules) Pause(ctx context.Context, name string) error {
	return s.on(ctx, name, "PauseSchedule",
		func(sch *recur.Scheduler) error { return sch.Pause(ctx, name) },
		func(fw forward) error { return fw.c.PauseSchedule(ctx, name) })
}

func (s schedules) Resume(ctx context.Context, name string) (next time.Time, err error) {
	err = s.on(ctx, name, "ResumeSchedule",
		func(sch *recur.Scheduler) (err error) { next, err = sch.Resume(ctx, name); return err },
		func(fw forward) (err error) { next, err = fw.c.ResumeSchedule(ctx, name); return err })
	return next, err
}

func (s schedules) Delete(ctx context.Context, name string) error {
	return s.on(ctx, name, "DeleteSchedule",
		func(sch *recur.Scheduler) error { return sch.Delete(ctx, name) },
		func(fw forward) error { return fw.c.DeleteSchedule(ctx, name) })
}

func (s schedules) Get(ctx context.Context, name string, n int) (in recur.Info, err error) {
	err = s.on(ctx, name, "GetSchedule",
		func(sch *recur.Scheduler) (err error) { in, err = sch.Get(ctx, name, n); return err },
		func(fw forward) error {
			ci, err := fw.c.GetSchedule(ctx, name, n)
			if err != nil {
				return err
			}
			in, err = infoOf(ci)
			return err
		})
	return in, err
}

func (s schedules) Backfill(ctx context.Context, name string, from, to time.Time) (b recur.Backfilled, err error) {
	err = s.on(ctx, name, "BackfillSchedule",
		func(sch *recur.Scheduler) (err error) { b, err = sch.Backfill(ctx, name, from, to); return err },
		func(fw forward) error {
			cb, err := fw.c.BackfillSchedule(ctx, name, from, to)
			b = recur.Backfilled{Stored: cb.Stored, Existing: cb.Existing}
			return err
		})
	return b, err
}

// forwardedToken is the page token of a forwarded ListSchedules: the
// partitions the receiver lists, then the name to list after. '~' is in
// no schedule name, so no client's token looks like one.
const forwardedToken = "~"

// List returns up to n schedules by name after the name after (of topic,
// if not empty), each with its next nextN fire times, from every
// partition, and the name to go on after ("" at the end). Each owner
// lists its partitions' first n after it (one forwarded call per other
// node), and the merge keeps the first n: the order and pages of one
// node. A partition without an owner makes it Unavailable.
func (s schedules) List(ctx context.Context, after, topic string, n, nextN int) ([]recur.Info, string, error) {
	if s.forwarded {
		parts, name, err := parseForwardedToken(after, s.n.opts.Partitions)
		if err != nil {
			return nil, "", err
		}
		return s.n.listLocal(ctx, parts, name, topic, n, nextN)
	}
	if strings.HasPrefix(after, forwardedToken) {
		return nil, "", fmt.Errorf("%w: page token %q: pass the next_page_token of the last page, or nothing", recur.ErrInvalid, after)
	}
	var local []int
	remote := map[string][]int{}
	fws := map[string]forward{}
	for p := range s.n.opts.Partitions {
		pt, fw, err := s.n.route(ctx, p, false, "ListSchedules")
		if err != nil {
			return nil, "", err
		}
		if pt != nil {
			local = append(local, p)
			continue
		}
		remote[fw.owner.URL] = append(remote[fw.owner.URL], p)
		fws[fw.owner.URL] = fw
	}
	all, more, err := s.n.listParts(ctx, local, after, topic, n, nextN)
	if err != nil {
		return nil, "", err
	}
	for url, parts := range remote {
		fw := fws[url]
		page, next, err := fw.c.ListSchedulesPage(ctx, clientListOptions(topic, n), forwardedToken+joinInts(parts)+forwardedToken+after)
		if err != nil {
			return nil, "", fw.err("ListSchedules", err)
		}
		for _, ci := range page {
			in, err := infoOf(ci)
			if err != nil {
				return nil, "", err
			}
			all = append(all, in)
		}
		more = more || next != ""
	}
	return pageOf(all, n, more)
}

// listLocal lists the partitions parts of this node.
func (n *Node) listLocal(ctx context.Context, parts []int, after, topic string, size, nextN int) ([]recur.Info, string, error) {
	for _, p := range parts {
		if n.partition(p) == nil {
			return nil, "", unavailable("partition %d moved away from this node while ListSchedules was forwarded to it; retry", p)
		}
	}
	all, more, err := n.listParts(ctx, parts, after, topic, size, nextN)
	if err != nil {
		return nil, "", err
	}
	return pageOf(all, size, more)
}

// listParts gathers the first size schedules after after of each
// partition of parts on this node, and whether any has more.
func (n *Node) listParts(ctx context.Context, parts []int, after, topic string, size, nextN int) ([]recur.Info, bool, error) {
	var all []recur.Info
	more := false
	for _, p := range parts {
		pt := n.partition(p)
		if pt == nil {
			return nil, false, unavailable("partition %d moved away from this node while listing schedules; retry", p)
		}
		sch, err := pt.scheduler(ctx)
		if err != nil {
			return nil, false, err
		}
		page, next, err := sch.List(ctx, after, topic, size, nextN)
		if err != nil {
			return nil, false, err
		}
		all = append(all, page...)
		more = more || next != ""
	}
	return all, more, nil
}

// pageOf sorts all by name and keeps the first n; the token is the last
// name kept if anything is left.
func pageOf(all []recur.Info, n int, more bool) ([]recur.Info, string, error) {
	slices.SortFunc(all, func(a, b recur.Info) int { return strings.Compare(a.Def.Name, b.Def.Name) })
	if len(all) > n {
		all, more = all[:n], true
	}
	if !more || len(all) == 0 {
		return all, "", nil
	}
	return all, all[len(all)-1].Def.Name, nil
}

func joinInts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// parseForwardedToken reads a forwarded ListSchedules token.
func parseForwardedToken(tok string, partitions int) ([]int, string, error) {
	rest, ok := strings.CutPrefix(tok, forwardedToken)
	ps, name, ok2 := strings.Cut(rest, forwardedToken)
	if !ok || !ok2 || ps == "" {
		return nil, "", fmt.Errorf("%w: forwarded ListSchedules page token %q: want ~<partitions>~<name>", recur.ErrInvalid, tok)
	}
	var parts []int
	for _, f := range strings.Split(ps, ",") {
		p, err := strconv.Atoi(f)
		if err != nil || p < 0 || p >= partitions {
			return nil, "", fmt.Errorf("%w: forwarded ListSchedules page token %q: partition %q is not one of 0 to %d", recur.ErrInvalid, tok, f, partitions-1)
		}
		parts = append(parts, p)
	}
	return parts, name, nil
}

// clientSchedule is d as package client sends it to the owner. Headers go
// as a map: a header repeated under one name goes once.
func clientSchedule(d *recur.Def) client.RecurringSchedule {
	cs := client.RecurringSchedule{Name: d.Name, Topic: d.Topic, Spec: d.Spec, TimeZone: d.TZ, Body: d.Body, Paused: d.Paused,
		Jitter: time.Duration(d.JitterMs) * time.Millisecond, Overlap: client.OverlapPolicy(d.Overlap),
		Calendar: d.Calendar, CalendarPolicy: client.CalendarPolicy(d.CalendarPolicy)}
	if len(d.Headers) > 0 {
		cs.Headers = make(map[string]string, len(d.Headers))
		for _, h := range d.Headers {
			cs.Headers[h[0]] = h[1]
		}
	}
	if d.StartMs > 0 {
		cs.Start = time.UnixMilli(d.StartMs)
	}
	if d.EndMs > 0 {
		cs.End = time.UnixMilli(d.EndMs)
	}
	switch d.Misfire {
	case recur.FireAll:
		cs.Misfire = client.MisfireAll
	case recur.Skip:
		cs.Misfire = client.MisfireSkip
	default:
		cs.Misfire = client.MisfireLatest
	}
	return cs
}

// infoOf turns a forwarded GetSchedule's or ListSchedules' answer back
// into recur's terms (headers in key order).
func infoOf(ci client.ScheduleInfo) (recur.Info, error) {
	cs := ci.Schedule
	d := &recur.Def{Name: cs.Name, Topic: cs.Topic, Spec: cs.Spec, TZ: cs.TimeZone, Body: cs.Body, Paused: cs.Paused,
		JitterMs: cs.Jitter.Milliseconds(), Overlap: recur.Overlap(cs.Overlap), Calendar: cs.Calendar, CalendarPolicy: recur.CalendarPolicy(cs.CalendarPolicy),
		Progress: recur.Progress{Fired: ci.Fired, Held: recur.Held{Skipped: ci.Skipped, BufferedMs: msOf(ci.Buffered)}}}
	for _, k := range slices.Sorted(maps.Keys(cs.Headers)) {
		d.Headers = append(d.Headers, [2]string{k, cs.Headers[k]})
	}
	if !cs.Start.IsZero() {
		d.StartMs = cs.Start.UnixMilli()
	}
	if !cs.End.IsZero() {
		d.EndMs = cs.End.UnixMilli()
	}
	switch cs.Misfire {
	case client.MisfireAll:
		d.Misfire = recur.FireAll
	case client.MisfireSkip:
		d.Misfire = recur.Skip
	default:
		d.Misfire = recur.FireOnce
	}
	in := recur.Info{Def: d, Next: ci.Next}
	if !ci.Armed.IsZero() {
		id, err := message.ParseID(ci.Armed.String())
		if err != nil {
			return recur.Info{}, fmt.Errorf("cluster: a forwarded schedule's armed occurrence %q: %w", ci.Armed, err)
		}
		in.Armed = id
	}
	return in, nil
}

// msOf is t in epoch milliseconds, 0 for the zero time.
func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func clientListOptions(topic string, n int) client.ListSchedulesOptions {
	return client.ListSchedulesOptions{Topic: topic, PageSize: n}
}

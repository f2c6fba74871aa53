package engine

import (
	"fmt"
	"path/filepath"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// lostWhy decides what a missing dispatch log (or one recreated after it
// was lost: recreated) of the bucket at start means, and returns why the
// bucket must be held, or "" if the loader can recreate it (recreateDone;
// docs/DESIGN.md, "Faults"). The engine creates a segment's dispatch log
// when reput creates the segment (onSegment), before any of its entries
// can fire, so a missing one was lost, unless the bucket has not started:
// then nothing of it can have been delivered, and the cancels routed to it
// are read back from the commitlog. A log made whole again gets a
// Recovered marker, so no later load decides again.
//
// One more case is provable: a segment whose entries all lie at or above
// reput's checkpoint as this run started was created after that
// checkpoint, so a crash may have come between the segment's creation and
// its dispatch log's; nothing of it can have been delivered or cancelled
// then without creating the log (deliveries and cancels create it too).
// It reads, and changes nothing: the start-up checks call it too.
func (d *driver) lostWhy(start int64, recreated bool) string {
	missing := "is missing"
	if recreated {
		missing = "was lost and recreated after it"
	}
	path := filepath.Join(d.e.schedDir, dispatchlog.Name(start))
	first, hasFirst := firstSeq(filepath.Join(d.e.schedDir, schedulelog.Name(start)))
	if _, ok := d.ld.noDone.Load(start); start <= d.now()+d.leadMs && !ok && (!hasFirst || int64(first) < d.ld.startCkpt) {
		return fmt.Sprintf("its dispatch log %s %s and the bucket has started, so which of its entries were delivered is unknown", path, missing)
	}
	// The cancels of its entries follow their schedule records: only a
	// commitlog that still holds the segment's first entry holds them all.
	if l := d.e.log; hasFirst && int64(first) < l.FirstOffset() {
		return fmt.Sprintf("its dispatch log %s %s and the commitlog no longer holds every cancel of its entries (it starts at offset %d, the segment's first entry is at %d), so which were cancelled is unknown",
			path, missing, l.FirstOffset(), first)
	}
	return ""
}

// recreateDone recreates the lost dispatch log of the bucket job loads,
// which lostWhy found the loader may recreate: with the cancels routed to
// it read back from the commitlog (added to res.done too) and a Recovered
// marker.
func (d *driver) recreateDone(job loadJob, res *loadResult, recreated bool) {
	why := "the bucket has not started: nothing of it can have been delivered"
	if _, ok := d.ld.noDone.Load(job.start); job.start <= d.now()+d.leadMs && !ok {
		why = "the segment was created after the last checkpoint before this start, and nothing of it was delivered or cancelled since"
	}
	missing := "is missing"
	if recreated {
		missing = "was lost and recreated after it"
	}
	log := d.e.opts.Logger
	l := d.e.log
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		log.Warn("engine: dispatch log missing and the commitlog cannot be read for cancels", "bucket", fmtMs(job.start), "err", err)
	} else {
		var recs []dispatchlog.Done
		for it.Next() && it.Offset() < job.pos {
			r := it.Record()
			if id, ok := message.CancelTarget(r.Type, r.Payload); ok {
				if seg, ok := d.e.reput.FindSegment(id.DeliverAt); ok && seg.Start == job.start {
					reason := dispatchlog.Cancelled
					if r.Type == message.TypeReschedule {
						reason = dispatchlog.Rescheduled
					}
					recs = append(recs, dispatchlog.Done{Seq: id.Seq, Reason: reason})
					res.done.Add(id.Seq, reason)
				}
			}
		}
		rerr := it.Err()
		it.Close()
		// The marker goes with the cancels: a crash before they are
		// durable leaves the log marked lost, and the next load decides
		// again. So does a read that stopped short (damage, which the
		// start-up checks refuse the start for, or an I/O error): the
		// marker would make the cancels it did not reach pass for none.
		if rerr == nil {
			recs = append(recs, dispatchlog.Done{Reason: dispatchlog.Recovered})
		} else {
			log.Warn("engine: dispatch log missing and the commitlog could not be read to its end for cancels; it is decided again at the next load",
				"bucket", fmtMs(job.start), "err", rerr)
		}
		if err := d.e.reput.MarkDone(job.start, recs...); err != nil {
			log.Warn("engine: recreating a missing dispatch log failed", "bucket", fmtMs(job.start), "err", err)
		}
	}
	log.Warn("engine: dispatch log "+missing+"; recreated, with the cancels read back from the commitlog: "+why,
		"bucket", fmtMs(job.start), "first_commitlog_offset", l.FirstOffset())
}

// firstSeq returns the seq of the first valid entry of the segment at path.
func firstSeq(path string) (uint64, bool) {
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		return 0, false
	}
	defer rd.Close()
	it := rd.Scan(schedulelog.FirstOffset, -1)
	if !it.Next() {
		return 0, false
	}
	return it.Seq(), true
}

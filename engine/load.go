package engine

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// bucket is a schedule segment loaded into the wheel. Owned by the driver
// goroutine.
type bucket struct {
	start, end int64    // UTC ms
	regions    []region // the wheel slots it holds (refs.go)
	mr         *schedulelog.MappedReader
	rebuilt    []rebuiltEntry // entries of damaged regions, read back from the commitlog
	// done holds the bucket's done entries with their reasons: the
	// dispatch log's when loaded, plus what was routed or delivered since.
	done    dispatchlog.Set
	ready   bool   // the loader has finished
	entries uint64 // entries known: loaded from the file plus routed since
	// pending counts the bucket's references in the wheel, cancelled ones
	// included until their deadline (cancels are lazy): a bucket retires
	// once it is 0.
	pending  int64
	inflight int64 // handed to the sink, not confirmed
	// held counts the entries held back because the dispatch log is
	// damaged or missing: which entries are done is unknown, so none but
	// the routed ones is loaded until `hourglass repair` decides (I3).
	// lost counts the entries that failed to decode when due.
	held, lost int64
	corrupt    bool     // damaged or held: never retire automatically
	topics     topicSet // the topics its messages were delivered to

	// reload is the load to try again at reload.at (engine clock, UTC
	// ms) after a transient failure; attempts counts the failures in a
	// row.
	reload struct {
		job      *loadJob
		at       int64
		attempts int
	}
	// routedFirst is the seq of the first entry routed to the bucket
	// since the loader's Watch (hasRouted): a rebuilt entry at or above it
	// came through routing and must not be added twice.
	routedFirst uint64
	hasRouted   bool
	// routedEarly holds the entries routed while the loader runs, out of
	// the wheel until it is done: the loader's chunks hold the bucket's
	// earlier entries, and a routed entry fired before them would reach
	// the sink out of deliverAt order (messages due at once into a bucket
	// that is loading as they arrive).
	routedEarly []refAt
	// retire: busy while reput retires it; next is the earliest next
	// attempt after one failed.
	retire struct {
		busy bool
		next time.Time
	}
}

type refAt struct {
	deadline int64
	off      int64 // entry offset; negative: a rebuilt entry (entryRef)
}

// loadJob is one attempt to load a bucket; a transient failure part way
// through is retried from where it stopped.
type loadJob struct {
	start   int64
	watched bool  // Watch succeeded (end and pos are set)
	end     int64 // the segment's readable end at Watch; -1: the file's size
	pos     int64 // reput's position just after Watch
	// retired are the retired buckets overlapping this one (Watch): the
	// commitlog records they cover were never this segment's entries.
	retired reput.Retired
	from    int64 // next entry offset to read
	lastSeq uint64
	hasLast bool
	attempt int
}

type loadResult struct {
	job     loadJob
	done    *dispatchlog.Set
	entries uint64
	rebuilt []rebuiltEntry // with their deadlines in rebuiltAt
	at      []int64
	held    int64 // entries held back (dispatch log damaged or missing)
	// prior: the dispatch log recorded deliveries when loaded, made by
	// an earlier run, to topics this run does not know.
	prior   bool
	damaged int  // damaged regions of the segment
	corrupt bool // the bucket holds damage: never retire it automatically
	// err is a failure to retry (transient, or unknown); permanent means
	// the segment cannot be read at all (a damaged header) and is skipped.
	err       error
	permanent bool
}

// loadFailure remembers a segment whose load failed, for backoff.
type loadFailure struct {
	attempts  int
	retryAt   int64 // engine clock, UTC ms
	permanent bool  // do not try again: reported, skipped
}

// openSegment opens a segment to load it; tests inject failures.
var openSegment = schedulelog.OpenMapped

// loadBackoff returns the wait before attempt n+1 of a failed load: 50 ms
// doubling to 5 s.
func loadBackoff(n int) time.Duration {
	return min(50*time.Millisecond<<min(n, 10), 5*time.Second)
}

// loadNext starts loading the oldest segment in the preload window that
// is not loaded, and returns when it next needs to run. Not before reput
// has routed everything present at Open, and one bucket at a time: while
// an overdue bucket is still draining, backlogs wait, so memory stays
// bounded and delivery stays in order. A segment whose load fails for a
// transient reason (a full disk, too many open files, an I/O error) is
// retried with backoff, and later segments wait for it; one that cannot be
// read at all (a damaged header) is reported and skipped. It closes Ready
// once nothing due is left to load.
func (d *driver) loadNext(now int64) int64 {
	if !d.ld.caught || d.ld.loading {
		return never
	}
	retry := never
	for _, b := range d.buckets {
		if b.reload.job == nil {
			continue
		}
		if b.reload.at <= now {
			job := *b.reload.job
			b.reload.job = nil
			d.ld.loading = true
			go d.load(job)
			return never
		}
		retry = min(retry, b.reload.at)
	}
	for _, b := range d.buckets {
		if b.end <= now && (b.pending > 0 || b.inflight > 0 || !b.ready) {
			return retry
		}
	}
	if !d.ld.segsDirty && now < d.ld.nextLoad {
		return min(d.ld.nextLoad, retry)
	}
	lead := d.e.opts.PreloadLead.Milliseconds()
	d.ld.segsDirty, d.ld.nextLoad = false, 1<<62
	next := never
	for _, s := range d.e.reput.Segments() {
		if _, ok := d.buckets[s.Start]; ok {
			continue
		}
		if s.Start-lead > now {
			d.ld.nextLoad = s.Start - lead
			next = d.ld.nextLoad
			break
		}
		if d.futureBusy(s.Start) != nil {
			// Being retired early (the clock moved on meanwhile): load
			// it, if it is still there, once that is over.
			d.ld.segsDirty = true
			return min(next, retry)
		}
		if f := d.ld.failed[s.Start]; f != nil {
			if f.permanent {
				continue
			}
			if f.retryAt > now {
				d.ld.segsDirty = true
				return min(f.retryAt, retry)
			}
		}
		d.startLoad(s)
		d.ld.segsDirty = true
		return never
	}
	if !isClosed(d.e.ready) && d.started() {
		d.logRecovered()
		// Stats.Pending as of now, before Ready says so: the loop stores
		// it only after this returns, and a caller reading Stats at Ready
		// saw 0 for a loaded wheel.
		d.n.pendingN.Store(d.toFire())
		close(d.e.ready)
	}
	return min(next, retry)
}

func (d *driver) startLoad(s schedulelog.SegmentInfo) {
	// The header is read here, when the bucket is first opened: the
	// segment list may know a future segment by its name alone.
	mr, err := openSegment(filepath.Join(d.e.schedDir, s.Name))
	if err != nil {
		f := d.ld.failed[s.Start]
		if f == nil {
			f = &loadFailure{}
			d.ld.failed[s.Start] = f
		}
		f.attempts++
		f.permanent = isCorruption(err)
		wait := d.reportLoadFailure(s.Start, f.attempts, err, f.permanent)
		f.retryAt = d.now() + wait.Milliseconds()
		return
	}
	delete(d.ld.failed, s.Start)
	b := &bucket{start: s.Start, end: mr.Start() + mr.Duration().Milliseconds(), mr: mr}
	d.buckets[s.Start] = b
	d.n.loadedN.Add(1)
	d.ld.loading = true
	go d.load(loadJob{start: s.Start, end: -1, from: schedulelog.FirstOffset})
}

// reportLoadFailure reports failed attempt n to load the bucket at start
// and returns the backoff before the next. A permanent failure (damage
// that keeps the segment from being read at all) is reported once and the
// segment skipped; a transient one goes to the health registry.
func (d *driver) reportLoadFailure(start int64, n int, err error, permanent bool) time.Duration {
	if permanent {
		d.n.corrupt.Add(1)
		d.e.opts.Logger.Error("engine: a schedule segment cannot be read; none of its messages is delivered, the other buckets go on. Stop the server and run `hourglass repair`",
			"bucket", fmtMs(start), "err", err)
		return 0
	}
	wait := loadBackoff(n - 1)
	d.e.health.fail(StageLoad, fmt.Errorf("loading bucket %s: %w", fmtMs(start), err))
	if n == 1 || n%20 == 0 {
		d.e.opts.Logger.Warn("engine: loading a bucket failed; retrying", "bucket", fmtMs(start),
			"attempts", n, "backoff", wait, "err", err)
	}
	return wait
}

func isCorruption(err error) bool {
	var ce *segfile.CorruptionError
	return errors.As(err, &ce)
}

// load runs on its own goroutine: it watches the bucket, reads its done set
// and its entries below the watch point, rebuilds damaged entries from the
// commitlog, and sends them to the driver.
func (d *driver) load(job loadJob) {
	res := &loadResult{job: job}
	defer func() { d.post(ev{kind: evLoaded, loaded: res}) }()
	dir := d.e.schedDir
	path := filepath.Join(dir, schedulelog.Name(job.start))
	log := d.e.opts.Logger
	if !job.watched {
		end, retired, err := d.e.reput.Watch(job.start)
		switch {
		case err == nil:
			job.end, job.retired = end, retired
		case isCorruption(err):
			// Reput cannot open the segment for append; what the file
			// holds can still be read.
			log.Error("engine: schedule segment cannot be opened for append; loading what it holds", "bucket", fmtMs(job.start), "err", err)
			res.corrupt = true
			job.end = -1
		default:
			res.err = err
			return
		}
		job.watched, job.pos = true, d.e.reput.Position()
		res.job = job
		if h := d.e.opts.afterWatch; h != nil {
			h(job.start)
		}
	}
	sal, holdWhy, recreate, err := d.readDone(job.start)
	if err != nil {
		res.err = err
		return
	}
	res.done = sal.Set
	res.prior = sal.Counts.Delivered > 0
	if recreate {
		d.recreateDone(job, res, sal.Lost)
	}
	rd, err := schedulelog.OpenReader(path)
	if err != nil {
		res.err, res.permanent = err, isCorruption(err)
		if res.permanent {
			d.reportLoadFailure(job.start, 1, err, true)
		}
		return
	}
	defer rd.Close()
	hdrStart, hdrEnd := rd.Start(), rd.Start()+rd.Duration().Milliseconds()
	const chunkSize = 1 << 15
	chunk := make([]refAt, 0, chunkSize)
	it := rd.Scan(job.from, job.end)
	gap := func(dmg schedulelog.Damage, hi uint64, hasHi bool) {
		res.damaged++
		res.corrupt = true
		d.n.corrupt.Add(1)
		if holdWhy != "" {
			log.Error("engine: damaged schedule entries skipped", "bucket", fmtMs(job.start), "file", path,
				"offset", dmg.Offset, "bytes", dmg.End-dmg.Offset, "err", dmg.Err)
			return
		}
		d.rebuild(res, path, dmg, job, hi, hasHi, hdrStart, hdrEnd)
	}
	for it.Next() {
		if dmg, ok := merged(it.Skipped()); ok {
			gap(dmg, it.Seq(), true)
		}
		job.lastSeq, job.hasLast, job.from = it.Seq(), true, it.End()
		res.entries++
		if res.done.Contains(it.Seq()) {
			continue
		}
		if holdWhy != "" {
			res.held++
			continue
		}
		chunk = append(chunk, refAt{it.Message().DeliverAt, it.Offset()})
		if len(chunk) == chunkSize {
			d.post(ev{kind: evChunk, bucket: job.start, chunk: chunk})
			chunk = make([]refAt, 0, chunkSize)
		}
	}
	if len(chunk) > 0 {
		d.post(ev{kind: evChunk, bucket: job.start, chunk: chunk})
	}
	if err := it.Err(); err != nil {
		// An I/O error: retried from where it stopped.
		res.job, res.err = job, err
		return
	}
	if dmg, ok := merged(it.Skipped()); ok {
		gap(dmg, 0, false)
	}
	res.job = job
	if holdWhy != "" && res.held > 0 {
		// A bucket due at start has refused the start already
		// (checkDispatchLogs); one found later is held while the engine
		// serves the others.
		res.corrupt = true
		d.n.corrupt.Add(1)
		err := d.heldError(job.start, holdWhy, res.held)
		log.Error("engine: "+err.Error(), "bucket", fmtMs(job.start), "held", res.held)
		d.e.health.hold(StageLoad, err)
	}
}

// merged returns the damaged regions one Next skipped (between the same
// two good entries: a cut record and the bytes of a file cut below its
// synced length, say) as one region, with the first one's error.
func merged(ds []schedulelog.Damage) (schedulelog.Damage, bool) {
	if len(ds) == 0 {
		return schedulelog.Damage{}, false
	}
	d := ds[0]
	for _, o := range ds[1:] {
		d.End = max(d.End, o.End)
		d.Torn = d.Torn && o.Torn
	}
	return d, true
}

// rebuild reads back from the commitlog the entries a damaged region of a
// segment held: the schedule records due in the bucket whose seqs lie
// between the good entries around the damage (entries are appended in seq
// order). The region's upper bound is the next good entry's seq, or, at
// the end of the data, reput's position at Watch (later records reach the
// bucket through routing). A region before the first good entry is bounded
// below by what reput routed to this segment at all: not the records of a
// retired bucket of its time (job.retired; the segment may have been
// retired and created again, and the old one's records must not come
// back), so every retained record of its time below the upper bound.
func (d *driver) rebuild(res *loadResult, path string, dmg schedulelog.Damage, job loadJob, hi uint64, hasHi bool, start, end int64) {
	log := d.e.opts.Logger
	if !hasHi {
		hi = uint64(job.pos)
	}
	args := []any{"bucket", fmtMs(job.start), "file", path, "offset", dmg.Offset, "bytes", dmg.End - dmg.Offset, "err", dmg.Err}
	l := d.e.log
	first := l.FirstOffset()
	// from is the least seq the region can hold: past the good entry
	// before it, or, before the first good entry, past the records of a
	// retired bucket spanning this one's time (none of which reput routed
	// here); the records of retired buckets spanning part of it are
	// skipped one by one below. Reading starts at a record boundary: that
	// good entry's, or the retired bucket's last entry's.
	from := retiredEnd(job.retired, start, end)
	at := from - 1
	if job.hasLast {
		from, at = int64(job.lastSeq)+1, int64(job.lastSeq)
	}
	switch {
	case from >= first:
	case job.hasLast:
		log.Error("engine: part of a damaged schedule region is no longer in the commitlog; its messages that were not delivered before are lost",
			append(args, "lost_seqs_from", from, "lost_seqs_to", first)...)
	default:
		// The region's seqs are unknown: it may hold records retention
		// deleted, or none.
		log.Error("engine: a damaged schedule region before the first good entry may hold entries older than the commitlog's first record; those that were not delivered before are lost",
			append(args, "first_commitlog_offset", first)...)
	}
	from, at = max(from, first), max(at, first)
	if int64(hi) <= from {
		return
	}
	it, err := l.NewIterator(at)
	if err != nil {
		log.Error("engine: damaged schedule entries not rebuilt: the commitlog cannot be read there", append(args, "read_err", err)...)
		return
	}
	defer it.Close()
	var m message.Message
	n := 0
	for it.Next() && it.Offset() < int64(hi) {
		seq := uint64(it.Offset())
		r := it.Record()
		if int64(seq) < from || r.Type != message.TypeSchedule || message.DecodeSchedule(r.Payload, &m) != nil ||
			m.DeliverAt < start || m.DeliverAt >= end || job.retired.Covers(m.DeliverAt, seq) {
			continue
		}
		res.rebuilt = append(res.rebuilt, rebuiltEntry{seq: seq, payload: append([]byte(nil), r.Payload...)})
		res.at = append(res.at, m.DeliverAt)
		n++
	}
	if err := it.Err(); err != nil {
		log.Error("engine: damaged schedule entries partly rebuilt: reading the commitlog failed", append(args, "rebuilt", n, "read_err", err)...)
		return
	}
	if n == 0 {
		// The damaged region held entries, and the commitlog has none of
		// them: an earlier repair lost that span (a repaired commitlog
		// starts past it, with nothing in its place).
		log.Error("engine: damaged schedule entries skipped and lost: the commitlog holds no record of this bucket between their neighbours' seqs, so their messages that were not delivered before are lost",
			append(args, "lost_seqs_from", from, "lost_seqs_before", hi)...)
		return
	}
	log.Error("engine: damaged schedule entries skipped; rebuilt from the commitlog", append(args, "seqs_from", from, "seqs_before", hi, "rebuilt", n)...)
}

// retiredEnd returns the largest SeqEnd of the retired buckets that span
// all of [start, end): no commitlog record of that time below it was
// routed to a segment made after them (0: none).
func retiredEnd(retired reput.Retired, start, end int64) int64 {
	var e int64
	for _, r := range retired {
		if r.Start <= start && end <= r.Start+r.Duration.Milliseconds() {
			e = max(e, int64(r.SeqEnd))
		}
	}
	return e
}

// loaded finishes a load on the driver goroutine.
func (d *driver) loaded(res *loadResult) {
	d.ld.loading = false
	start := res.job.start
	b := d.buckets[start]
	if b == nil {
		return
	}
	// After the loader's chunks (posted before this), in routing order.
	for _, ra := range b.routedEarly {
		d.add(b, ra.deadline, ra.off)
	}
	b.routedEarly = nil
	if res.done != nil {
		// Merge what arrived while loading (cancels, deliveries) into the
		// file's done set.
		res.done.AddSet(&b.done)
		b.done = *res.done
	}
	b.entries += res.entries
	b.topics.prior = b.topics.prior || res.prior
	if res.corrupt {
		b.corrupt = true
	}
	if res.held > 0 && b.held == 0 {
		b.held = res.held
		d.n.heldN.Add(1)
		d.n.heldEntries.Add(res.held)
	}
	for i, re := range res.rebuilt {
		if b.done.Contains(re.seq) || b.hasRouted && re.seq >= b.routedFirst {
			continue
		}
		b.rebuilt = append(b.rebuilt, re)
		d.n.rebuiltN.Add(1)
		d.add(b, res.at[i], -int64(len(b.rebuilt)))
	}
	if res.err != nil {
		if res.permanent {
			// Reported by the loader; what was loaded stays, nothing more
			// is read.
			b.corrupt, b.ready = true, true
			return
		}
		// A transient failure: what was loaded stays in the wheel, and
		// the load is tried again, in place, from where it stopped.
		b.reload.attempts++
		wait := d.reportLoadFailure(start, b.reload.attempts, res.err, false)
		job := res.job
		b.reload.job, b.reload.at = &job, d.now()+wait.Milliseconds()
		return
	}
	b.reload.attempts = 0
	b.ready = true
	if d.n.heldN.Load() == 0 && !d.loadRetrying() {
		d.e.health.ok(StageLoad)
	}
}

// loadRetrying reports whether a load waits to be tried again after a
// transient failure.
func (d *driver) loadRetrying() bool {
	for _, f := range d.ld.failed {
		if !f.permanent {
			return true
		}
	}
	for _, b := range d.buckets {
		if b.reload.job != nil {
			return true
		}
	}
	return false
}

// routed adds entries reput routed to loaded buckets to the wheel.
func (d *driver) routed(entries []reput.Entry) {
	var b *bucket
	for _, en := range entries {
		if b == nil || b.start != en.Bucket {
			if b = d.buckets[en.Bucket]; b == nil {
				continue // unwatched meanwhile; it is in the file for the next load
			}
		}
		if !b.hasRouted {
			b.routedFirst, b.hasRouted = en.Seq, true
		}
		b.entries++
		if !b.ready {
			b.routedEarly = append(b.routedEarly, refAt{deadline: en.DeliverAt, off: en.Offset})
			continue
		}
		d.add(b, en.DeliverAt, en.Offset)
	}
}

// chunkLoaded adds a chunk of a loading bucket's entries to the wheel.
func (d *driver) chunkLoaded(start int64, chunk []refAt) {
	b := d.buckets[start]
	if b == nil {
		return
	}
	for _, ra := range chunk {
		d.add(b, ra.deadline, ra.off)
	}
}

// logRecovered logs what the start recovered, once, when Ready closes:
// the commitlog span reput routed again (from its checkpoint to the end at
// Open), what that routing appended, the buckets loaded, and how long it
// took.
func (d *driver) logRecovered() {
	e := d.e
	from := d.ld.startCkpt
	if from == math.MaxInt64 {
		from = 0 // no checkpoint: routed from the start of what the commitlog holds
	}
	rs := e.reput.Stats()
	abs, err := filepath.Abs(e.opts.Dir)
	if err != nil {
		abs = e.opts.Dir
	}
	e.opts.Logger.Info("engine: recovered", "data_dir", abs, "new", e.fresh,
		"commitlog_replayed_bytes", max(e.openEnd-from, 0), "commitlog_from", from, "commitlog_end", e.openEnd,
		"entries_routed", rs.Routed, "entries_already_routed", rs.Skipped, "cancels_routed", rs.Cancels,
		"buckets_loaded", d.n.loadedN.Load(), "pending_loaded", d.w.Len(), "segments", len(e.reput.Segments()),
		"held", d.n.heldEntries.Load(), "took", e.opts.Now().Sub(e.opened).Round(time.Millisecond))
}

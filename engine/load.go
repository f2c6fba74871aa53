package engine

import (
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/wheel"
)

// bucket is a schedule segment loaded into the wheel. Owned by the driver
// goroutine.
type bucket struct {
	start, end int64 // UTC ms
	slot       uint8 // wheel.Ref bucket number
	mr         *schedulelog.MappedReader
	done       dispatchlog.Set // done seqs in the dispatch log when loaded, plus cancels since
	cancelled  dispatchlog.Set // seqs cancelled while loaded, so a repeated Cancel says so
	delivered  seqRuns         // seqs delivered while loaded: only Cancel asks
	ready      bool            // the loader has finished
	entries    uint64          // entries known: loaded from the file plus routed since
	pending    int64           // in the wheel
	inflight   int64           // handed to the sink, not confirmed
	corrupt    bool            // an entry failed to decode: never retire automatically
	retiring   bool
	retryAt    time.Time // earliest next retire attempt
}

type refAt struct {
	deadline int64
	ref      wheel.Ref
}

type loadResult struct {
	start   int64
	done    *dispatchlog.Set
	entries uint64
	err     error
}

// loadNext starts loading the oldest segment in the preload window that
// is not loaded, and returns when it next needs to run. Not before reput
// has routed everything present at Open, and one bucket at a time: while
// an overdue bucket is still draining, backlogs wait, so memory stays
// bounded and delivery stays in order. It closes Ready once nothing due is
// left to load.
func (d *driver) loadNext(now int64) int64 {
	if !d.caught || d.loading {
		return never
	}
	for _, b := range d.buckets {
		if b.end <= now && (b.pending > 0 || b.inflight > 0 || !b.ready) {
			return never
		}
	}
	if !d.segsDirty && now < d.nextLoad {
		return d.nextLoad
	}
	lead := d.e.opts.PreloadLead.Milliseconds()
	d.segsDirty, d.nextLoad = false, 1<<62
	next := never
	for _, s := range d.e.reput.Segments() {
		if _, ok := d.buckets[s.Start]; ok {
			continue
		}
		if s.Start-lead > now {
			d.nextLoad = s.Start - lead
			next = d.nextLoad
			break
		}
		d.startLoad(s)
		d.segsDirty = true
		return never
	}
	if !isClosed(d.e.ready) {
		close(d.e.ready)
	}
	return next
}

func (d *driver) startLoad(s schedulelog.SegmentInfo) {
	var slot int = -1
	for i, b := range d.slots {
		if b == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		d.e.opts.Logger.Error("engine: 256 buckets loaded; not loading more", "bucket", fmtMs(s.Start))
		return
	}
	mr, err := schedulelog.OpenMapped(filepath.Join(d.e.schedDir, s.Name))
	if err != nil {
		d.e.opts.Logger.Error("engine: cannot open a segment to load it", "bucket", fmtMs(s.Start), "err", err)
		return
	}
	b := &bucket{start: s.Start, end: s.End(), slot: uint8(slot), mr: mr}
	d.buckets[s.Start] = b
	d.slots[slot] = b
	d.loadedN.Add(1)
	d.loading = true
	go d.load(b.start, b.slot)
}

// load runs on its own goroutine: it watches the bucket, reads its done set
// and its entries below the watch point, and sends them to the driver.
func (d *driver) load(start int64, slot uint8) {
	res := &loadResult{start: start}
	defer func() { d.post(ev{kind: evLoaded, loaded: res}) }()
	end, err := d.e.reput.Watch(start)
	if err != nil {
		res.err = err
		return
	}
	dir := d.e.schedDir
	res.done, _, err = dispatchlog.Load(filepath.Join(dir, dispatchlog.Name(start)))
	if err != nil {
		res.err = err
		return
	}
	rd, err := schedulelog.OpenReader(filepath.Join(dir, schedulelog.Name(start)))
	if err != nil {
		res.err = err
		return
	}
	defer rd.Close()
	const chunkSize = 1 << 15
	chunk := make([]refAt, 0, chunkSize)
	it := rd.Iter()
	for it.Next() && it.Offset() < end {
		res.entries++
		if res.done.Contains(it.Seq()) {
			continue
		}
		chunk = append(chunk, refAt{it.Message().DeliverAt, wheel.NewRef(slot, uint32(it.Offset()/schedulelog.Align))})
		if len(chunk) == chunkSize {
			d.post(ev{kind: evChunk, bucket: start, chunk: chunk})
			chunk = make([]refAt, 0, chunkSize)
		}
	}
	if err := it.Err(); err != nil {
		res.err = err
		return
	}
	if len(chunk) > 0 {
		d.post(ev{kind: evChunk, bucket: start, chunk: chunk})
	}
}

// loaded finishes a load on the driver goroutine.
func (d *driver) loaded(res *loadResult) {
	d.loading = false
	b := d.buckets[res.start]
	if b == nil {
		return
	}
	if res.err != nil {
		// Entries already in the wheel stay: they fire, and the bucket
		// is never retired (its entry count is unknown). Reloading would
		// add them twice.
		d.e.opts.Logger.Error("engine: loading a bucket failed; its remaining messages are not delivered until a restart",
			"bucket", fmtMs(res.start), "err", res.err)
		b.corrupt = true
		b.ready = true
		return
	}
	// Merge what arrived while loading (cancels, deliveries) into the
	// file's done set.
	for seq := range b.done.All() {
		res.done.Add(seq)
	}
	b.done = *res.done
	b.entries += res.entries
	b.ready = true
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
		b.entries++
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
		if d.w.Add(ra.deadline, ra.ref) {
			b.pending++
		}
	}
}

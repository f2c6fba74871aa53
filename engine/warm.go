package engine

// warmChunk bounds the bytes of schedule segments one warm call maps in:
// about a millisecond of the driver's time on this project's machines,
// so an entry falling due meanwhile waits at most that long.
const warmChunk = 4 << 20

// warmAheadMs is how long before its hour begins a loaded bucket's
// segment starts to be warmed.
const warmAheadMs = 10_000

// warm maps into the process, at most warmChunk bytes at a time, the
// pages of the loaded buckets' segments that entries were appended to
// since the last call, for buckets whose hour has begun or begins within
// warmAheadMs. The driver calls it when it would sleep. Entries fire in
// time order, not in the order reput appended them, so without it every
// first read of a page faults on this goroutine, which hands everything
// over: in a hot second written moments before (200,000 messages, 66 MB
// of segment) the first hand-over of 2,400 messages spent 47 ms reading
// its entries, 2 ms after warming (docs/DESIGN.md, "A hot second"). It
// reports whether pages are left. A bucket whose segment cannot be mapped
// is skipped: its entries report the error when they fire.
func (d *driver) warm(now int64) bool {
	budget := int64(warmChunk)
	for _, b := range d.buckets {
		if b.mr == nil || b.start > now+warmAheadMs {
			continue
		}
		more, err := b.mr.Warm(budget)
		if err == nil && more {
			return true
		}
	}
	return false
}

package commitlog

// zeroFillMaxSyncBytes is the most data an fsync covers on average for
// zeroFill to choose zeros. Writing a segment's zeros costs its size in
// disk bandwidth once; reserving it with fallocate instead costs each
// later fsync the conversion of the extents it wrote. On this project's
// reference disk (docs/BENCHMARKS.md, RawFsync) the conversion adds about
// 135 µs per fsync and zeros are written at about 300 MB/s, so zeros pay
// off while the fsyncs are more often than one per 135 µs × 300 MB/s ≈
// 40 KB of data, whatever the segment size.
const zeroFillMaxSyncBytes = 32 << 10

// fillPolicy is what zeroFill remembers between decisions: the syncer's
// counters when it last decided. Guarded by pre.mu.
type fillPolicy struct {
	syncs, synced int64
}

// zeroFill says how to preallocate the next segment: with zeros under
// SyncAlways while the fsyncs since the last decision covered less than
// zeroFillMaxSyncBytes each on average (small group commits, where an
// fsync's latency is what appenders wait for), with fallocate when they
// covered more (large group commits, where the disk's bandwidth is the
// limit and the zeros would take a third of it beside the commitlog's
// and the schedule log's own writes), and with fallocate under the other
// policies, which fsync rarely. With no fsync since the last decision it
// keeps zeros under SyncAlways. pre.mu is held.
func (l *Log) zeroFill() bool {
	if l.opts.Sync != SyncAlways {
		return false
	}
	syncs, synced := l.syncer.syncs.Load(), l.syncer.synced.Load()
	n, bytes := syncs-l.pre.fill.syncs, synced-l.pre.fill.synced
	l.pre.fill.syncs, l.pre.fill.synced = syncs, synced
	if n <= 0 {
		return true
	}
	zero := bytes/n < zeroFillMaxSyncBytes
	if !zero {
		l.opts.Logger.Debug("commitlog: preallocating the next segment with fallocate: large group commits",
			"bytes_per_fsync", bytes/n, "fsyncs", n)
	}
	return zero
}

package commitlog

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// syncer is the state of group commit: the syncer goroutine (runSyncer)
// and every Sync share it.
type syncer struct {
	// mu serialises Sync, so that staged writes reach the file before
	// any fsync that claims to cover them.
	mu sync.Mutex
	// synced is the logical end of what an fsync has covered.
	synced  atomic.Int64
	kick    chan struct{} // wakes the syncer goroutine; capacity 1
	appends atomic.Int64  // Append calls that wrote records, for the syncer
	syncs   atomic.Int64  // fsync rounds that covered new data
}

// kickSyncerLocked asks the syncer for a sync, starting its goroutine if
// it is stopped. l.mu is held: the syncer looks for a kick under l.mu
// before it stops, so it never stops with one waiting.
func (l *Log) kickSyncerLocked() {
	select {
	case l.syncer.kick <- struct{}{}:
	default:
	}
	if !l.mu.syncing {
		l.mu.syncing = true
		l.wg.Add(1) // before Close waits: Close sets closed under l.mu
		go l.runSyncer()
	}
}

// syncerIdle stops the syncer if no kick waits, and reports whether it did.
func (l *Log) syncerIdle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.syncer.kick) > 0 {
		return false
	}
	l.mu.syncing = false
	return true
}

// runSyncer is the syncer goroutine: it makes written data durable and
// publishes it to readers, and ends once nothing is asked of it. Under
// SyncInterval it waits out the interval after a sync before the next one;
// under SyncAlways it syncs as soon as asked, so appenders that arrive
// during an fsync share the next one.
func (l *Log) runSyncer() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-l.syncer.kick:
		default:
			if l.syncerIdle() {
				return
			}
			continue
		}
		if err := l.Sync(); err != nil {
			return
		}
		if l.opts.Sync == SyncAlways {
			// Let the appenders this fsync just released stage their next
			// records before the next fsync starts, so that one fsync
			// covers them all rather than half of them per round. Yield
			// while appends keep arriving, a bounded number of times.
			for range 16 {
				n := l.syncer.appends.Load()
				runtime.Gosched()
				if l.syncer.appends.Load() == n {
					break
				}
			}
		}
		if l.opts.Sync == SyncInterval {
			select {
			case <-l.stop:
				return
			case <-time.After(l.opts.SyncInterval):
			}
		}
	}
}

// Sync makes everything appended so far durable and visible to readers.
func (l *Log) Sync() error {
	l.syncer.mu.Lock()
	defer l.syncer.mu.Unlock()
	l.mu.Lock()
	if l.mu.err != nil {
		err := l.mu.err
		l.mu.Unlock()
		return err
	}
	target, syncFile := l.mu.written, l.mu.syncFile
	pend := l.mu.pend
	l.mu.pend = nil
	l.mu.Unlock()
	from := l.syncer.synced.Load()
	if target <= from {
		return nil
	}
	// Segments below synced cannot be deleted (DeleteBefore stops there),
	// so the staged writes' segments are still mapped and open.
	var err error
	for _, w := range pend {
		if _, werr := w.seg.f.WriteAt(w.buf, headerSize+w.pos); werr != nil && err == nil {
			err = fmt.Errorf("commitlog: write %s: %w", w.seg.path, werr)
		}
	}
	if len(pend) > 0 {
		l.mu.Lock()
		for _, w := range pend {
			if cap(w.buf) <= 4<<20 {
				l.mu.freeBufs = append(l.mu.freeBufs, w.buf)
			}
		}
		l.mu.Unlock()
	}
	if err != nil {
		l.fail(err)
		return err
	}
	l.segs.RLock()
	var dirty []*segment
	for _, s := range l.segs.list {
		if s.end() > from && s.base < target {
			s.acquire()
			dirty = append(dirty, s)
		}
	}
	l.segs.RUnlock()
	start := time.Now()
	for _, s := range dirty {
		if err == nil {
			if serr := syncFile(s.f); serr != nil {
				err = fmt.Errorf("commitlog: fsync %s: %w", s.path, serr)
			}
		}
		if err == nil && l.opts.Sync != SyncAlways {
			dropWritten(s, from, target)
		}
		s.release()
	}
	if err != nil {
		l.fail(err)
		return err
	}
	if l.opts.OnSync != nil {
		l.opts.OnSync(time.Since(start))
	}
	storeMax(&l.syncer.synced, target)
	l.syncer.syncs.Add(1)
	if l.opts.Sync != SyncNone {
		l.view.publish(target)
	}
	return nil
}

// fail records a sticky error: every later Append and Sync returns it.
func (l *Log) fail(err error) {
	l.mu.Lock()
	if l.mu.err == nil {
		l.mu.err = err
		l.view.failed.Store(&err)
	}
	l.mu.Unlock()
	l.view.wake()
}

func storeMax(v *atomic.Int64, x int64) bool {
	for {
		old := v.Load()
		if x <= old {
			return false
		}
		if v.CompareAndSwap(old, x) {
			return true
		}
	}
}

// dropWritten drops from the process's resident set the whole pages of s
// that the appenders wrote through its mapping in [from, to), once an
// fsync has covered them. Under SyncInterval appends copy into the
// mapping, and every page written stayed resident until the segment was
// unmapped: up to two segments (256 MiB) of the server's RSS after a
// burst of keyed Schedules that reput had not routed yet. The pages stay
// in the page cache (dirty ones are written back as usual), so readers
// behind the writer map them again at the cost of a minor fault. The page
// that holds to is left: the next appends write into it.
func dropWritten(s *segment, from, to int64) {
	lo, hi := max(from, s.base), min(to, s.end())
	page := int64(pageSize)
	a := (headerSize + lo - s.base) / page * page
	b := (headerSize + hi - s.base) / page * page
	if a < b {
		dropPages(s.m[a:b])
	}
}

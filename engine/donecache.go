package engine

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// maxCachedDone bounds the dispatch logs doneCache keeps, and
// maxCachedDoneBytes the size of a log it keeps (about 2.7 million
// done-records, 21 MiB in memory); a larger one is read whole each time.
const (
	maxCachedDone      = 4
	maxCachedDoneBytes = 64 << 20
)

// doneCache answers why an entry of a bucket not in memory is done (the
// question Cancel and Reschedule ask of it) from the dispatch logs read
// last, reading each log once and then only what was appended since:
// asked for every entry of a bucket with many done-records, it reads the
// log once, not once per entry. Safe for concurrent use.
type doneCache struct {
	mu   sync.Mutex
	logs map[string]*doneLog // by path; at most maxCachedDone
	tick uint64
}

// doneLog is what doneCache holds of one dispatch log.
type doneLog struct {
	mu     sync.Mutex
	file   os.FileInfo        // the file read, to notice one made anew under its name
	end    int64              // read up to here
	sorted []uint64           // seq<<3 | reason, by seq, the first record of each seq
	tail   []dispatchlog.Done // read since the last sort, in file order
	used   uint64             // doneCache.tick when last asked (under doneCache.mu)
}

// packDone packs a done-record into 8 bytes: seqs are commitlog offsets,
// far below 2^61, and reasons fit in 3 bits.
func packDone(d dispatchlog.Done) uint64 { return d.Seq<<3 | uint64(d.Reason&7) }

// reason returns why the dispatch log at path says seq is done (its first
// record of seq), and whether it says so at all.
func (c *doneCache) reason(path string, seq uint64) (dispatchlog.Reason, bool, error) {
	c.mu.Lock()
	if c.logs == nil {
		c.logs = map[string]*doneLog{}
	}
	c.tick++
	l := c.logs[path]
	if l == nil {
		if len(c.logs) >= maxCachedDone {
			var old string
			for p, x := range c.logs {
				if old == "" || x.used < c.logs[old].used {
					old = p
				}
			}
			delete(c.logs, old)
		}
		l = &doneLog{}
		c.logs[path] = l
	}
	l.used = c.tick
	c.mu.Unlock()

	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if fi.Size() > maxCachedDoneBytes {
		l.reset()
		return doneReason(path, seq)
	}
	if l.file == nil || !os.SameFile(l.file, fi) || fi.Size() < l.end {
		l.reset()
	}
	l.file = fi
	if fi.Size() > l.end || l.end == 0 {
		recs, end, err := dispatchlog.RecordsFrom(path, l.end, l.tail)
		if err != nil {
			return 0, false, err
		}
		l.tail, l.end = recs, end
		if len(l.tail) > max(1024, len(l.sorted)/8) {
			l.merge()
		}
	}
	// sorted holds what was read first.
	if i, ok := slices.BinarySearchFunc(l.sorted, seq, cmpSeq); ok {
		return dispatchlog.Reason(l.sorted[i] & 7), true, nil
	}
	for _, r := range l.tail { // file order: the first one wins
		if r.Seq == seq {
			return r.Reason, true, nil
		}
	}
	return 0, false, nil
}

func cmpSeq(p uint64, seq uint64) int { return cmp.Compare(p>>3, seq) }

// reset forgets what was read. l.mu is held.
func (l *doneLog) reset() { l.file, l.end, l.sorted, l.tail = nil, 0, nil, nil }

// merge sorts the tail into sorted, keeping the first record of a seq.
func (l *doneLog) merge() {
	all := slices.Grow(l.sorted, len(l.tail))
	for _, r := range l.tail {
		all = append(all, packDone(r))
	}
	// Stable: of equal seqs, the one read first (sorted before tail, the
	// tail in file order) stays first.
	slices.SortStableFunc(all, func(a, b uint64) int { return cmp.Compare(a>>3, b>>3) })
	l.sorted = slices.CompactFunc(all, func(a, b uint64) bool { return a>>3 == b>>3 })
	l.tail = l.tail[:0]
}

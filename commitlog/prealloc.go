package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// preallocator makes the next segment file ahead of need, on its own
// goroutine (runPreallocator), so that the append that fills the active
// segment finds the next one ready: creating a segment writes or
// allocates all of it, which no appender should wait for.
type preallocator struct {
	// mu guards spare, create, allocRange and fill.
	mu    sync.Mutex
	spare *segment // the preallocated next segment, or nil
	// create makes a segment file (tests make it fail).
	create func(dir string, base, size, first int64, zeroFill bool) (string, error)
	// allocRange allocates blocks of a segment file (allocRange; tests
	// make it fail).
	allocRange func(f *os.File, from, to int64, zeroFill bool) error
	fill       fillPolicy // zeros or fallocate for the next one (zerofill.go)
	ask        chan int64 // bases to preallocate; capacity 1
	// extend asks for the next allocation step of a segment; capacity 1.
	extend chan extendReq
	// nextBase is the base the next segment must have: the active
	// segment's end, or further while a reservation is in progress.
	// Written under mu.
	nextBase atomic.Int64
}

// takeSpare returns the preallocated segment for base, creating it now if
// the preallocator has not.
func (l *Log) takeSpare(base int64) (*segment, error) {
	l.pre.mu.Lock()
	defer l.pre.mu.Unlock()
	if s := l.pre.spare; s != nil && s.base == base {
		l.pre.spare = nil
		l.pre.nextBase.Store(s.end())
		return s, nil
	}
	s, err := l.newSegment(base)
	if err == nil {
		l.pre.nextBase.Store(s.end())
	}
	return s, err
}

// newSegment creates the segment file at base and maps it. pre.mu is held.
func (l *Log) newSegment(base int64) (*segment, error) {
	first := l.opts.AllocStep
	if _, err := l.pre.create(l.dir, base, l.opts.SegmentSize, first, l.zeroFill()); err != nil {
		return nil, fmt.Errorf("commitlog: create segment %s: %w", filepath.Join(l.dir, segmentName(base)), wrapNoSpace(err))
	}
	s, err := openSegment(filepath.Join(l.dir, segmentName(base)), false)
	if err == nil {
		s.alloc.Store(min(s.capacity, first-headerSize))
	}
	return s, err
}

// ensureAlloc makes sure the data positions of s below need have blocks,
// allocating up to a step beyond need when they do not. It fails with
// ErrDiskFull when the disk is full; nothing is written then, and a later
// call tries again. pre.mu must not be held.
func (l *Log) ensureAlloc(s *segment, need int64) error {
	if need <= s.alloc.Load() {
		return nil
	}
	l.pre.mu.Lock()
	defer l.pre.mu.Unlock()
	return l.extend(s, need)
}

// extend allocates blocks for s from its alloc to a step beyond need (at
// most its capacity). pre.mu is held.
func (l *Log) extend(s *segment, need int64) error {
	from := s.alloc.Load()
	if need <= from {
		return nil
	}
	to := min(s.capacity, (need+l.opts.AllocStep+pageSize-1)/pageSize*pageSize)
	zero := l.zeroFill()
	err := l.pre.allocRange(s.f, headerSize+from, headerSize+to, zero)
	if err == nil && zero {
		// Flush the zeros now, off the appenders' fsyncs.
		err = fdatasync(s.f)
	}
	if err != nil {
		return fmt.Errorf("commitlog: allocate %d bytes of %s at file position %d: %w", to-from, s.path, headerSize+from, wrapNoSpace(err))
	}
	s.alloc.Store(to)
	return nil
}

// extendReq asks the preallocator to allocate the segment at base to a
// step beyond need.
type extendReq struct{ base, need int64 }

// pageSize rounds allocations.
const pageSize = 4096

// maybeExtendAhead asks the preallocator to allocate the next step of the
// active segment once the writes are within half a step of the end of
// what is allocated, so that appenders rarely allocate themselves. l.mu
// is held.
func (l *Log) maybeExtendAhead() {
	s := l.mu.active
	if a := s.alloc.Load(); a < s.capacity && l.mu.writePos+l.opts.AllocStep/2 >= a {
		select {
		case l.pre.extend <- extendReq{base: s.base, need: l.mu.writePos + l.opts.AllocStep/2}:
		default:
		}
		l.startPreallocator()
	}
}

// maybeRequestSpare asks the preallocator for the segment after the
// active one once the active one is half full. l.mu is held, or l is not
// shared yet.
func (l *Log) maybeRequestSpare() {
	if end := l.mu.active.end(); l.mu.spareAsked != end && l.mu.writePos >= l.mu.active.capacity/2 {
		l.mu.spareAsked = end
		l.requestSpare(end)
	}
}

// requestSpare asks the preallocator for the segment at base, replacing
// any request it has not picked up yet. It never blocks. l.mu is held, or
// l is not shared yet.
func (l *Log) requestSpare(base int64) {
	select {
	case <-l.pre.ask:
	default:
	}
	select {
	case l.pre.ask <- base:
	default:
	}
	l.startPreallocator()
}

// startPreallocator starts the preallocator goroutine unless it runs.
// l.mu is held, or l is not shared yet.
func (l *Log) startPreallocator() {
	if !l.mu.preallocating {
		l.mu.preallocating = true
		l.wg.Add(1) // before Close waits: Close sets closed under l.mu
		go l.runPreallocator()
	}
}

// preallocatorIdle stops the preallocator if no request waits, and
// reports whether it did.
func (l *Log) preallocatorIdle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pre.ask) > 0 || len(l.pre.extend) > 0 {
		return false
	}
	l.mu.preallocating = false
	return true
}

// putBackSpare returns an unused new segment after a failed reservation.
func (l *Log) putBackSpare(s *segment) {
	l.pre.mu.Lock()
	defer l.pre.mu.Unlock()
	if l.pre.spare == nil && s.base == l.mu.active.end() {
		l.pre.spare = s
		l.pre.nextBase.Store(s.base)
		return
	}
	s.removed.Store(true)
	s.release()
}

// runPreallocator is the preallocator goroutine: it creates the segment
// asked for, unless it is no longer the next one or is there already, and
// ends once no request waits.
func (l *Log) runPreallocator() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case req := <-l.pre.extend:
			s := l.segmentFor(req.base)
			if s == nil {
				continue // deleted since
			}
			l.pre.mu.Lock()
			if err := l.extend(s, req.need); err != nil {
				l.opts.Logger.Warn("commitlog: allocating ahead failed; appends that need the space will try again", "err", err)
			}
			l.pre.mu.Unlock()
			s.release()
		case base := <-l.pre.ask:
			l.pre.mu.Lock()
			if base == l.pre.nextBase.Load() && (l.pre.spare == nil || l.pre.spare.base != base) {
				if l.pre.spare != nil {
					l.pre.spare.removed.Store(true)
					l.pre.spare.release()
					l.pre.spare = nil
				}
				s, err := l.newSegment(base)
				l.pre.spare = s
				if err != nil {
					l.opts.Logger.Warn("commitlog: preallocating next segment failed; will retry when needed", "offset", base, "err", err)
				}
			}
			l.pre.mu.Unlock()
		default:
			if l.preallocatorIdle() {
				return
			}
		}
	}
}

func wrapNoSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

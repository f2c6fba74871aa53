package commitlog

import (
	"context"
	"fmt"
	"slices"

	"github.com/hourglassmq/hourglass/record"
)

// Record is one record to append: a type (1-255, 0 is reserved), flags and
// a payload of at most record.MaxPayload bytes.
type Record struct {
	Type    uint8
	Flags   uint8
	Payload []byte
}

// Append appends recs and appends their offsets to offs, returning it. It
// returns once the records are durable under SyncAlways, at once otherwise.
// Either every record of the call is appended or, on error, none is.
func (l *Log) Append(offs []int64, recs ...Record) ([]int64, error) {
	offs, end, err := l.AppendNoWait(offs, recs...)
	if err != nil || l.opts.Sync != SyncAlways {
		return offs, err
	}
	return offs, l.waitFor(context.Background(), end)
}

// AppendNoWait appends recs as Append does but does not wait for them to
// become durable: it returns their offsets and end, the offset one past
// the last of them, and WaitVisible(end) waits for the fsync that covers
// them (under SyncAlways it is already asked for). A record appended by a
// later call has a higher offset, and no fsync makes it durable without
// these, so a caller may append under a lock, release it, and then wait.
func (l *Log) AppendNoWait(offs []int64, recs ...Record) (_ []int64, end int64, _ error) {
	if l.opts.ReadOnly {
		return offs, 0, ErrReadOnly
	}
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return offs, 0, ErrClosed
	}
	if l.mu.err != nil {
		err := l.mu.err
		l.mu.Unlock()
		return offs, 0, err
	}
	next, err := l.reserve(recs)
	if err != nil {
		l.mu.Unlock()
		return offs, 0, err
	}
	seg, pos := l.mu.active, l.mu.writePos
	// Under SyncAlways records are staged in l.mu.pend and written with pwrite
	// by the syncer just before its fsync: on ext4 an fsync after writes
	// through a shared mapping costs several times more than after pwrite
	// (docs/BENCHMARKS.md), and one pwrite per group commit keeps system
	// calls off the appenders' path. Otherwise they are copied straight
	// into the mapping.
	direct := l.opts.Sync == SyncAlways
	rest := 0 // bytes of recs not staged yet: staging room is claimed once
	if direct {
		for _, r := range recs {
			rest += record.Size(len(r.Payload))
		}
	}
	for _, r := range recs {
		size := int64(record.Size(len(r.Payload)))
		if pos+size > seg.capacity {
			seg, next = next[0], next[1:]
			l.segs.Lock()
			l.segs.list = append(l.segs.list, seg)
			l.segs.Unlock()
			l.mu.active, pos = seg, 0
		}
		var dst []byte
		if direct {
			dst = l.stage(seg, pos, int(size), rest)
			rest -= int(size)
		} else {
			dst = seg.data[pos : pos+size]
		}
		record.PutHeader(dst, r.Type, r.Flags, len(r.Payload))
		copy(dst[record.HeaderSize:], r.Payload)
		record.Seal(dst)
		offs = append(offs, seg.base+pos)
		pos += size
	}
	l.mu.writePos = pos
	l.mu.written = seg.base + pos
	l.syncer.appends.Add(1)
	l.maybeRequestSpare()
	l.maybeExtendAhead()
	end = l.mu.written
	if l.opts.Sync != SyncNone {
		l.kickSyncerLocked()
	}
	l.mu.Unlock()

	if l.opts.Sync == SyncNone {
		l.view.publish(end)
	}
	return offs, end, nil
}

// pendingWrite is a run of encoded records staged for pwrite at data
// position pos of seg.
type pendingWrite struct {
	seg *segment
	pos int64
	buf []byte
}

// stage returns n bytes of staging space for data position pos of seg,
// making room for want (the rest of the call's records) when it must
// grow: grown a record at a time, a group commit of megabytes (a hot
// second's first hand-over to a new queue topic) was copied a dozen times
// over, a third of that hand-over's time. l.mu is held.
func (l *Log) stage(seg *segment, pos int64, n, want int) []byte {
	k := len(l.mu.pend)
	if k == 0 || l.mu.pend[k-1].seg != seg || l.mu.pend[k-1].pos+int64(len(l.mu.pend[k-1].buf)) != pos {
		var buf []byte
		if j := len(l.mu.freeBufs); j > 0 {
			buf, l.mu.freeBufs = l.mu.freeBufs[j-1][:0], l.mu.freeBufs[:j-1]
		}
		l.mu.pend = append(l.mu.pend, pendingWrite{seg: seg, pos: pos, buf: buf})
		k++
	}
	w := &l.mu.pend[k-1]
	m := len(w.buf)
	if cap(w.buf)-m < n {
		w.buf = slices.Grow(w.buf, max(n, want))
	}
	w.buf = w.buf[:m+n]
	return w.buf[m:]
}

// reserve checks recs and obtains the new segments the batch needs, so
// that a batch either fits entirely or fails before anything is written.
// l.mu is held.
func (l *Log) reserve(recs []Record) ([]*segment, error) {
	pos, capacity, rotations := l.mu.writePos, l.mu.active.capacity, 0
	for _, r := range recs {
		if r.Type == 0 {
			return nil, record.ErrInvalidType
		}
		if r.Type == TypeSkip {
			return nil, errSkipReserved
		}
		if len(r.Payload) > record.MaxPayload {
			return nil, record.ErrTooLarge
		}
		size := int64(record.Size(len(r.Payload)))
		if pos+size > capacity {
			rotations++
			pos, capacity = 0, l.opts.SegmentSize-headerSize
			if size > capacity {
				return nil, fmt.Errorf("%w: %d bytes framed, segments hold %d", ErrRecordTooLarge, size, capacity)
			}
		}
		pos += size
	}
	var next []*segment
	base := l.mu.active.end()
	for range rotations {
		s, err := l.takeSpare(base)
		if err != nil {
			l.putBack(next)
			return nil, err
		}
		next = append(next, s)
		base = s.end()
	}
	// Every byte the batch writes must have blocks first (createSegment):
	// a full disk then fails this batch only, before anything is written.
	if err := l.allocFor(recs, next); err != nil {
		l.putBack(next)
		return nil, err
	}
	return next, nil
}

// putBack returns the new segments of a failed reservation.
func (l *Log) putBack(next []*segment) {
	for i := len(next) - 1; i >= 0; i-- {
		l.putBackSpare(next[i])
	}
}

// allocFor allocates the space recs take in the active segment and in
// next, the new segments they roll over into. l.mu is held.
func (l *Log) allocFor(recs []Record, next []*segment) error {
	seg, pos := l.mu.active, l.mu.writePos
	for _, r := range recs {
		size := int64(record.Size(len(r.Payload)))
		if pos+size > seg.capacity {
			if err := l.ensureAlloc(seg, pos); err != nil {
				return err
			}
			seg, next, pos = next[0], next[1:], 0
		}
		pos += size
	}
	return l.ensureAlloc(seg, pos)
}

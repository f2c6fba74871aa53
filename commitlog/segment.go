package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/edsrzf/mmap-go"
	"github.com/hourglassmq/hourglass/segfile"
)

// Segment file constants. They are part of the on-disk format and must not
// change without a new formatVersion.
const (
	segmentMagic   = "HGCL"
	formatVersion  = 1
	headerSize     = 32
	segmentSuffix  = ".log"
	nameDigits     = 20
	minSegmentSize = 4096
)

var errBadHeader = errors.New("bad segment header")

// segmentName returns the file name of the segment starting at base.
func segmentName(base int64) string {
	return fmt.Sprintf("%020d%s", base, segmentSuffix)
}

// parseSegmentName returns the base offset a segment file name encodes.
func parseSegmentName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(s) != nameDigits {
		return 0, false
	}
	base, err := strconv.ParseInt(s, 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

func encodeHeader(dst []byte, base, capacity int64) {
	copy(dst[0:4], segmentMagic)
	binary.LittleEndian.PutUint16(dst[4:6], formatVersion)
	binary.LittleEndian.PutUint16(dst[6:8], 0)
	binary.LittleEndian.PutUint64(dst[8:16], uint64(base))
	binary.LittleEndian.PutUint64(dst[16:24], uint64(capacity))
	binary.LittleEndian.PutUint64(dst[24:32], xxhash.Sum64(dst[0:24]))
}

// decodeHeader validates a segment header and returns its base and capacity.
func decodeHeader(src []byte) (base, capacity int64, err error) {
	if len(src) < headerSize {
		return 0, 0, fmt.Errorf("%w: file shorter than its header", errBadHeader)
	}
	if string(src[0:4]) != segmentMagic {
		return 0, 0, fmt.Errorf("%w: magic %q, want %q", errBadHeader, src[0:4], segmentMagic)
	}
	if xxhash.Sum64(src[0:24]) != binary.LittleEndian.Uint64(src[24:32]) {
		return 0, 0, fmt.Errorf("%w: checksum mismatch", errBadHeader)
	}
	if v := binary.LittleEndian.Uint16(src[4:6]); v != formatVersion {
		return 0, 0, fmt.Errorf("%w: format version %d, this build reads %d", errBadHeader, v, formatVersion)
	}
	base = int64(binary.LittleEndian.Uint64(src[8:16]))
	capacity = int64(binary.LittleEndian.Uint64(src[16:24]))
	if base < 0 || capacity <= 0 {
		return 0, 0, fmt.Errorf("%w: base %d capacity %d", errBadHeader, base, capacity)
	}
	return base, capacity, nil
}

// segment is one mapped segment file. The mapping stays valid while refs > 0;
// the Log holds one reference for as long as the segment is in its list, and
// each iterator positioned in it holds another.
type segment struct {
	path     string
	base     int64 // logical offset of data[0]
	capacity int64 // bytes of data space
	f        *os.File
	m        mmap.MMap
	data     []byte // m[headerSize:]
	// alloc is the data position below which the file has blocks: no
	// write goes at or beyond it (Log.ensureAlloc moves it). Written
	// under Log.pre.mu.
	alloc atomic.Int64

	refs    atomic.Int32
	removed atomic.Bool // delete the file when the last reference goes
}

// end returns the logical offset one past this segment's data space.
func (s *segment) end() int64 { return s.base + s.capacity }

// corruption reports the record at logical offset off, in this segment,
// as damaged by err: the file, the byte position in it, and the cause.
func (s *segment) corruption(off int64, err error) *segfile.CorruptionError {
	return &segfile.CorruptionError{Path: s.path, Offset: headerSize + off - s.base,
		Err: fmt.Errorf("record at log offset %d: %w", off, err)}
}

// damaged returns the error for the record at off that fails to decode
// with err: a corruption error that names the span that cannot be read,
// up to the next valid record (or the end of the data when none follows).
func (s *segment) damaged(off int64, err error) *segfile.CorruptionError {
	rest := s.data[off-s.base:]
	junk := nonZeroExtent(rest)
	var lost string
	if next := findRecord(rest[:junk], 1); next >= 0 {
		lost = fmt.Sprintf("offsets %d..%d (%d bytes) cannot be read and valid records follow at offset %d", off, off+next, next, off+next)
	} else {
		lost = fmt.Sprintf("offsets %d..%d (%d bytes, to the end of the data) cannot be read", off, off+junk, junk)
	}
	return &segfile.CorruptionError{Path: s.path, Offset: headerSize + off - s.base,
		Err: fmt.Errorf("%w: %s (at offset %d: %v)", ErrDamaged, lost, off, err)}
}

func (s *segment) acquire() { s.refs.Add(1) }

// release drops a reference; the last one unmaps, closes and, if the
// segment was retired, deletes the file.
func (s *segment) release() error {
	if s.refs.Add(-1) != 0 {
		return nil
	}
	err := s.m.Unmap()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if s.removed.Load() {
		if rerr := os.Remove(s.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// openSegment maps an existing segment file and checks its header against
// its name. It holds one reference on return.
func openSegment(path string, readOnly bool) (*segment, error) {
	flag, prot := os.O_RDWR, mmap.RDWR
	if readOnly {
		flag, prot = os.O_RDONLY, mmap.RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var hdr [headerSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, err
	}
	base, capacity, err := decodeHeader(hdr[:])
	if err == nil {
		if nameBase, _ := parseSegmentName(filepath.Base(path)); nameBase != base {
			err = fmt.Errorf("%w: header base %d does not match file name", errBadHeader, base)
		} else if fi.Size() != headerSize+capacity {
			err = fmt.Errorf("%w: file is %d bytes, header says %d", errBadHeader, fi.Size(), headerSize+capacity)
		}
	}
	if err != nil {
		f.Close()
		return nil, &segfile.CorruptionError{Path: path, Offset: 0, Err: err}
	}
	m, err := mmap.Map(f, prot, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: map %s: %w", path, err)
	}
	s := &segment{path: path, base: base, capacity: capacity, f: f, m: m, data: m[headerSize:]}
	s.refs.Store(1)
	return s, nil
}

// createSegment creates the segment file for base, durably
// (segfile.CreateAtomic: a .tmp file, fsynced, renamed into place, the
// directory fsynced). The file has its full size at once, so that its
// mapping never changes, but only its first `first` bytes of data have
// blocks: the rest is allocated a step at a time ahead of the writes
// (Log.ensureAlloc), so that a new segment costs a step of disk, not a
// segment, and a full disk is found by an allocation that fails cleanly,
// never by a write through the mapping (SIGBUS).
//
// With zeroFill the allocated space is written with zeros, so that later
// fsyncs overwrite blocks in place instead of converting unwritten
// extents: that raised the rate of 4 KiB fsyncs from 3,253/s to 5,759/s
// (medians of BenchmarkRawFsync, 3 runs) on this project's ext4.
// Otherwise the space is reserved with fallocate, which costs no data
// writes: the better trade when fsyncs are rare or large (see zeroFill).
func createSegment(dir string, base, size, first int64, zeroFill bool) (string, error) {
	path := filepath.Join(dir, segmentName(base))
	if _, err := os.Lstat(path); err == nil {
		return "", fmt.Errorf("commitlog: segment %s already exists", path)
	}
	f, err := segfile.CreateAtomic(path, func(f *os.File) error {
		if err := f.Truncate(size); err != nil {
			return err
		}
		if err := allocRange(f, 0, min(size, headerSize+first), zeroFill); err != nil {
			return err
		}
		var hdr [headerSize]byte
		encodeHeader(hdr[:], base, size-headerSize)
		_, err := f.WriteAt(hdr[:], 0)
		return err
	}, fdatasync)
	if err != nil {
		return "", err
	}
	return path, f.Close()
}

// zeros is what allocRange writes: never written to, so shared by every
// call (a buffer per call was most of what opening ten thousand queue
// topics at once allocated: 213 of 298 MB).
var zeros [1 << 20]byte

// allocRange allocates blocks for the file positions [from, to) of f:
// with zeros when zeroFill is set or fallocate is not supported, else
// with fallocate. Only call it on a range that holds no data.
func allocRange(f *os.File, from, to int64, zeroFill bool) error {
	if from >= to {
		return nil
	}
	if !zeroFill {
		err := fallocate(f, from, to-from)
		if !errors.Is(err, errNoFallocate) {
			return err
		}
	}
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// SegmentName returns the file name of the segment whose data starts at
// offset base (a 20-digit offset and ".log").
func SegmentName(base int64) string { return segmentName(base) }

// SegmentHeaderSize is the size of a segment file's header: the record at
// offset o of a segment with base b is at file position
// SegmentHeaderSize + o - b.
const SegmentHeaderSize = headerSize

package schedulelog

import (
	"fmt"
	"runtime"

	"github.com/edsrzf/mmap-go"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// mapReserve is the smallest mapping a MappedReader makes. Mapping beyond
// the end of the file costs address space only; pages past the end are
// never touched, because every read is checked against the file's size.
const mapReserve = 64 << 20

// MappedReader reads entries through a read-only shared mapping of the
// segment, without a system call per entry: it is how due entries are read
// when they fire. The file may grow while it is mapped (reput appends);
// the mapping is renewed, doubling, only when an entry lies past it.
// One goroutine at a time may use it.
type MappedReader struct {
	*Reader
	m    mmap.MMap
	size int64 // file size last seen; bytes below it are readable
	warm int64 // the mapping's pages below this were mapped in by Warm
}

// OpenMapped opens the segment at path read-only and maps it.
func OpenMapped(path string) (*MappedReader, error) {
	r, err := OpenReader(path)
	if err != nil {
		return nil, err
	}
	mr := &MappedReader{Reader: r}
	if err := mr.remap(0); err != nil {
		r.Close()
		return nil, err
	}
	return mr, nil
}

// remap refreshes the file size and, if need exceeds the mapping, maps the
// file again with room to grow.
func (mr *MappedReader) remap(need int64) error {
	fi, err := mr.f.Stat()
	if err != nil {
		return err
	}
	mr.size = fi.Size()
	if need <= int64(len(mr.m)) && mr.m != nil {
		return nil
	}
	n := max(int64(mapReserve), 2*mr.size, need)
	if mr.m != nil {
		if err := mr.m.Unmap(); err != nil {
			return err
		}
		mr.m = nil
	}
	m, err := mmap.MapRegion(mr.f, int(n), mmap.RDONLY, 0, 0)
	if err != nil {
		return fmt.Errorf("schedulelog: map %s: %w", mr.path, err)
	}
	mr.m, mr.warm = m, 0
	return nil
}

// Warm maps into the process the pages of the file that earlier calls did
// not, at most n bytes of them (whole pages, at least one), before entries
// on them are read, and reports whether pages are left. Entries fire in time order,
// which is not the order they were appended in: in a hot second the first
// reads of a segment written moments before each took a page fault, about
// 20 µs on a virtual machine, on the one goroutine that hands messages
// over. The pages are the file's, shared with the page cache; they stay
// mapped until the mapping is renewed or closed, as the pages entries are
// read from do.
func (mr *MappedReader) Warm(n int64) (bool, error) {
	if err := mr.remap(0); err != nil {
		return false, err
	}
	if mr.size > int64(len(mr.m)) {
		if err := mr.remap(mr.size); err != nil {
			return false, err
		}
	}
	if mr.warm >= mr.avail() {
		return false, nil // bytes appended to a warmed page show through it
	}
	from := mr.warm / pageSize * pageSize
	to := min(mr.avail(), from+max(n/pageSize, 1)*pageSize)
	populate(mr.m[from:to])
	mr.warm = to
	return to < mr.avail(), nil
}

// pageSize is the unit Warm maps pages in.
const pageSize = 4096

// Entry decodes the entry at off (an offset Append, an Iterator or OnEntry
// reported) into m and returns its seq. The slices in m alias the mapping
// and stay valid until the next call or Close. Errors are as for ReadAt.
func (mr *MappedReader) Entry(off int64, m *message.Message) (uint64, error) {
	if off < FirstOffset || off%Align != 0 {
		return 0, fmt.Errorf("%w: %d in %s", ErrBadOffset, off, mr.path)
	}
	if off+record.HeaderSize > mr.avail() {
		if err := mr.remap(off + record.HeaderSize); err != nil {
			return 0, err
		}
		if off+record.HeaderSize > mr.avail() {
			return 0, fmt.Errorf("%w: %d is at or past the end of %s", ErrBadOffset, off, mr.path)
		}
	}
	if size := int64(record.PeekSize(mr.m[off:mr.avail()])); size > 0 && off+size > mr.avail() {
		if err := mr.remap(off + size); err != nil {
			return 0, err
		}
	}
	return entryAt(mr.path, &mr.hdr, mr.m[off:mr.avail()], off, m)
}

// avail is the end of what may be read: within both the file and the
// mapping.
func (mr *MappedReader) avail() int64 { return min(mr.size, int64(len(mr.m))) }

// Close unmaps the segment and closes its descriptor.
func (mr *MappedReader) Close() error {
	var err error
	if mr.m != nil {
		err = mr.m.Unmap()
		mr.m = nil
	}
	if cerr := mr.Reader.Close(); err == nil {
		err = cerr
	}
	return err
}

// touch reads one byte of every page of b.
func touch(b []byte) {
	var x byte
	for i := 0; i < len(b); i += pageSize {
		x += b[i]
	}
	runtime.KeepAlive(x)
}

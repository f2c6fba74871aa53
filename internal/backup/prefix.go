package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// The headers before the first record, by kind of file (docs/FORMAT.md).
const (
	commitlogHeader = 32 // commitlog segments, the queue's logs
	retiredHeader   = 24 // schedule/reput.retired
	segfileHeader   = 104
)

// recordsEnd returns the end of the whole records of f that start at
// from: the first position that does not hold one (zeros, a record still
// being written, or the end of the file). It reads f front to back, so a
// record written behind its read position is never counted: the prefix it
// returns is one the file held, whole, at some moment. A commitlog skip
// record counts with its span.
func recordsEnd(f *os.File, from int64, skips bool) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, from, st.Size()-from), 1<<20)
	end := from
	head := make([]byte, record.HeaderSize)
	var buf []byte
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			return end, nil // the end of the file, or of what is there
		}
		size := record.PeekSize(head)
		if size == 0 {
			return end, nil
		}
		if cap(buf) < size {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		copy(buf, head)
		if _, err := io.ReadFull(r, buf[record.HeaderSize:]); err != nil {
			return end, nil
		}
		rec, n, err := record.Decode(buf)
		if err != nil {
			return end, nil
		}
		span := int64(n)
		if skips && rec.Type == commitlog.TypeSkip && len(rec.Payload) >= 8 {
			span = int64(binary.LittleEndian.Uint64(rec.Payload))
			if span < int64(n) {
				return end, nil
			}
			if _, err := r.Discard(int(span) - n); err != nil {
				return end, nil
			}
		}
		end += span
	}
}

// syncedEnd returns the synced length a schedule segment's or dispatch
// log's header states (its newer valid hint slot) and the header as
// read: every byte below it is durable and never written again, and the
// header beside it names no more than that.
func syncedEnd(f *os.File) (int64, []byte, error) {
	hdr := make([]byte, segfileHeader)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return 0, nil, fmt.Errorf("reading its header: %w", err)
	}
	s, _, ok := segfile.BestSlot(hdr)
	if !ok {
		return 0, nil, errors.New("no valid synced-length slot in its header")
	}
	return s.Len, hdr, nil
}

// copyPrefix writes to dst the first n bytes of src, then extends dst
// with zeros (a sparse hole) to size if size > n. When head is given it
// replaces the first len(head) bytes (a header read once, at the moment
// n was decided).
func copyPrefix(dst string, src *os.File, n, size int64, head []byte) (int64, error) {
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	from := int64(0)
	if head != nil {
		if _, err := out.Write(head); err != nil {
			return 0, err
		}
		from = int64(len(head))
	}
	if n > from {
		if _, err := io.Copy(out, io.NewSectionReader(src, from, n-from)); err != nil {
			return 0, err
		}
	}
	if size > n {
		if err := out.Truncate(size); err != nil {
			return 0, err
		}
	}
	if err := out.Sync(); err != nil {
		return 0, err
	}
	return n, out.Close()
}

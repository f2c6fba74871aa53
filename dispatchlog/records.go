package dispatchlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/hourglassmq/hourglass/segfile"
)

// Records reads the whole dispatch log at path and returns its done-records
// in file order (completion order; markers left out), so that a tool can
// say why each entry is done. It applies Load's rules: a missing file has no records; damage
// before the synced-length hint, or a whole record with impossible content
// anywhere, is a *segfile.CorruptionError and no records are returned; after the
// hint it stops quietly at the first incomplete or undecodable record.
// Records only reads, so it is safe beside a running writer.
func Records(path string) ([]Done, error) {
	recs, _, err := RecordsFrom(path, 0, nil)
	return recs, err
}

// RecordsFrom is Records for the records from offset from on (0: the
// first), appended to dst; it also returns the offset after the last
// whole record it read, from which a later call goes on as the log grows.
// from must be 0 or an offset a RecordsFrom of the same file returned.
func RecordsFrom(path string, from int64, dst []Done) ([]Done, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return dst, from, nil
	}
	if err != nil {
		return dst, from, err
	}
	defer f.Close()
	_, hdr, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		return dst, from, err
	}
	fi, err := f.Stat()
	if err != nil {
		return dst, from, err
	}
	hint, hintRecs := int64(segfile.HeaderSize), uint64(0)
	if s, _, ok := segfile.BestSlot(hdr); ok {
		hint, hintRecs = s.Len, s.Records
	}
	if from < segfile.HeaderSize {
		from = segfile.HeaderSize
	}
	out := dst
	if out == nil {
		out = make([]Done, 0, min(hintRecs, uint64(max(0, fi.Size()-from)/RecordSize)))
	}
	sc := segfile.NewScanner(f, from, fi.Size(), 0)
	end := from
	for {
		off, rec, _, err := sc.Next()
		if err == io.EOF {
			return out, end, nil
		}
		if err != nil {
			if !segfile.IsDecodeError(err) {
				return dst, from, fmt.Errorf("dispatchlog: read %s: %w", path, err)
			}
			if off >= hint {
				return out, end, nil
			}
			return dst, from, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		d, err := decodeDone(rec)
		if err != nil {
			return dst, from, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		end = sc.Offset()
		if !d.Reason.Marker() {
			out = append(out, d)
		}
	}
}

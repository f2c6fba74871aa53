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
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, hdr, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	hint, hintRecs := int64(segfile.HeaderSize), uint64(0)
	if s, _, ok := segfile.BestSlot(hdr); ok {
		hint, hintRecs = s.Len, s.Records
	}
	out := make([]Done, 0, min(hintRecs, uint64(fi.Size()/RecordSize)))
	sc := segfile.NewScanner(f, segfile.HeaderSize, fi.Size(), 0)
	for {
		off, rec, _, err := sc.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			if !segfile.IsDecodeError(err) {
				return nil, fmt.Errorf("dispatchlog: read %s: %w", path, err)
			}
			if off >= hint {
				return out, nil
			}
			return nil, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		d, err := decodeDone(rec)
		if err != nil {
			return nil, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		if !d.Reason.Marker() {
			out = append(out, d)
		}
	}
}

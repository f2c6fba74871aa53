package dispatchlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// Salvage is what LoadSalvage read from a dispatch log.
type Salvage struct {
	// Set holds the seqs of every whole, valid done-record, wherever it
	// lies; Counts counts them per reason.
	Set    *Set
	Counts Counts
	// Missing is set when there is no dispatch log at the path.
	Missing bool
	// Lost is set when the log's last marker is Lost: it was created in
	// place of a lost log (Options.CreateLost), so Set may lack done
	// entries as if the log were damaged.
	Lost bool
	// Damage lists the regions where no valid done-record starts and
	// data was durable: a bad record before the synced-length hint, or a
	// bad record with valid records after it, or bytes below the hint cut
	// off the end of the file. The entries the records in them marked
	// done are unknown: Set may lack done entries. Nil for a sound log.
	Damage []segfile.Problem
	// Torn is set when the log ends in an incomplete record after its
	// synced-length hint (what a crash during a write leaves; the writer's
	// Open truncates it). No durable record is lost with it.
	Torn bool
}

// Damaged reports whether some done-records are unknown.
func (s *Salvage) Damaged() bool { return len(s.Damage) > 0 }

// Unknown returns at most how many done-records the damage hid: its bytes
// divided by the size of a done-record, rounded up.
func (s *Salvage) Unknown() int {
	n := 0
	for _, p := range s.Damage {
		n += int((p.Bytes + RecordSize - 1) / RecordSize)
	}
	return n
}

// LoadSalvage reads the dispatch log at path as Load does, but past
// damage: every whole, valid done-record counts, wherever it lies, and the
// regions where none could be read are listed in Damage (a search for the
// next whole record tries every offset after a bad one). It is how a
// bucket whose dispatch log is damaged keeps the done entries it can
// prove, and learns that others may be hidden. The error is for I/O
// failures and a damaged header (a *segfile.CorruptionError: then nothing
// in the file can be trusted).
func LoadSalvage(path string) (Salvage, error) {
	s, _, err := salvage(path, false)
	return s, err
}

// RecordsSalvage is LoadSalvage that also returns the valid done-records
// in file order (markers left out), for a repair that writes them to a new
// log.
func RecordsSalvage(path string) (Salvage, []Done, error) { return salvage(path, true) }

func salvage(path string, keep bool) (Salvage, []Done, error) {
	var s Salvage
	var recs []Done
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Salvage{Set: &Set{}, Missing: true}, nil, nil
	}
	if err != nil {
		return s, nil, err
	}
	defer f.Close()
	_, hdr, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		return s, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return s, nil, err
	}
	size := fi.Size()
	hint, hintRecs := int64(segfile.HeaderSize), uint64(0)
	if sl, _, ok := segfile.BestSlot(hdr); ok {
		hint, hintRecs = sl.Len, sl.Records
	}
	seqs := make([]uint64, 0, min(hintRecs, uint64(size/RecordSize))+64)
	sc := segfile.NewScanner(f, segfile.HeaderSize, size, 0)
	for off := int64(segfile.HeaderSize); off < size; {
		rec, n, err := sc.DecodeAt(off)
		var d Done
		if err == nil {
			if d, err = decodeDone(rec); err == nil {
				s.Counts.add(d.Reason)
				if !d.Reason.Marker() {
					seqs = append(seqs, pack(d.Seq, d.Reason))
					if keep {
						recs = append(recs, d)
					}
				}
				off += int64(n)
				continue
			}
		} else if !segfile.IsDecodeError(err) {
			return s, nil, fmt.Errorf("dispatchlog: read %s: %w", path, err)
		}
		next, ok, herr := huntDone(sc, off+1)
		if herr != nil {
			return s, nil, fmt.Errorf("dispatchlog: read %s: %w", path, herr)
		}
		if !ok && off >= hint {
			s.Torn = true
			break
		}
		s.Damage = append(s.Damage, segfile.Problem{Path: path, Offset: off, Kind: segfile.Corrupt, Bytes: next - off,
			Err: &segfile.CorruptionError{Path: path, Offset: off, Err: err}})
		off = next
	}
	if hint > size {
		s.Damage = append(s.Damage, segfile.Problem{Path: path, Offset: size, Kind: segfile.Corrupt, Bytes: hint - size,
			Err: &segfile.CorruptionError{Path: path, Offset: size,
				Err: fmt.Errorf("%w (hint %d, file size %d)", segfile.ErrHintBeyondEOF, hint, size)}})
	}
	s.Set = setOf(seqs)
	s.Lost = s.Counts.Lost
	return s, recs, nil
}

// huntDone returns the first offset from from on where a whole, valid
// done-record starts, or the end of the scanned region and false.
func huntDone(sc *segfile.Scanner, from int64) (int64, bool, error) {
	for from+record.Overhead <= sc.End() {
		off, ok, err := sc.Hunt(from, 1, TypeDone)
		if err != nil || !ok {
			return sc.End(), false, err
		}
		if rec, _, err := sc.DecodeAt(off); err == nil {
			if _, err := decodeDone(rec); err == nil {
				return off, true, nil
			}
		}
		from = off + 1
	}
	return sc.End(), false, nil
}

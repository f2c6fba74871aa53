package schedulelog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// HeaderRepairOptions configure RepairHeaders.
type HeaderRepairOptions struct {
	// DryRun says what would change and changes nothing.
	DryRun bool
	// Keep is called with the path of every segment before its header is
	// rewritten, and must keep a copy of it (the repair command's
	// quarantine). Required unless DryRun.
	Keep func(path string) error
	// Out receives one line per finding and per change. Default: none.
	Out io.Writer
	// Fallback is tried as the duration of a damaged segment when no
	// duration of the directory's other segments fits it (the engine's
	// default segment duration). 0: none.
	Fallback int64
}

// RepairHeaders is the `hourglass repair` step for the schedule segments
// of dir, run with the server stopped. A segment whose fixed header does
// not decode (a damaged byte, a wrong magic) cannot be read, appended to
// or loaded: reput stops routing when it must append to it, and the engine
// skips its bucket. Its records follow the header and carry their own
// checksums, so the header is rebuilt: the start from the file name, the
// duration from the durations the directory's other segments have (most
// common first, then Fallback), the first that holds every entry the file
// carries (deliverAt in [start, start + duration)), of which the start is
// a multiple, and that does not reach the next segment's start. Only the
// fixed header (40 bytes) is rewritten, in place, after Keep: the
// synced-length slots are left as they are (a damaged one is ignored by
// the readers, which then scan the records). A segment that no duration
// fits is left untouched, and RepairHeaders fails saying why. It returns
// the headers it rewrote (or would, in a dry run).
func RepairHeaders(dir string, o HeaderRepairOptions) (int, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if !o.DryRun && o.Keep == nil {
		return 0, errors.New("schedulelog: RepairHeaders needs HeaderRepairOptions.Keep")
	}
	names, err := ListNames(dir) // sorted by start
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	type seg struct {
		start  int64
		path   string
		damage error
	}
	segs := make([]seg, 0, len(names))
	count := map[int64]int{} // durations of the segments whose header decodes
	for _, n := range names {
		path := filepath.Join(dir, n.Name)
		// Stat also refuses a header whose start is not the name's.
		si, err := Stat(dir, n.Start)
		var ce *segfile.CorruptionError
		switch {
		case errors.As(err, &ce):
			segs = append(segs, seg{n.Start, path, ce.Err})
		case err != nil:
			return 0, err
		default:
			count[si.Duration.Milliseconds()]++
			segs = append(segs, seg{start: n.Start, path: path})
		}
	}
	durations := make([]int64, 0, len(count)+1)
	for d := range count {
		durations = append(durations, d)
	}
	sort.Slice(durations, func(i, j int) bool {
		a, b := durations[i], durations[j]
		return count[a] > count[b] || (count[a] == count[b] && a > b)
	})
	if o.Fallback > 0 && count[o.Fallback] == 0 {
		durations = append(durations, o.Fallback)
	}
	changes := 0
	var failed []error
	for i, s := range segs {
		if s.damage == nil {
			continue
		}
		next := int64(0)
		if i+1 < len(segs) {
			next = segs[i+1].start
		}
		name := filepath.Base(s.path)
		fmt.Fprintf(out, "  %s: its header cannot be read (%v)\n", name, s.damage)
		n, lo, hi, err := scanDeliverAt(s.path)
		if err != nil {
			return changes, err
		}
		d, why := fitDuration(s.start, next, n, lo, hi, durations)
		if d == 0 {
			err := fmt.Errorf("schedulelog: %s: no duration fits its %d entries (%s); it is left as it is: restore it from a backup", s.path, n, why)
			fmt.Fprintf(out, "  %s: left as it is: %v\n", name, err)
			failed = append(failed, err)
			continue
		}
		fmt.Fprintf(out, "  %s: %d entries, due from %s to %s: header rebuilt with start %s and duration %ds\n",
			name, n, fmtMs(lo), fmtMs(hi), fmtMs(s.start), d/1000)
		changes++
		if o.DryRun {
			continue
		}
		if err := o.Keep(s.path); err != nil {
			return changes - 1, err
		}
		if err := writeFixedHeader(s.path, segfile.Header{Magic: Magic, Start: s.start, Duration: d}); err != nil {
			return changes - 1, fmt.Errorf("schedulelog: rewriting the header of %s: %w", s.path, err)
		}
	}
	return changes, errors.Join(failed...)
}

// scanDeliverAt reads the entries after the header of the segment at path
// up to the first record that does not decode (the readers stop or
// resync there too) and returns how many there are and their earliest
// and latest deliverAt.
func scanDeliverAt(path string) (n int, lo, hi int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	if fi.Size() <= segfile.HeaderSize {
		return 0, 0, 0, nil
	}
	sc := segfile.NewScanner(f, segfile.HeaderSize, fi.Size(), 0)
	var m message.Message
	for {
		_, rec, _, err := sc.Next()
		if err != nil {
			if segfile.IsDecodeError(err) || errors.Is(err, io.EOF) {
				return n, lo, hi, nil
			}
			return n, lo, hi, err
		}
		_, p, err := decodeEntry(rec)
		if err != nil || message.DecodeSchedule(p, &m) != nil {
			return n, lo, hi, nil
		}
		if n == 0 || m.DeliverAt < lo {
			lo = m.DeliverAt
		}
		if n == 0 || m.DeliverAt > hi {
			hi = m.DeliverAt
		}
		n++
	}
}

// fitDuration returns the first of durations that a segment starting at
// start (followed by one at next, 0 if none) with n entries due from lo
// to hi can have, or 0 and why none can.
func fitDuration(start, next int64, n int, lo, hi int64, durations []int64) (int64, string) {
	if n > 0 && lo < start {
		return 0, fmt.Sprintf("an entry is due at %s, before the start %s its name gives", fmtMs(lo), fmtMs(start))
	}
	for _, d := range durations {
		if !segfile.ValidDuration(d) || start%d != 0 || (n > 0 && hi >= start+d) || (next > 0 && start+d > next) {
			continue
		}
		return d, ""
	}
	return 0, fmt.Sprintf("tried the durations %v ms: each leaves an entry out, does not divide the start, or reaches the next segment", durations)
}

// writeFixedHeader writes the fixed part of the header h over the first
// bytes of the file at path (the whole header, with slot A saying nothing
// but the header is durable, if the file is shorter than one) and syncs
// it.
func writeFixedHeader(path string, h segfile.Header) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	b := segfile.EncodeHeader(h)
	if fi, err := f.Stat(); err != nil {
		f.Close()
		return err
	} else if fi.Size() >= segfile.HeaderSize {
		// The slots stay: only the fixed part was damaged.
		b = b[:segfile.FixedSize]
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

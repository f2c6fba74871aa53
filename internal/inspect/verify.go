package inspect

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/repair"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// Kind classifies a problem Verify found.
type Kind string

// Problem kinds.
const (
	// TornTail: an incomplete or undecodable record at the end of a file
	// being appended to, the trace of a crash during a write (or of a
	// write in progress, on a live directory). The owner truncates it when
	// it opens the file.
	TornTail Kind = "torn-tail"
	// Corruption: a checksum or a field that does not hold where the data
	// must be whole. Never repaired automatically; the operator decides.
	Corruption Kind = "corruption"
	// Missing: a file that must exist does not.
	Missing Kind = "missing"
	// Unexpected: a file that does not belong where it is.
	Unexpected Kind = "unexpected"
	// RepairReport: a run of `hourglass repair` that was interrupted, or
	// whose changes lost data, and that the operator has not acknowledged
	// yet (`hourglass repair --acknowledge`).
	RepairReport Kind = "repair-report"
)

// Problem is one finding: Verify exits non-zero for any.
type Problem struct {
	File   string // relative to the data directory
	Offset int64  // byte offset in File, -1 when not applicable
	Kind   Kind
	Detail string
}

func (p Problem) String() string {
	if p.Offset < 0 {
		return fmt.Sprintf("%s: %s: %s", p.File, p.Kind, p.Detail)
	}
	return fmt.Sprintf("%s: %s at offset %d: %s", p.File, p.Kind, p.Offset, p.Detail)
}

// Note is a finding that is not damage: a harmless leftover, or a file a
// running server removed while it was being checked.
type Note struct {
	File   string
	Detail string
}

// Report is what Verify found.
type Report struct {
	Problems []Problem
	Notes    []Note
	Files    int   // files checked
	Bytes    int64 // their total size
}

// Clean reports whether no problem was found.
func (r *Report) Clean() bool { return len(r.Problems) == 0 }

type verifier struct {
	o   *Options
	r   Report
	p   Progress
	end int64 // commitlog end, -1 unknown
	// gone are the commitlog spans that cannot be read: covered by skip
	// records (repair gave them up) or damaged.
	gone []commitlog.Span
}

func (v *verifier) problem(path string, off int64, k Kind, detail string) {
	v.r.Problems = append(v.r.Problems, Problem{File: v.o.rel(path), Offset: off, Kind: k, Detail: detail})
}

func (v *verifier) note(path, detail string) {
	v.r.Notes = append(v.r.Notes, Note{File: v.o.rel(path), Detail: detail})
}

// Verify checks every checksum of every file in the data directory: the
// commitlog, the schedule segments and their dispatch logs, reput's
// checkpoint, and the built-in queue's logs; and that no file is missing
// or out of place. Damage is reported in the Report; the error is for a
// directory that could not be read at all.
func Verify(o Options) (Report, error) {
	if err := o.check(); err != nil {
		return Report{}, err
	}
	v := &verifier{o: &o, p: o.progress(), end: -1}
	total, err := dirSize(o.Dir)
	if err != nil {
		return v.r, fmt.Errorf("%w", err)
	}
	v.p.Begin("verify", total)
	defer v.p.End()
	if err := v.top(); err != nil {
		return v.r, err
	}
	if err := v.repairJournal(); err != nil { // verify_repair.go
		return v.r, err
	}
	if err := v.commitlog(filepath.Join(o.Dir, CommitlogDir), true); err != nil {
		return v.r, err
	}
	v.commitlogReachesCheckpoint()
	if err := v.schedule(); err != nil {
		return v.r, err
	}
	if err := v.engineFindings(); err != nil { // verify_engine.go
		return v.r, err
	}
	if err := v.queue(); err != nil {
		return v.r, err
	}
	return v.r, nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi, ierr := d.Info(); ierr == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// top checks the data directory's own entries.
func (v *verifier) top() error {
	ents, err := os.ReadDir(v.o.Dir)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	have := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		have[name] = true
		switch name {
		case CommitlogDir, ScheduleDir, QueueDir:
			if !e.IsDir() {
				v.problem(filepath.Join(v.o.Dir, name), -1, Unexpected, "should be a directory")
			}
		case LockFile, repair.JournalName, repair.QuarantineDir:
		default:
			v.note(filepath.Join(v.o.Dir, name), "not written by Hourglass; ignored")
		}
	}
	if !have[CommitlogDir] && !have[ScheduleDir] {
		return fmt.Errorf("%s holds no %s/ and no %s/: not an Hourglass data directory", v.o.Dir, CommitlogDir, ScheduleDir)
	}
	if !have[CommitlogDir] {
		v.problem(filepath.Join(v.o.Dir, CommitlogDir), -1, Missing, "the commitlog directory is missing")
	}
	return nil
}

// commitlog verifies one commitlog-format directory (the commitlog, or a
// queue topic's log or acks).
func (v *verifier) commitlog(dir string, main bool) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // reported by the caller when it matters
	}
	var last int64
	probs, st, err := commitlog.Verify(dir, func(done, total int64) {
		v.p.Add(done - last)
		last = done
	})
	if err != nil {
		return fmt.Errorf("%s: %w", v.o.rel(dir), err)
	}
	if main {
		v.end = st.End
		v.gone = append(v.gone, st.Skipped...)
		for _, p := range probs {
			if p.Kind == commitlog.Corruption && p.Offset >= 0 {
				v.gone = append(v.gone, commitlog.Span{From: p.Offset, To: p.Offset + max(p.Len, 1)})
			}
		}
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if clName.MatchString(e.Name()) {
				v.r.Files++
				if fi, err := e.Info(); err == nil {
					v.r.Bytes += fi.Size()
				}
			}
		}
	}
	if st.Segments == 0 {
		v.problem(dir, -1, Missing, "no segment files: the log's data is gone")
	}
	for _, p := range probs {
		if errors.Is(p.Err, fs.ErrNotExist) {
			v.note(p.File, "deleted while being checked (retention of a running server)")
			continue
		}
		var k Kind
		switch p.Kind {
		case commitlog.TornTail:
			k = TornTail
		case commitlog.MissingSegment:
			k = Missing
		case commitlog.UnexpectedFile:
			k = Unexpected
		default:
			k = Corruption
		}
		detail := v.o.relErr(p.Err)
		if p.Offset >= 0 {
			detail += fmt.Sprintf(" (log offset %d)", p.Offset)
		}
		v.problem(p.File, p.Pos, k, detail)
	}
	return nil
}

func segProblem(v *verifier, p segfile.Problem) {
	k := Corruption
	detail := v.o.relErr(p.Err)
	if p.Kind == segfile.TornTail {
		k = TornTail
		detail = fmt.Sprintf("%d bytes after the last whole record (%d whole records in them): %s", p.Bytes, p.Records, detail)
	} else if p.Bytes > 0 {
		detail = fmt.Sprintf("%d bytes: %s", p.Bytes, detail)
	}
	v.problem(p.Path, p.Offset, k, detail)
}

func (v *verifier) schedule() error {
	dir := v.o.schedDir()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing scheduled yet
	}
	l, err := listSchedule(dir)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	for _, name := range l.segs {
		path := filepath.Join(dir, name)
		start, _ := schedulelog.ParseName(name)
		probs, err := schedulelog.Verify(path)
		if errors.Is(err, fs.ErrNotExist) {
			v.note(path, "deleted while being checked (retired by a running server)")
			delete(l.dones, start)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.o.rel(path), err)
		}
		v.counted(path)
		for _, p := range probs {
			segProblem(v, p)
		}
		dname, ok := l.dones[start]
		if !ok {
			continue // no entry done yet: the dispatch log is created on the first
		}
		delete(l.dones, start)
		if err := v.dispatch(filepath.Join(dir, dname), path); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Values(l.dones)) {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			v.counted(path)
			v.note(path, "dispatch log without its schedule segment: left by an interrupted delete; harmless, removed when the bucket is created again")
		}
	}
	for _, name := range l.temps {
		v.note(filepath.Join(dir, name), "temporary file left by a crash during a create; removed at the next start")
	}
	for _, name := range l.others {
		v.problem(filepath.Join(dir, name), -1, Unexpected, "not a schedule segment, dispatch log, checkpoint, catalog or pending counts file")
	}
	if l.pending {
		path := filepath.Join(dir, engine.PendingFileName)
		v.counted(path)
		if err := engine.CheckPendingFile(path); err != nil {
			v.note(path, fmt.Sprintf("the pending counts a clean stop left do not decode (%v): the next start counts again from the segments", err))
		}
	}
	if l.catalog {
		path := filepath.Join(dir, catalog.FileName)
		v.counted(path)
		found, err := catalog.Verify(path)
		switch {
		case errors.Is(err, catalog.ErrInUse):
			v.note(path, "held by a running server: not checked")
		case err != nil:
			return err
		}
		for _, e := range found {
			v.problem(path, -1, Corruption, e.Error())
		}
	}
	return v.reputFiles(dir, l) // verify_reput.go
}

func (v *verifier) counted(path string) {
	v.r.Files++
	if fi, err := os.Stat(path); err == nil {
		v.r.Bytes += fi.Size()
		v.p.Add(fi.Size())
	}
}

// dispatch verifies a dispatch log and that it belongs to its segment.
func (v *verifier) dispatch(path, segPath string) error {
	probs, err := dispatchlog.Verify(path)
	if errors.Is(err, fs.ErrNotExist) {
		v.note(path, "deleted while being checked (retired by a running server)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", v.o.rel(path), err)
	}
	v.counted(path)
	for _, p := range probs {
		segProblem(v, p)
	}
	dh, derr := readHeader(path, dispatchlog.Magic)
	sh, serr := readHeader(segPath, schedulelog.Magic)
	if derr == nil && serr == nil && (dh.Start != sh.Start || dh.Duration != sh.Duration) {
		v.problem(path, 0, Corruption, fmt.Sprintf("header names bucket %d+%dms, its segment %d+%dms", dh.Start, dh.Duration, sh.Start, sh.Duration))
	}
	return nil
}

func readHeader(path string, magic [8]byte) (segfile.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return segfile.Header{}, err
	}
	defer f.Close()
	h, _, err := segfile.ReadHeader(f, path, magic)
	return h, err
}

// queue verifies the built-in queue's logs: queue/topics/<topic>/{log,acks}.
func (v *verifier) queue() error {
	topics := filepath.Join(v.o.Dir, QueueDir, "topics")
	ents, err := os.ReadDir(topics)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	for _, e := range ents {
		tdir := filepath.Join(topics, e.Name())
		if !e.IsDir() {
			v.problem(tdir, -1, Unexpected, "not a topic directory")
			continue
		}
		for _, sub := range []string{"log", "acks"} {
			d := filepath.Join(tdir, sub)
			if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
				v.problem(d, -1, Missing, "a topic needs its log and acks directories")
				continue
			}
			if err := v.commitlog(d, false); err != nil {
				return err
			}
		}
		if err := v.queueTopic(tdir); err != nil {
			return err
		}
	}
	return nil
}

// Package backup takes a consistent copy of a running node's data
// directory (docs/FORMAT.md lists its files; docs/OPERATIONS.md says how
// to use it).
//
// The copy is one a crash could have left: a server started on it
// recovers as after kill -9, delivers every message the original had
// answered before Take began and none the original had recorded as acked
// by then (Options.WaitDelivered). No writer is paused. Each log's copy is a prefix of it that
// was whole at some moment (a commitlog-format file up to its last whole
// record, a schedule segment or dispatch log up to the synced length its
// header states), and the files are taken in an order where each one is
// taken before every file whose contents it depends on:
//
//	reput.checkpoint  (names routed positions of the commitlog, and the retired log's count)
//	reput.retired     (a retirement is recorded after the bucket's catalog entries)
//	catalog.db        (bbolt: one read transaction's copy)
//	*.done            (a done-record follows the entry, the cancel record or the delivery it records)
//	queue topics      (per topic: the ack log, then the queue log its acks name)
//	*.sched           (an entry follows its commitlog record)
//	commitlog/
//
// A record taken in a later file without what it led to in an earlier
// one is what a crash leaves too: it is routed or delivered again, and
// the queue drops a delivery it already holds. Files that retention
// deletes while the copy is made (commitlog and queue-log segments) are
// hard-linked into the copy first, so an earlier file never names one
// that is gone; a sealed segment stays a hard link (it is never written
// again), every other file is copied.
package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
)

// Options say what to copy where.
type Options struct {
	// DataDir is the running node's data directory.
	DataDir string
	// To is the directory to create for the copy; its parent must exist,
	// it must not, and it must be on the file system of DataDir (sealed
	// segments are hard-linked).
	To string
	// CopyCatalog writes a consistent copy of the node's open catalog to
	// path (catalog.(*Catalog).CopyTo).
	CopyCatalog func(path string) error
	// WaitDelivered returns once every message the engine handed to its
	// sink before the call has its done-record written
	// (engine.(*Engine).WaitDelivered). Take calls it before it copies
	// anything; nil: nothing to wait for.
	WaitDelivered func() error
}

// Report says what Take did.
type Report struct {
	Linked, Copied int   // files hard-linked, files copied
	Bytes          int64 // bytes copied
	Took           time.Duration
}

// ErrExists is returned when Options.To exists already.
var ErrExists = errors.New("backup: the target directory exists; name a new one")

// ErrCrossDevice is returned when Options.To is on another file system
// than the data directory.
var ErrCrossDevice = errors.New("backup: the target must be on the data directory's file system (sealed segments are hard-linked); copy the backup elsewhere afterwards")

const (
	schedDir     = "schedule"
	commitlogDir = "commitlog"
	queueTopics  = "queue/topics"
)

// Take copies opts.DataDir into opts.To.
func Take(opts Options) (Report, error) {
	start := time.Now()
	if _, err := os.Lstat(opts.To); err == nil {
		return Report{}, ErrExists
	}
	if err := os.Mkdir(opts.To, 0o700); err != nil {
		return Report{}, fmt.Errorf("backup: creating the target: %w", err)
	}
	b := &taker{from: opts.DataDir, to: opts.To}
	err := b.take(opts)
	if err != nil {
		os.RemoveAll(opts.To)
		return Report{}, err
	}
	b.rep.Took = time.Since(start)
	return b.rep, nil
}

type taker struct {
	from, to string
	rep      Report
}

func (b *taker) take(opts Options) error {
	// A message a consumer acked before Take began may still lack its
	// done-record (the queue had it before the engine recorded it done).
	// Without one in the copy the engine hands it to the queue again, and
	// the queue drops it only if it is among the last records of its
	// topic's log (queue.DefaultDedupWindow, which bounds what a crash
	// leaves undone), while the copy's queue logs are taken later than its
	// dispatch logs, as much later as copying takes: wait for those
	// done-records first.
	if opts.WaitDelivered != nil {
		if err := opts.WaitDelivered(); err != nil {
			return fmt.Errorf("backup: waiting for the deliveries in flight to be recorded: %w", err)
		}
	}
	// Pin what retention may delete: every commitlog and queue-log
	// segment there is now, hard-linked into the copy.
	if err := b.pin(commitlogDir); err != nil {
		return err
	}
	if err := b.pin(queueTopics); err != nil {
		return err
	}
	if err := b.static(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(b.to, schedDir), 0o700); err != nil {
		return err
	}
	// reput.checkpoint is replaced whole (tmp, rename): read it once.
	if err := b.copyWhole(filepath.Join(schedDir, "reput.checkpoint")); err != nil {
		return err
	}
	if err := b.prefixOf(filepath.Join(schedDir, "reput.retired"), retiredHeader, false, false); err != nil {
		return err
	}
	if err := opts.CopyCatalog(filepath.Join(b.to, schedDir, catalog.FileName)); err != nil {
		return fmt.Errorf("backup: copying the catalog: %w", err)
	}
	b.rep.Copied++
	if err := b.segfiles(".done", nil); err != nil {
		return err
	}
	topics, err := b.topics()
	if err != nil {
		return err
	}
	for _, t := range topics {
		for _, log := range []string{"acks", "log"} {
			if err := b.commitlogDir(filepath.Join(queueTopics, t, log)); err != nil {
				return err
			}
		}
	}
	// A schedule segment is taken only beside its dispatch log: one made
	// since the .done files were taken is routed again from the
	// commitlog, which is taken after it.
	if err := b.segfiles(".sched", func(base string) bool {
		_, err := os.Stat(filepath.Join(b.to, schedDir, base+".done"))
		return err == nil
	}); err != nil {
		return err
	}
	if err := b.commitlogDir(commitlogDir); err != nil {
		return err
	}
	return syncTree(b.to)
}

// pin hard-links every file under rel into the copy.
func (b *taker) pin(rel string) error {
	return filepath.WalkDir(filepath.Join(b.from, rel), func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".tmp") {
			return err
		}
		r, _ := filepath.Rel(b.from, path)
		return b.link(r)
	})
}

func (b *taker) link(rel string) error {
	dst := filepath.Join(b.to, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	err := os.Link(filepath.Join(b.from, rel), dst)
	var le *os.LinkError
	if errors.As(err, &le) && isCrossDevice(le.Err) {
		return ErrCrossDevice
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted since it was listed
	}
	return err
}

// static hard-links the files nothing writes while the node runs: the
// copies kept by upgrades and repairs, and repair's journal.
func (b *taker) static() error {
	for _, rel := range []string{"upgrade", "quarantine"} {
		if err := b.pin(rel); err != nil {
			return err
		}
	}
	if err := b.link("repair.journal"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (b *taker) copyWhole(rel string) error {
	data, err := os.ReadFile(filepath.Join(b.from, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.to, rel), data, 0o600); err != nil {
		return err
	}
	b.rep.Copied++
	b.rep.Bytes += int64(len(data))
	return nil
}

// prefixOf copies the whole records of the file rel after its header of
// hdr bytes; with keepSize the copy is as long as the file (a
// preallocated segment: zeros after the records).
func (b *taker) prefixOf(rel string, hdr int64, skips, keepSize bool) error {
	f, err := os.Open(filepath.Join(b.from, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	end, err := recordsEnd(f, hdr, skips)
	if err != nil {
		return fmt.Errorf("backup: %s: %w", rel, err)
	}
	size := end
	if keepSize {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		size = st.Size()
	}
	dst := filepath.Join(b.to, rel)
	os.Remove(dst) // a pinned link to the live file
	n, err := copyPrefix(dst, f, end, size, nil)
	if err != nil {
		return fmt.Errorf("backup: %s: %w", rel, err)
	}
	b.rep.Copied++
	b.rep.Bytes += n
	return nil
}

// commitlogDir takes a log of package commitlog (the commitlog, a queue
// log, an ack log): every segment before the last one holding a record
// stays a hard link (sealed), that one is copied up to its last whole
// record, and the spares after it are left out. A segment deleted since
// it was pinned stays in the copy, below the others.
func (b *taker) commitlogDir(rel string) error {
	ents, err := os.ReadDir(filepath.Join(b.from, rel))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names) // %020d: lexical order is offset order
	active := -1
	for i, n := range names {
		if hasRecord(filepath.Join(b.from, rel, n)) {
			active = i
		}
	}
	for i, n := range names {
		r := filepath.Join(rel, n)
		switch {
		case i < active:
			if _, err := os.Lstat(filepath.Join(b.to, r)); errors.Is(err, fs.ErrNotExist) {
				if err := b.link(r); err != nil {
					return err
				}
			}
			b.rep.Linked++
		case i == active:
			if err := b.prefixOf(r, commitlogHeader, true, true); err != nil {
				return err
			}
		default:
			os.Remove(filepath.Join(b.to, r))
		}
	}
	return nil
}

// hasRecord reports whether the commitlog segment at path holds a record
// (an empty spare has zeros after its header).
func hasRecord(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 8)
	if _, err := f.ReadAt(head, commitlogHeader); err != nil {
		return false
	}
	return slices.ContainsFunc(head, func(c byte) bool { return c != 0 })
}

// segfiles copies the schedule directory's files of suffix (.done or
// .sched) up to the synced length their headers state, those of the
// bases keep says yes to (nil: all).
func (b *taker) segfiles(suffix string, keep func(base string) bool) error {
	ents, err := os.ReadDir(filepath.Join(b.from, schedDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok || (keep != nil && !keep(base)) {
			continue
		}
		rel := filepath.Join(schedDir, e.Name())
		f, err := os.Open(filepath.Join(b.from, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // retired since it was listed
		}
		if err != nil {
			return err
		}
		end, hdr, err := syncedEnd(f)
		if err == nil {
			var n int64
			n, err = copyPrefix(filepath.Join(b.to, rel), f, end, end, hdr)
			b.rep.Bytes += n
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("backup: %s: %w", rel, err)
		}
		b.rep.Copied++
	}
	return nil
}

// topics lists the queue's topic directories, in the data directory and
// pinned in the copy (a topic deleted since keeps its pinned files).
func (b *taker) topics() ([]string, error) {
	var out []string
	for _, root := range []string{b.from, b.to} {
		ents, err := os.ReadDir(filepath.Join(root, queueTopics))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && !slices.Contains(out, e.Name()) {
				out = append(out, e.Name())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// syncTree fsyncs every file and directory under root, directories after
// what they hold.
func syncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		f, err := os.Open(d)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func isCrossDevice(err error) bool { return errors.Is(err, syscall.EXDEV) }

package segfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
)

// DefaultBufferSize is the default for Options.BufferSize.
const DefaultBufferSize = 256 << 10

// ErrExist is returned by Create when the file already exists.
var ErrExist = errors.New("segfile: file already exists")

// Options configure a Writer.
type Options struct {
	// BufferSize is how many bytes are gathered before they are written to
	// the OS. Default DefaultBufferSize.
	BufferSize int
	// SyncFile makes the file durable. Default (*os.File).Sync. Tests use
	// it to count or fail fsyncs.
	SyncFile func(*os.File) error
	// Logger receives a warning when a torn tail is truncated. Default
	// slog.Default().
	Logger *slog.Logger
	// CheckHeader, if set, is called by Open with the decoded header before
	// anything is read past it or written; an error it returns is returned
	// by Open with the file untouched. Callers use it to check that a file
	// holds the bucket its name promises.
	CheckHeader func(Header) error
}

func (o *Options) fill() {
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.SyncFile == nil {
		o.SyncFile = (*os.File).Sync
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Writer appends records to one segment file, buffered, and keeps the
// synced-length slots up to date. It is not safe for concurrent use, with
// one exception: SyncFile may run while another goroutine holding the
// caller's lock calls the other methods (that is how dispatchlog
// group-commits). After a failed write or fsync every method returns that
// error (it is sticky); the file is then left for recovery on reopen.
type Writer struct {
	f    *os.File
	path string
	hdr  Header
	opts Options

	buf     []byte // pending bytes, to be written at offset flushed
	flushed int64  // bytes handed to the OS
	records uint64 // records appended so far (incl. buffered)
	aux     uint64 // aux value after the last appended record
	synced  Slot   // the last state made durable
	next    int    // the slot to write next
	dirty   bool   // a slot was written since the last fsync
	err     error  // sticky write/fsync error
}

// Create creates the file at path with header h, durably (CreateAtomic),
// so a file under the final name always has a whole header.
func Create(path string, h Header, opts Options) (*Writer, error) {
	return CreateWith(path, h, nil, 0, opts)
}

// CreateWith is Create with first records: init holds records framed
// whole records, written and synced (slot A records them) before the file
// gets its final name, so a file under that name never lacks them.
func CreateWith(path string, h Header, init []byte, records uint64, opts Options) (*Writer, error) {
	opts.fill()
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExist, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	synced, next := Slot{Len: HeaderSize}, 1
	hdr := EncodeHeader(h)
	if len(init) > 0 {
		synced = Slot{Len: HeaderSize + int64(len(init)), Records: records}
		PutSlot(hdr[SlotOffset(0):SlotOffset(0)+slotSize], 0, synced)
	}
	f, err := CreateAtomic(path, func(f *os.File) error {
		_, err := f.WriteAt(append(hdr, init...), 0)
		return err
	}, opts.SyncFile)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, path: path, hdr: h, opts: opts, flushed: synced.Len,
		records: records, synced: synced, next: next}
	return w, nil
}

// Open opens an existing file for append and recovers it: it trusts the
// bytes up to the larger valid synced-length slot, decodes every record
// after it, truncates a torn tail (and fsyncs), and records the recovered
// state in a slot. It reads only the tail after the slot, never the whole
// file (unless neither slot is valid). Damage before the slot, or a record
// whose checksum holds but which ft.Check rejects, is a *CorruptionError
// and the file is left untouched.
func Open(path string, ft Format, opts Options) (*Writer, Recovery, error) {
	opts.fill()
	rec := Recovery{Path: path}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, rec, err
	}
	w, rec, err := open(f, path, ft, opts)
	if err != nil {
		f.Close()
		return nil, rec, err
	}
	return w, rec, nil
}

func open(f *os.File, path string, ft Format, opts Options) (*Writer, Recovery, error) {
	rec := Recovery{Path: path}
	h, hdr, err := ReadHeader(f, path, ft.Magic)
	if err != nil {
		return nil, rec, err
	}
	if opts.CheckHeader != nil {
		if err := opts.CheckHeader(h); err != nil {
			return nil, rec, err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, rec, err
	}
	size := fi.Size()
	state, slot, ok := BestSlot(hdr)
	if !ok {
		state, slot = Slot{Len: HeaderSize}, 1 // write slot A first
	}
	rec.From, rec.HintValid = state.Len, ok
	if state.Len > size {
		return nil, rec, &CorruptionError{Path: path, Offset: size,
			Err: fmt.Errorf("%w (hint %d, file size %d)", ErrHintBeyondEOF, state.Len, size)}
	}
	sc := NewScanner(f, state.Len, size, 0)
	end, records, aux := state.Len, state.Records, state.Aux
	for {
		off, r, _, err := sc.Next()
		if err == nil {
			a, cerr := ft.Check(&h, r, aux, records > 0)
			if cerr != nil {
				return nil, rec, &CorruptionError{Path: path, Offset: off, Err: cerr}
			}
			end, records, aux = sc.Offset(), records+1, a
			continue
		}
		if err == io.EOF {
			break
		}
		if !IsDecodeError(err) {
			return nil, rec, err
		}
		n, herr := sc.CountWhole(off+ft.Align, ft.Align, ft.Type)
		if herr != nil {
			return nil, rec, herr
		}
		rec.Truncated, rec.Offset, rec.Bytes, rec.Records, rec.Err = true, off, size-off, n, err
		break
	}
	rec.Scanned = end - state.Len
	if rec.Truncated {
		if err := f.Truncate(rec.Offset); err != nil {
			return nil, rec, err
		}
		opts.Logger.Warn("segment: truncated torn tail", "path", path, "offset", rec.Offset,
			"bytes", rec.Bytes, "whole_records_dropped", rec.Records, "cause", rec.Err)
	}
	w := &Writer{f: f, path: path, hdr: h, opts: opts, flushed: end,
		records: records, aux: aux, synced: state, next: 1 - slot}
	if rec.Truncated || end > state.Len {
		// The truncation, and whatever a crashed process left in the page
		// cache after the hint, are not yet known to be durable: make them
		// so before anyone builds on them, then record the new hint.
		if err := w.SyncEnd(Slot{Len: end, Records: records, Aux: aux}, w.SyncFile()); err != nil {
			return nil, rec, err
		}
	}
	return w, rec, nil
}

// Header returns the file's header.
func (w *Writer) Header() Header { return w.hdr }

// Path returns the file's path.
func (w *Writer) Path() string { return w.path }

// Size returns the file's length once everything appended is written.
func (w *Writer) Size() int64 { return w.flushed + int64(len(w.buf)) }

// Records returns how many records the file holds, buffered ones included.
func (w *Writer) Records() uint64 { return w.records }

// Aux returns the aux value after the last appended record.
func (w *Writer) Aux() uint64 { return w.aux }

// Synced returns the state the last successful fsync made durable.
func (w *Writer) Synced() Slot { return w.synced }

// Err returns the sticky error, if any.
func (w *Writer) Err() error { return w.err }

// Reserve returns n bytes at the end of the pending data, and their file
// offset, for the caller to fill with whole records before it calls Commit
// and before any other method. It writes the buffer out first when n
// would not fit.
func (w *Writer) Reserve(n int) (int64, []byte, error) {
	if w.err != nil {
		return 0, nil, w.err
	}
	if len(w.buf) > 0 && len(w.buf)+n > w.opts.BufferSize {
		if err := w.Flush(); err != nil {
			return 0, nil, err
		}
	}
	l := len(w.buf)
	if w.buf == nil {
		w.buf = getBuf(w.opts.BufferSize)
	}
	if cap(w.buf)-l < n {
		nb := make([]byte, l, max(l+n, w.opts.BufferSize))
		copy(nb, w.buf)
		w.buf = nb
	}
	w.buf = w.buf[:l+n]
	return w.flushed + int64(l), w.buf[l : l+n : l+n], nil
}

// Commit accounts for the records the caller placed in reserved space; aux
// is the format's value after the last of them.
func (w *Writer) Commit(records int, aux uint64) {
	w.records += uint64(records)
	w.aux = aux
}

// Flush writes the buffered bytes to the OS, after which ReadAt on any
// descriptor of the file sees them. It does not make them durable.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(w.buf, w.flushed); err != nil {
		w.err = err
		return err
	}
	w.flushed += int64(len(w.buf))
	// Give the buffer back: a process can have hundreds of segments open
	// (one per bucket that received messages) and most are idle.
	putBuf(w.buf)
	w.buf = nil
	return nil
}

// SyncBegin flushes and returns the state an fsync started now makes
// durable; need is false when that state is already durable.
func (w *Writer) SyncBegin() (s Slot, need bool, err error) {
	if err := w.Flush(); err != nil {
		return Slot{}, false, err
	}
	s = Slot{Len: w.flushed, Records: w.records, Aux: w.aux}
	return s, s.Len > w.synced.Len, nil
}

// SyncFile fsyncs the file. It touches nothing but the descriptor, so it
// may run without the lock that guards the other methods.
func (w *Writer) SyncFile() error { return w.opts.SyncFile(w.f) }

// SyncEnd records the outcome of the fsync that followed SyncBegin(s): on
// success s is durable and is written to the older slot (durable with the
// next fsync); on failure the error becomes sticky.
func (w *Writer) SyncEnd(s Slot, syncErr error) error {
	if w.err != nil {
		return w.err
	}
	if syncErr != nil {
		w.err = fmt.Errorf("fsync %s: %w", w.path, syncErr)
		return w.err
	}
	w.dirty = false
	if s.Len <= w.synced.Len {
		return nil
	}
	w.synced = s
	var b [slotSize]byte
	PutSlot(b[:], w.next, s)
	if _, err := w.f.WriteAt(b[:], SlotOffset(w.next)); err != nil {
		w.err = err
		return err
	}
	w.next ^= 1
	w.dirty = true
	return nil
}

// Sync makes everything appended so far durable.
func (w *Writer) Sync() error {
	s, need, err := w.SyncBegin()
	if err != nil || !need {
		return err
	}
	return w.SyncEnd(s, w.SyncFile())
}

// Close syncs, makes the latest slot durable (so the next Open scans
// nothing) and closes the file. After a sticky error it only closes the
// file and returns that error.
func (w *Writer) Close() error {
	err := w.Sync()
	if err == nil && w.dirty {
		if err = w.SyncFile(); err != nil {
			w.err = fmt.Errorf("fsync %s: %w", w.path, err)
			err = w.err
		}
		w.dirty = false
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// bufPool recycles write buffers between flushes, so that an open but idle
// writer holds no buffer.
var bufPool sync.Pool

func getBuf(size int) []byte {
	if p, ok := bufPool.Get().(*[]byte); ok && cap(*p) >= size {
		return (*p)[:0]
	}
	return make([]byte, 0, size)
}

func putBuf(b []byte) {
	if cap(b) > 4<<20 {
		return
	}
	b = b[:0]
	bufPool.Put(&b)
}

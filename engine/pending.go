package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// Pending is what the engine holds of one topic (or a set of topics):
// messages accepted and not yet done (handed to the sink and recorded,
// cancelled, rescheduled away, expired), and their stored size (each
// message's schedule payload: body, headers, topic and about 30 bytes).
type Pending struct {
	Messages int64
	Bytes    int64
}

// PendingFileName is the file Close leaves in the schedule directory with
// the pending counts, so that the next Open need not count them again.
const PendingFileName = "pending.counts"

// pendingMagic starts a pending.counts file; with pendingVersion it is
// part of the format.
const (
	pendingMagic   = "HGPENDING\n"
	pendingVersion = 1
)

// pendingCounts is the one count of what each topic holds pending. Schedule
// and a reschedule's replacement add to it; a lane's recorded batch, a
// Cancel and a reschedule's original take from it. At Open it is read from
// the file the last Close left (whose commitlog end must be the one
// recovered), or else counted from the schedule segments and dispatch logs
// by the driver before it loads or fires anything (counted is closed
// then).
type pendingCounts struct {
	counted chan struct{}
	mu      struct {
		sync.Mutex
		m map[string]Pending
	}
}

func newPendingCounts() *pendingCounts {
	p := &pendingCounts{counted: make(chan struct{})}
	p.mu.m = map[string]Pending{}
	return p
}

func (p *pendingCounts) add(topic string, n, b int64) {
	if n == 0 && b == 0 {
		return
	}
	p.mu.Lock()
	c := p.mu.m[topic]
	c.Messages += n
	c.Bytes += b
	if c.Messages <= 0 {
		delete(p.mu.m, topic)
	} else {
		p.mu.m[topic] = c
	}
	p.mu.Unlock()
}

// ErrNotCounted is PendingOf's error on an engine that does not count
// (Options.CountPending).
var ErrNotCounted = errors.New("engine: pending messages are not counted: Options.CountPending is off")

// CountsPending reports whether PendingOf answers.
func (e *Engine) CountsPending() bool { return e.opts.CountPending || isClosed(e.pending.counted) }

// PendingOf returns the sum of what the topics for which match is true
// hold pending. It waits until the count covers what was on disk at Open.
func (e *Engine) PendingOf(ctx context.Context, match func(topic string) bool) (Pending, error) {
	if !e.CountsPending() {
		return Pending{}, ErrNotCounted
	}
	select {
	case <-e.pending.counted:
	case <-e.d.stopped:
		return Pending{}, ErrClosed
	case <-ctx.Done():
		return Pending{}, ctx.Err()
	}
	var s Pending
	e.pending.mu.Lock()
	defer e.pending.mu.Unlock()
	for t, c := range e.pending.mu.m {
		if match(t) {
			s.Messages += c.Messages
			s.Bytes += c.Bytes
		}
	}
	return s, nil
}

// pendingFile is the content of pending.counts.
type pendingFile struct {
	Version int                `json:"version"`
	End     int64              `json:"commitlog_end"` // the commitlog end at Close
	Topics  map[string]Pending `json:"topics"`
}

// decodePending decodes a pending.counts file.
func decodePending(b []byte) (pendingFile, error) {
	var f pendingFile
	rest, ok := bytes.CutPrefix(b, []byte(pendingMagic))
	if !ok {
		return f, errors.New("engine: pending.counts: not a pending counts file")
	}
	if err := json.Unmarshal(rest, &f); err != nil {
		return f, fmt.Errorf("engine: pending.counts: %w", err)
	}
	if f.Version != pendingVersion {
		return f, fmt.Errorf("engine: pending.counts: version %d, this build reads %d", f.Version, pendingVersion)
	}
	for t, c := range f.Topics {
		if c.Messages <= 0 || c.Bytes < 0 {
			return f, fmt.Errorf("engine: pending.counts: topic %q: %d messages, %d bytes", t, c.Messages, c.Bytes)
		}
	}
	return f, nil
}

// CheckPendingFile reports whether the pending counts file at path
// decodes (hourglass inspect verify).
func CheckPendingFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = decodePending(b)
	return err
}

// takePendingFile reads and removes the file Close left, and reports
// whether it covers the commitlog as recovered (end): only then do its
// counts hold. It is removed before anything changes, so a crash later
// cannot leave a stale one.
func (e *Engine) takePendingFile(end int64) bool {
	path := filepath.Join(e.schedDir, PendingFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if rerr := os.Remove(path); rerr == nil {
		rerr = segfile.SyncDir(e.schedDir)
		if rerr != nil {
			err = rerr
		}
	} else if err == nil {
		err = rerr
	}
	if err != nil {
		e.opts.Logger.Warn("engine: pending counts file unusable; counting again", "path", path, "err", err)
		return false
	}
	f, err := decodePending(b)
	if err == nil && f.End != end {
		err = fmt.Errorf("it covers the commitlog to %d, which ends at %d", f.End, end)
	}
	if err != nil {
		e.opts.Logger.Warn("engine: pending counts file does not hold; counting again", "path", path, "err", err)
		return false
	}
	e.pending.mu.Lock()
	for t, c := range f.Topics {
		e.pending.mu.m[t] = c
	}
	e.pending.mu.Unlock()
	return true
}

// writePendingFile leaves the counts for the next Open (tmp, fsync,
// rename, fsync dir). Nothing may change them any more: Close calls it
// once the driver and reput are stopped.
func (e *Engine) writePendingFile() error {
	select {
	case <-e.pending.counted:
	default:
		return nil // never counted: the next Open counts
	}
	e.pending.mu.Lock()
	b, err := json.Marshal(pendingFile{Version: pendingVersion, End: e.log.EndOffset(), Topics: e.pending.mu.m})
	e.pending.mu.Unlock()
	if err != nil {
		return err
	}
	return segfile.WriteFileAtomic(filepath.Join(e.schedDir, PendingFileName), append([]byte(pendingMagic), b...))
}

// countPending counts, on the driver goroutine before it loads anything,
// what every schedule segment holds that its dispatch log does not say is
// done, of the messages appended before Open (those after are counted by
// Schedule). Reput has routed everything up to Open by then. It reads
// every segment and dispatch log once: the cost of a start without the
// file a clean Close leaves. A segment it cannot read counts what it read
// of it.
func (d *driver) countPending(ctx context.Context, startEnd int64) bool {
	e := d.e
	for _, s := range e.reput.Segments() {
		if ctx.Err() != nil {
			return false
		}
		if err := e.countSegment(s.Start, startEnd); err != nil {
			e.opts.Logger.Warn("engine: counting pending messages: segment unreadable; its rest is not counted", "bucket", fmtMs(s.Start), "err", err)
		}
	}
	return true
}

func (e *Engine) countSegment(start, startEnd int64) error {
	// The done-records reput routed may still be in its buffers.
	if err := e.reput.SyncDispatch(start); err != nil {
		return err
	}
	done, _, err := dispatchlog.Load(e.donePath(start))
	if err != nil {
		return err
	}
	r, err := schedulelog.OpenReader(filepath.Join(e.schedDir, schedulelog.Name(start)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // retired meanwhile
	}
	if err != nil {
		return err
	}
	defer r.Close()
	counts := map[string]Pending{}
	it := r.Iter()
	for it.Next() {
		if int64(it.Seq()) >= startEnd {
			break // seqs increase within a segment
		}
		if _, ok := done.Reason(it.Seq()); ok {
			continue
		}
		t := string(it.Message().Topic)
		c := counts[t]
		c.Messages++
		c.Bytes += int64(len(it.Payload()))
		counts[t] = c
	}
	for t, c := range counts {
		e.pending.add(t, c.Messages, c.Bytes)
	}
	return it.Err()
}

// countAtStart waits for reput to route what the commitlog held at Open,
// counts, and closes counted; false if the engine stopped first.
func (d *driver) countAtStart(startEnd int64) bool {
	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	go func() {
		select {
		case <-d.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := d.e.reput.WaitRouted(ctx, startEnd); err != nil {
		return false
	}
	if !d.countPending(ctx, startEnd) {
		return false
	}
	close(d.e.pending.counted)
	return true
}

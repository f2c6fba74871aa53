package reput

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// base is a fixed UTC time so buckets are predictable: 2026-11-30T05:00:00Z.
const base = int64(1796014800000)

type env struct {
	t    *testing.T
	dir  string
	log  *commitlog.Log
	r    *Reput
	opts Options
}

func newEnv(t *testing.T, dir string, mod func(*Options)) *env {
	t.Helper()
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "commitlog"), SegmentSize: 64 << 10, Sync: commitlog.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Log: l, Dir: filepath.Join(dir, "schedule"), SegmentDuration: time.Second, checkpointInterval: time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	r, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, log: l, r: r, opts: opts}
	return e
}

func (e *env) close() {
	e.t.Helper()
	if err := e.r.Close(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.log.Close(); err != nil {
		e.t.Fatal(err)
	}
}

func schedRec(deliverAt int64, body string) commitlog.Record {
	m := message.Message{DeliverAt: deliverAt, Topic: []byte("t"), Body: []byte(body)}
	return commitlog.Record{Type: message.TypeSchedule, Payload: message.AppendSchedule(nil, &m)}
}

// keyedRec is a schedule record of topic due at deliverAt with an
// idempotency key.
func keyedRec(topic, key string, deliverAt int64) commitlog.Record {
	m := message.Message{DeliverAt: deliverAt, Topic: []byte(topic),
		Headers: []message.Header{{Key: keyHeader, Value: []byte(key)}}, Body: []byte("x")}
	return commitlog.Record{Type: message.TypeSchedule, Payload: message.AppendSchedule(nil, &m)}
}

// openCatalog opens the catalog file in dir.
func openCatalog(t *testing.T, dir string) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.Open(filepath.Join(dir, catalog.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// schedule appends n schedule records spread over buckets seconds and
// returns their IDs.
func (e *env) schedule(n, buckets int, tag string) []message.ID {
	e.t.Helper()
	var ids []message.ID
	for i := range n {
		at := base + int64(i%buckets)*1000 + int64(i%997)
		offs, err := e.log.Append(nil, schedRec(at, fmt.Sprintf("%s-%d", tag, i)))
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, message.ID{DeliverAt: at, Seq: uint64(offs[0])})
	}
	return ids
}

func (e *env) waitRouted() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.r.WaitRouted(ctx, e.log.EndOffset()); err != nil {
		e.t.Fatal(err)
	}
}

// scan returns every entry in the schedule directory: seq -> (bucket, body),
// failing on a seq that appears twice or in the wrong bucket.
func scan(t *testing.T, dir string) map[uint64]string {
	t.Helper()
	segs, err := schedulelog.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[uint64]string)
	for _, s := range segs {
		rd, err := schedulelog.OpenReader(filepath.Join(dir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		it := rd.Iter()
		for it.Next() {
			m := it.Message()
			if !s.Contains(m.DeliverAt) {
				t.Fatalf("seq %d deliverAt %d in segment %s", it.Seq(), m.DeliverAt, s.Name)
			}
			if _, dup := got[it.Seq()]; dup {
				t.Fatalf("seq %d appears twice (I2)", it.Seq())
			}
			got[it.Seq()] = string(m.Body)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		rd.Close()
	}
	return got
}

func TestRoutesIntoBuckets(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	ids := e.schedule(500, 7, "a")
	e.waitRouted()
	got := scan(t, e.opts.Dir)
	if len(got) != len(ids) {
		t.Fatalf("%d entries, want %d", len(got), len(ids))
	}
	for i, id := range ids {
		if got[id.Seq] != fmt.Sprintf("a-%d", i) {
			t.Fatalf("entry %d: %q", i, got[id.Seq])
		}
	}
	if segs := e.r.Segments(); len(segs) != 7 {
		t.Fatalf("%d segments, want 7", len(segs))
	}
	if st := e.r.Stats(); st.Routed != 500 || st.Skipped != 0 {
		t.Fatalf("stats %+v", st)
	}
	e.close()
}

func TestCancelBecomesDoneRecord(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	ids := e.schedule(10, 2, "c")
	for _, id := range ids[:3] {
		if _, err := e.log.Append(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, id)}); err != nil {
			t.Fatal(err)
		}
	}
	// A cancel whose segment does not exist is an orphan, not an error.
	e.log.Append(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, message.ID{DeliverAt: base + 3600_000, Seq: 1})})
	e.waitRouted()
	e.close()
	done := 0
	for _, s := range mustList(t, e.opts.Dir) {
		set, counts, err := dispatchlog.Load(filepath.Join(e.opts.Dir, dispatchlog.Name(s.Start)))
		if err != nil {
			t.Fatal(err)
		}
		done += set.Len()
		if counts.Total() != set.Len() {
			t.Fatalf("counts %+v for %d done", counts, set.Len())
		}
		for _, id := range ids[:3] {
			if s.Contains(id.DeliverAt) && !set.Contains(id.Seq) {
				t.Fatalf("cancelled %v not done", id)
			}
		}
	}
	if done != 3 {
		t.Fatalf("%d done-records, want 3", done)
	}
	if st := e.r.Stats(); st.Cancels != 3 || st.Orphans != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func mustList(t *testing.T, dir string) []schedulelog.SegmentInfo {
	t.Helper()
	segs, err := schedulelog.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// TestWatchNoGapNoOverlap loads a bucket while producers keep appending to
// it: entries below Watch's end come from the file, later ones through
// OnEntry, and together they are every entry exactly once.
func TestWatchNoGapNoOverlap(t *testing.T) {
	var mu sync.Mutex
	hooked := map[uint64]int64{}
	e := newEnv(t, t.TempDir(), func(o *Options) {
		o.OnEntries = func(ens []Entry) {
			mu.Lock()
			for _, en := range ens {
				hooked[en.Seq] = en.Offset
			}
			mu.Unlock()
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 5000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.log.Append(nil, schedRec(base+int64(i%1000), "w")); err != nil {
				t.Error(err)
				return
			}
		}
	})
	e.schedule(50, 1, "pre")
	end, _, err := e.r.Watch(base)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := schedulelog.OpenReader(filepath.Join(e.opts.Dir, schedulelog.Name(base)))
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[uint64]bool{}
	it := rd.Iter()
	for it.Next() && it.Offset() < end {
		loaded[it.Seq()] = true
	}
	rd.Close()
	wg.Wait()
	close(stop)
	e.waitRouted()
	e.close()
	all := scan(t, e.opts.Dir)
	mu.Lock()
	defer mu.Unlock()
	for seq := range all {
		_, h := hooked[seq]
		if h == loaded[seq] {
			t.Fatalf("seq %d: loaded=%v hooked=%v", seq, loaded[seq], h)
		}
	}
	if len(loaded) == 0 {
		t.Fatal("nothing was loaded from the file")
	}
	t.Logf("%d from the file, %d through OnEntries", len(loaded), len(hooked))
}

func TestRestartSkipsWhatSegmentsHold(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour })
	ids := e.schedule(300, 5, "r")
	e.waitRouted()
	// Crash after routing but before any checkpoint: abandon without Close,
	// leaving the segments as routed and the checkpoint of the fresh
	// directory (position 0).
	e.r.abandon()
	e.log.Close()
	if pos, ok, err := readCheckpoint(filepath.Join(dir, "schedule")); pos != 0 || !ok || err != nil {
		t.Fatalf("checkpoint %d, %v, %v; want the fresh directory's, at 0", pos, ok, err)
	}
	e = newEnv(t, dir, nil)
	more := e.schedule(100, 5, "s")
	e.waitRouted()
	if st := e.r.Stats(); st.Skipped != 300 || st.Routed != 100 {
		t.Fatalf("after restart: %+v, want 300 skipped and 100 routed", st)
	}
	e.close()
	got := scan(t, e.opts.Dir)
	if len(got) != len(ids)+len(more) {
		t.Fatalf("%d entries, want %d", len(got), len(ids)+len(more))
	}
}

func TestCheckpointTrimsCommitlog(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	e.schedule(3000, 3, "x") // several 64 KiB commitlog segments
	e.waitRouted()
	e.close()
	pos, ok, err := readCheckpoint(e.opts.Dir)
	if err != nil || !ok || pos != e.log.EndOffset() {
		t.Fatalf("checkpoint %d %v %v, want %d", pos, ok, err, e.log.EndOffset())
	}
	if e.log.FirstOffset() == 0 {
		t.Fatal("commitlog was not trimmed behind the checkpoint")
	}
	// Restart resumes at the checkpoint and routes nothing twice.
	e = newEnv(t, dir, nil)
	e.waitRouted()
	if st := e.r.Stats(); st.Routed != 0 || st.Skipped != 0 {
		t.Fatalf("restart re-read records: %+v", st)
	}
	e.close()
}

func TestDamagedCheckpointIsIgnored(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	e.schedule(100, 2, "d")
	e.waitRouted()
	e.close()
	os.WriteFile(filepath.Join(e.opts.Dir, checkpointName), []byte("garbage"), 0o644)
	e = newEnv(t, dir, nil)
	e.waitRouted()
	e.close()
	if len(scan(t, e.opts.Dir)) != 100 {
		t.Fatal("entries lost or duplicated")
	}
}

func TestRetire(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour })
	e.schedule(10, 1, "z")
	e.waitRouted()
	if err := e.r.Retire(base, 10); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("retire before checkpoint: %v", err)
	}
	e.close()
	e = newEnv(t, dir, nil)
	if err := e.r.Retire(base, 9); !errors.Is(err, ErrBusy) {
		t.Fatalf("retire with an unaccounted entry: %v", err)
	}
	if err := e.r.MarkDone(base, dispatchlog.Done{Seq: 1, Reason: dispatchlog.Delivered}); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Retire(base, 10); err != nil {
		t.Fatalf("retire: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(e.opts.Dir, "*T*Z*"))
	if len(left) != 0 {
		t.Fatalf("files left after retire: %v", left)
	}
	// A new record for the same bucket makes a new segment.
	e.schedule(1, 1, "again")
	e.waitRouted()
	e.close()
	if n := len(scan(t, e.opts.Dir)); n != 1 {
		t.Fatalf("%d entries after re-creating the bucket", n)
	}
}

// Retire takes a segment off the list before deleting its files, so a
// reader never finds a listed segment whose dispatch log is gone (it would
// read that as nothing done: every entry pending).
func TestRetireUnlistsBeforeDeleting(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	e.schedule(3, 1, "z")
	e.waitRouted()
	for seq := range 3 {
		if err := e.r.MarkDone(base, dispatchlog.Done{Seq: uint64(seq), Reason: dispatchlog.Delivered}); err != nil {
			t.Fatal(err)
		}
	}
	e.close()
	hooks := &testHooks{}
	e = newEnv(t, dir, func(o *Options) { o.hooks = hooks })
	defer e.close()
	called := false
	hooks.beforeRemove = func(bucket int64) {
		called = true
		if _, ok := e.r.FindSegment(bucket); ok {
			t.Errorf("segment %d still listed when its files are deleted", bucket)
		}
		if _, err := os.Stat(filepath.Join(e.opts.Dir, dispatchlog.Name(bucket))); err != nil {
			t.Errorf("dispatch log gone before the segment left the list: %v", err)
		}
	}
	if err := e.r.Retire(base, 3); err != nil {
		t.Fatalf("retire: %v", err)
	}
	if !called {
		t.Fatal("Retire deleted no files")
	}
	if left, _ := filepath.Glob(filepath.Join(e.opts.Dir, "*T*Z*")); len(left) != 0 {
		t.Fatalf("files left after retire: %v", left)
	}
}

func TestMalformedRecordsAreSkippedLoudly(t *testing.T) {
	e := newEnv(t, t.TempDir(), nil)
	e.log.Append(nil, commitlog.Record{Type: message.TypeSchedule, Payload: []byte{1, 2}})
	e.log.Append(nil, commitlog.Record{Type: 99, Payload: []byte("?")})
	e.schedule(1, 1, "ok")
	e.waitRouted()
	e.close()
	if st := e.r.Stats(); st.Malformed != 2 || st.Routed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestErrorsSayWhat(t *testing.T) {
	if _, err := Start(Options{}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("empty options: %v", err)
	}
	l, _, _ := commitlog.Open(commitlog.Options{Dir: t.TempDir(), SegmentSize: 64 << 10})
	defer l.Close()
	if _, err := Start(Options{Log: l, Dir: t.TempDir(), SegmentDuration: 1500 * time.Millisecond}); err == nil {
		t.Fatal("1.5 s duration accepted")
	}
}

// sortedKeys is a helper for failure messages.
func sortedKeys(m map[uint64]string) []uint64 {
	var k []uint64
	for s := range m {
		k = append(k, s)
	}
	sort.Slice(k, func(i, j int) bool { return k[i] < k[j] })
	return k
}

var _ = sortedKeys

// The idempotency keys of routed records are in the catalog once they are
// routed (the last record of a key wins), and after a crash before any
// checkpoint (nothing committed) routing the records again puts them all
// back.
func TestKeysStagedAgainAfterCrash(t *testing.T) {
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour; o.Catalog = cat })
	const n = 2*batchRecords + 10 // more than one step's batch
	want := map[string]message.ID{}
	for i := range n {
		topic := []string{"a", "b"}[i%2]
		key := fmt.Sprint("k", i%(n-5)) // the last 5 records reuse the first keys
		at := base + int64(i%3)*1000
		offs, err := e.log.Append(nil, keyedRec(topic, key, at))
		if err != nil {
			t.Fatal(err)
		}
		want[string(catalog.KeyOf(topic, key))] = message.ID{DeliverAt: at, Seq: uint64(offs[0])}
	}
	check := func(when string, cat *catalog.Catalog) {
		t.Helper()
		for k, id := range want {
			got, ok, err := cat.LookupID(catalog.Keys, []byte(k))
			if err != nil || !ok || got != id {
				t.Fatalf("%s: key %q = %v, %v, %v; want %v", when, k, got, ok, err, id)
			}
		}
	}
	e.waitRouted()
	check("routed", cat)
	e.r.abandon()
	e.log.Close()
	cat.Close() // drops what was staged: nothing was committed
	cat = openCatalog(t, dir)
	defer cat.Close()
	if got, ok, _ := cat.LookupID(catalog.Keys, []byte(catalog.KeyOf("a", "k0"))); ok {
		t.Fatalf("a key is in the catalog before routing again (%v): the test's crash committed it", got)
	}
	e = newEnv(t, dir, func(o *Options) { o.Catalog = cat })
	e.waitRouted()
	check("routed again after the crash", cat)
	e.close()
}

// With a catalog, the checkpoint is written as soon as the catalog's commit
// of what it covers ends, not a checkpoint interval later: a kill replays
// up to an interval and a commit, not two intervals.
func TestCheckpointFollowsCatalogCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cat := openCatalog(t, dir)
		defer cat.Close()
		e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour; o.Catalog = cat })
		defer e.close()
		for i := range 10 {
			if _, err := e.log.Append(nil, keyedRec("t", fmt.Sprint("k", i), base)); err != nil {
				t.Fatal(err)
			}
		}
		e.waitRouted()
		if got := e.r.Checkpoint(); got != 0 {
			t.Fatalf("checkpoint %d before the first interval ended", got)
		}
		time.Sleep(time.Hour) // the first checkpoint: syncs, then the catalog commit on a goroutine of its own
		synctest.Wait()
		if got, end := e.r.Checkpoint(), e.log.EndOffset(); got != end {
			t.Fatalf("checkpoint %d once the catalog commit ended, want the end %d without another interval", got, end)
		}
		if _, ok, err := cat.LookupID(catalog.Keys, catalog.KeyOf("t", "k9")); !ok || err != nil {
			t.Fatalf("key k9 not in the catalog (%v)", err)
		}
	})
}

// A checkpoint is due once checkpointBytes of commitlog are routed past
// the last one, without waiting for the interval: what a kill leaves to
// route again is bounded by size at any rate of Schedules.
func TestCheckpointAfterBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		const limit = 4 << 10
		e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour; o.checkpointBytes = limit })
		defer e.close()
		start := time.Now()
		if _, err := e.log.Append(nil, schedRec(base, "small")); err != nil {
			t.Fatal(err)
		}
		e.waitRouted()
		synctest.Wait()
		if got := e.r.Checkpoint(); got != 0 {
			t.Fatalf("checkpoint %d after %d bytes, under the %d-byte bound and the interval", got, e.log.EndOffset(), limit)
		}
		body := strings.Repeat("b", 256)
		for e.log.EndOffset() < limit {
			if _, err := e.log.Append(nil, schedRec(base, body)); err != nil {
				t.Fatal(err)
			}
		}
		e.waitRouted()
		synctest.Wait()
		if got, end := e.r.Checkpoint(), e.log.EndOffset(); got != end {
			t.Fatalf("checkpoint %d, want the end %d once %d bytes were routed", got, end, limit)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the checkpoint came after %v, by the interval, not by size", waited)
		}
	})
}

// A checkpoint taken while a restart routes again the records after the
// last one (their keys held back, to be staged at once) still has every
// key below it in the catalog: a kill after it would not route those
// records again.
func TestCheckpointDuringReplayHasItsKeys(t *testing.T) {
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	e := newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour; o.Catalog = cat })
	const n = 3 * batchRecords
	recs := make([]commitlog.Record, n)
	for i := range recs {
		recs[i] = keyedRec("t", fmt.Sprint("k", i), base)
	}
	offs, err := e.log.Append(nil, recs...)
	if err != nil {
		t.Fatal(err)
	}
	e.waitRouted()
	e.r.abandon() // no checkpoint: a restart routes all n again
	e.log.Close()
	cat.Close() // drops what was staged: nothing was committed
	cat = openCatalog(t, dir)
	defer cat.Close()
	checked := false // by the routing goroutine until waitRouted returns
	hooks := &testHooks{}
	hooks.afterRoute = func(r *Reput) {
		if checked || r.it.Pos() >= r.keys.replayEnd {
			return
		}
		checked = true
		if err := r.checkpointAt(true); err != nil {
			t.Errorf("checkpoint: %v", err)
			return
		}
		pos := r.Checkpoint()
		if pos <= 0 || pos >= r.keys.replayEnd {
			t.Errorf("checkpoint at %d, want one inside the replay, below %d", pos, r.keys.replayEnd)
		}
		for i, off := range offs {
			if off >= pos {
				break
			}
			if _, ok, err := cat.LookupID(catalog.Keys, catalog.KeyOf("t", fmt.Sprint("k", i))); !ok || err != nil {
				t.Errorf("checkpoint at %d, but the key of record %d (offset %d) is not in the catalog (%v)", pos, i, off, err)
				return
			}
		}
	}
	e = newEnv(t, dir, func(o *Options) { o.checkpointInterval = time.Hour; o.Catalog = cat; o.hooks = hooks })
	defer e.close()
	e.waitRouted()
	if !checked {
		t.Fatal("no step routed part of the replay")
	}
}

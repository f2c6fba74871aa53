package reput

import (
	"strconv"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// TestRetireThenRouteAgain: a bucket retired before its time (its entry
// cancelled) gets a new segment under its name for a record routed after
// the retirement; Removed counts the retirement; the catalog's key and
// reschedule-map rows of the retired entry are swept although a segment of
// that name exists again, while the new entry's stay; a restart routes
// neither entry again.
func TestRetireThenRouteAgain(t *testing.T) {
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	defer cat.Close()
	const far = int64(253402214400000) // 9999-12-31: ahead of any clock
	rec := func(key string, origin message.ID) commitlog.Record {
		m := message.Message{DeliverAt: far, Topic: []byte("t"), Origin: origin, Body: []byte(key), Headers: []message.Header{
			{Key: keyHeader, Value: []byte(key)},
			{Key: keyTimeHeader, Value: strconv.AppendInt(nil, base, 10)}, // arrived long ago
		}}
		return commitlog.Record{Type: message.TypeSchedule, Payload: message.AppendSchedule(nil, &m)}
	}
	appendRec := func(e *env, r commitlog.Record) message.ID {
		t.Helper()
		offs, err := e.log.Append(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		return message.ID{DeliverAt: far, Seq: uint64(offs[0])}
	}
	oldOrigin, newOrigin := message.ID{DeliverAt: base, Seq: 1}, message.ID{DeliverAt: base, Seq: 2}
	withCat := func(o *Options) { o.Catalog = cat }

	e := newEnv(t, dir, withCat)
	old := appendRec(e, rec("old", oldOrigin))
	e.waitRouted()
	if _, err := e.log.Append(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, old)}); err != nil {
		t.Fatal(err)
	}
	e.waitRouted()
	e.close()
	e = newEnv(t, dir, withCat) // the checkpoint covers both records
	if err := e.r.Retire(far, 1); err != nil {
		t.Fatalf("Retire: %v", err)
	}
	if n := e.r.Removed(); n != 1 {
		t.Fatalf("Removed = %d after one retirement", n)
	}
	if _, ok := e.r.FindSegment(far); ok {
		t.Fatal("the retired segment is still listed")
	}
	fresh := appendRec(e, rec("new", newOrigin))
	e.waitRouted()
	if seg, ok := e.r.FindSegment(far); !ok || !seg.Contains(far) {
		t.Fatal("a record routed after the retirement made no new segment")
	}
	lookup := func(tb catalog.Table, k []byte) (message.ID, bool) {
		t.Helper()
		id, ok, err := cat.LookupID(tb, k)
		if err != nil {
			t.Fatal(err)
		}
		return id, ok
	}
	// The checkpoint after routing the new entry (a millisecond later
	// here) sweeps the catalog; its commit ends on its own goroutine.
	deadline := time.Now().Add(time.Minute)
	for {
		_, oldKey := lookup(catalog.Keys, catalog.KeyOf("t", "old"))
		_, oldMoved := lookup(catalog.Moved, catalog.EncodeID(oldOrigin))
		if !oldKey && !oldMoved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the retirement the catalog still has the retired entry's key (%v) or reschedule row (%v)", oldKey, oldMoved)
		}
		time.Sleep(time.Millisecond)
	}
	if id, ok := lookup(catalog.Keys, catalog.KeyOf("t", "new")); !ok || id != fresh {
		t.Fatalf("the new entry's key = %v, %v; want %v", id, ok, fresh)
	}
	if id, ok := lookup(catalog.Moved, catalog.EncodeID(newOrigin)); !ok || id != fresh {
		t.Fatalf("the new entry's reschedule row = %v, %v; want %v", id, ok, fresh)
	}
	e.r.abandon() // a crash
	e.log.Close()
	e = newEnv(t, dir, withCat)
	e.waitRouted()
	e.close()
	got := scan(t, e.opts.Dir)
	if len(got) != 1 || got[fresh.Seq] != "new" {
		t.Fatalf("after a crash the segments hold %v; want only the new entry %d", got, fresh.Seq)
	}
}

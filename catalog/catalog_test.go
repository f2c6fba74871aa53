package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

func open(t *testing.T, path string) *Catalog {
	t.Helper()
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func get(t *testing.T, c *Catalog, tb Table, k string) string {
	t.Helper()
	v, ok, err := c.Get(tb, []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "<none>"
	}
	return string(v)
}

// Staged entries are visible at once and durable only after Commit; a
// reopened catalog has what was committed and nothing else.
func TestStageCommitReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	c := open(t, path)
	c.Put(Policies, []byte("a"), []byte("1"))
	c.Put(Policies, []byte("b"), []byte("2"))
	if got := get(t, c, Policies, "a"); got != "1" {
		t.Fatalf("staged a = %s", got)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Delete(Policies, []byte("a"))
	c.Put(Policies, []byte("c"), []byte("3"))
	if got := get(t, c, Policies, "a"); got != "<none>" {
		t.Fatalf("a after a staged delete = %s", got)
	}
	if c.Staged() != 2 {
		t.Fatalf("Staged = %d", c.Staged())
	}
	c.Close() // the second batch is never committed: a crash
	c = open(t, path)
	defer c.Close()
	for k, want := range map[string]string{"a": "1", "b": "2", "c": "<none>"} {
		if got := get(t, c, Policies, k); got != want {
			t.Errorf("after reopen %s = %s, want %s", k, got, want)
		}
	}
}

// PutKeys stages its batches' pairs: visible at once (LookupKeys, and
// LookupID for the ID), the last pair of a key winning, each value its own
// (not the next pair's bytes), and durable after Commit, also in a later
// batch whose map starts at the first batch's size; a 16-byte value of an
// older file reads with an unknown arrival time.
func TestPutKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	c := open(t, path)
	id := func(i int) message.ID { return message.ID{DeliverAt: int64(1000 + i), Seq: uint64(i)} }
	check := func(when string, c *Catalog, want map[string]KeyHit) {
		t.Helper()
		var keys []string
		var wants []KeyHit
		for k, w := range want {
			keys, wants = append(keys, string(KeyOf("jobs", k))), append(wants, w)
		}
		hits := make([]KeyHit, len(keys))
		if err := c.LookupKeys(keys, hits); err != nil {
			t.Fatal(err)
		}
		for i, h := range hits {
			if h != wants[i] {
				t.Errorf("%s: %q = %+v, want %+v", when, keys[i], h, wants[i])
			}
			if got, ok, err := c.LookupID(Keys, []byte(keys[i])); err != nil || ok != wants[i].OK || got != wants[i].ID {
				t.Errorf("%s: LookupID(%q) = %v %v %v", when, keys[i], got, ok, err)
			}
		}
	}
	c.PutKeys([]KeyID{
		{string(KeyOf("jobs", "a")), id(1), 11},
		{string(KeyOf("jobs", "b")), id(2), 12},
	}, nil, []KeyID{
		{string(KeyOf("jobs", "a")), id(3), 13}, // a later batch's pair wins
	})
	c.PutKeys(nil)
	c.Put(Keys, KeyOf("jobs", "old"), EncodeID(id(5))) // as a build before arrival times wrote it
	check("staged", c, map[string]KeyHit{"a": {id(3), 13, true}, "b": {id(2), 12, true}, "old": {id(5), 0, true}, "none": {}})
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	c.PutKeys([]KeyID{{string(KeyOf("jobs", "c")), id(4), 14}})
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c = open(t, path)
	defer c.Close()
	check("after reopen", c, map[string]KeyHit{"a": {id(3), 13, true}, "b": {id(2), 12, true}, "c": {id(4), 14, true}, "old": {id(5), 0, true}, "none": {}})
}

// Scan merges staged and committed entries in key order, hides deleted
// ones, and pages.
func TestScan(t *testing.T) {
	c := open(t, filepath.Join(t.TempDir(), FileName))
	defer c.Close()
	for _, k := range []string{"b", "d", "f"} {
		c.Put(Schedules, []byte(k), []byte("old-"+k))
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Put(Schedules, []byte("a"), []byte("a"))
	c.Put(Schedules, []byte("d"), []byte("new-d"))
	c.Delete(Schedules, []byte("f"))
	c.Put(Schedules, []byte("e"), []byte("e"))
	var got []string
	var after []byte
	for range 10 {
		next, err := c.Scan(Schedules, after, 2, func(k, v []byte) { got = append(got, string(k)+"="+string(v)) })
		if err != nil {
			t.Fatal(err)
		}
		if next == nil {
			break
		}
		after = next
	}
	want := []string{"a=a", "b=old-b", "d=new-d", "e=e"}
	if !slices.Equal(got, want) {
		t.Fatalf("Scan = %v, want %v", got, want)
	}
}

// Sweep stages the removal of committed entries its function calls dead,
// a page at a time, and leaves entries staged since.
func TestSweep(t *testing.T) {
	c := open(t, filepath.Join(t.TempDir(), FileName))
	defer c.Close()
	for i := range 10 {
		c.Put(Keys, KeyOf("t", fmt.Sprint(i)), EncodeID(message.ID{DeliverAt: int64(i), Seq: uint64(i)}))
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Put(Keys, KeyOf("t", "2"), EncodeID(message.ID{DeliverAt: 100, Seq: 100})) // moved since
	dead := func(_, v []byte) bool { id, _ := DecodeID(v); return id.DeliverAt < 5 }
	var after []byte
	total := 0
	for range 10 {
		next, n, err := c.Sweep(Keys, after, 3, dead)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if after = next; after == nil {
			break
		}
	}
	if total != 4 {
		t.Fatalf("swept %d, want 4 (0, 1, 3, 4; 2 was put again)", total)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	id, ok, err := c.LookupID(Keys, KeyOf("t", "2"))
	if err != nil || !ok || id.DeliverAt != 100 {
		t.Fatalf("the re-put key: %v %v %v", id, ok, err)
	}
	if _, ok, _ := c.LookupID(Keys, KeyOf("t", "1")); ok {
		t.Fatal("a dead key survived the sweep")
	}
	if _, ok, _ := c.LookupID(Keys, KeyOf("t", "7")); !ok {
		t.Fatal("a live key was swept")
	}
}

// A file that is not a catalog is a CorruptionError naming it.
func TestDamagedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path)
	var ce *segfile.CorruptionError
	if !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("Open of a zeroed file = %v, want a CorruptionError naming it", err)
	}
}

// Verify finds a sound catalog sound, says so when a server holds it, and
// reports a file that is not a catalog.
func TestVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	c := open(t, path)
	c.Put(Keys, KeyOf("t", "k"), EncodeID(message.ID{DeliverAt: 1, Seq: 2}))
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("Verify of a held catalog: %v, want ErrInUse", err)
	}
	c.Close()
	if found, err := Verify(path); err != nil || len(found) != 0 {
		t.Fatalf("Verify of a sound catalog: %v, %v", found, err)
	}
	if err := os.WriteFile(path, []byte("not a catalog, not at all, long enough to read a header from it"), 0o644); err != nil {
		t.Fatal(err)
	}
	if found, err := Verify(path); err != nil || len(found) == 0 {
		t.Fatalf("Verify of a file that is not a catalog: %v, %v", found, err)
	}
}

// TestFloor finds the committed entry at or below a key: exact, between
// two, below the first, above the last, in an empty table.
func TestFloor(t *testing.T) {
	c, err := Open(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, ok, err := c.Floor(Delivered, BucketKey(5)); ok || err != nil {
		t.Fatalf("empty table: ok %v, %v", ok, err)
	}
	for _, s := range []int64{10, 20, 30} {
		c.Put(Delivered, BucketKey(s), []byte{byte(s)})
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  int64
		want int64 // -1: none
	}{
		{"exact", 20, 20}, {"between", 25, 20}, {"below_first", 5, -1}, {"above_last", 99, 30}, {"first", 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, v, ok, err := c.Floor(Delivered, BucketKey(tc.key))
			if err != nil || ok != (tc.want >= 0) || ok && (!bytes.Equal(k, BucketKey(tc.want)) || v[0] != byte(tc.want)) {
				t.Errorf("Floor(%d) = %x %v %v %v; want %d", tc.key, k, v, ok, err, tc.want)
			}
		})
	}
}

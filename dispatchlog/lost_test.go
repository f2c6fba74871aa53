package dispatchlog

import (
	"os"
	"path/filepath"
	"testing"
)

// A log opened with CreateLost where none exists says it was recreated,
// to every reader, until a Recovered marker follows; markers are never
// done-records of an entry.
func TestCreateLost(t *testing.T) {
	dir := t.TempDir()
	o := quiet
	o.CreateLost = true
	w, _ := openLog(t, dir, o)
	path := w.Path()
	// The marker is durable before Open returns: a crash now (no Close)
	// still finds it.
	set, c, err := Load(path)
	if err != nil || !c.Lost || set.Len() != 0 || c.Total() != 0 {
		t.Fatalf("after Open: set %d, counts %+v, err %v; want an empty set marked lost", set.Len(), c, err)
	}
	if err := w.AppendSync(Done{Seq: 0, Reason: Cancelled}, Done{Seq: 7, Reason: Delivered}); err != nil {
		t.Fatal(err)
	}
	sal, err := LoadSalvage(path)
	if err != nil || !sal.Lost || sal.Damaged() || !sal.Set.Contains(0) || !sal.Set.Contains(7) || sal.Set.Len() != 2 {
		t.Fatalf("salvage = %+v, %v; want lost, seqs 0 and 7", sal, err)
	}
	recs, err := Records(path)
	if err != nil || len(recs) != 2 || recs[0] != (Done{0, Cancelled}) {
		t.Fatalf("Records = %v, %v; want the two done-records without the marker", recs, err)
	}
	if err := w.AppendSync(Done{Reason: Recovered}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening an existing log adds no marker.
	w, _ = openLog(t, dir, o)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, c, err := Load(path); err != nil || c.Lost || c.Total() != 2 {
		t.Fatalf("after Recovered: counts %+v, %v; want whole, 2 records", c, err)
	}
	if sal, recs, err := RecordsSalvage(path); err != nil || sal.Lost || len(recs) != 2 {
		t.Fatalf("RecordsSalvage after Recovered = %+v, %v, %v", sal, recs, err)
	}
	// Without CreateLost a missing log is created whole and empty.
	os.Remove(path)
	w, _ = openLog(t, dir, quiet)
	w.Close()
	if _, c, err := Load(filepath.Join(dir, Name(start))); err != nil || c.Lost {
		t.Fatalf("plain Open: %+v, %v", c, err)
	}
}

package schedulelog

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hourglassmq/hourglass/segfile"
)

// FuzzParseName: the fast name parser accepts exactly what
// segfile.ParseBaseName accepts, with the same start.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"20261130T050000Z.sched", "19700101T000000Z.sched", "99991231T235959Z.sched",
		"20260230T000000Z.sched", "20261130T240000Z.sched", "2026113OT050000Z.sched", "20261130t050000Z.sched",
		"20261130T050000Z.done", "+0261130T050000Z.sched", "20261130T050000Z.sched.tmp", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, ok := ParseName(name)
		want, wok := segfile.ParseBaseName(name, Suffix)
		if ok != wok || got != want {
			t.Fatalf("ParseName(%q) = %d, %v; segfile.ParseBaseName = %d, %v", name, got, ok, want, wok)
		}
	})
}

// TestListNames: names only, sorted by start, temporary files removed by
// ListNamesRemoveTemp, damaged headers not read.
func TestListNames(t *testing.T) {
	dir := t.TempDir()
	starts := []int64{1796018400000, 1796014800000, 1796022000000}
	for _, s := range starts {
		if err := os.WriteFile(filepath.Join(dir, Name(s)), []byte("not a header"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"20261130T050000Z.sched.tmp", "20261130T050000Z.done.tmp", "reput.checkpoint", "other.tmp"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	segs, removed, err := ListNamesRemoveTemp(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, s := range segs {
		got = append(got, s.Start)
		if s.Duration != 0 || s.Name != Name(s.Start) {
			t.Fatalf("%+v", s)
		}
	}
	slices.Sort(starts)
	if !slices.Equal(got, starts) {
		t.Fatalf("starts %v, want %v", got, starts)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"20261130T050000Z.done.tmp", "20261130T050000Z.sched.tmp"}) {
		t.Fatalf("removed %v", removed)
	}
	if _, err := os.Stat(filepath.Join(dir, "other.tmp")); err != nil {
		t.Fatal("removed a file that is not a segment's temporary file")
	}
	if _, err := Stat(dir, starts[0]); err == nil {
		t.Fatal("Stat accepted a damaged header")
	}
}

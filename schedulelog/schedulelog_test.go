package schedulelog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// start is 2026-11-30T05:00:00Z, the bucket most tests write to.
var start = time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC).UnixMilli()

// msg returns a message due at deliverAt with a body of n bytes.
func msg(deliverAt int64, n int, seq uint64) *message.Message {
	body := make([]byte, n)
	for i := range body {
		body[i] = byte(seq) + byte(i)
	}
	return &message.Message{
		DeliverAt: deliverAt,
		Attempt:   uint32(seq % 3),
		Topic:     []byte("orders"),
		Headers:   []message.Header{{Key: []byte("trace"), Value: fmt.Appendf(nil, "t-%d", seq)}},
		Body:      body,
	}
}

type written struct {
	off int64
	seq uint64
	p   []byte
}

// appendN appends n entries with seqs first, first+step, ... due inside
// the writer's bucket, bodies of size body.
func appendN(t testing.TB, w *Writer, n int, first, step uint64, body int) []written {
	t.Helper()
	var out []written
	for i := range n {
		seq := first + uint64(i)*step
		p := message.AppendSchedule(nil, msg(w.Start()+int64(seq%1000), body, seq))
		off, err := w.Append(seq, p)
		if err != nil {
			t.Fatalf("Append(%d): %v", seq, err)
		}
		out = append(out, written{off, seq, p})
	}
	return out
}

// readAll iterates the segment at path and returns what it yields.
func readAll(t testing.TB, path string) ([]written, *Iterator) {
	t.Helper()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	defer r.Close()
	it := r.Iter()
	var out []written
	for it.Next() {
		if !bytes.Equal(message.AppendSchedule(nil, it.Message()), it.Payload()) {
			t.Fatalf("entry at %d: Message does not match Payload", it.Offset())
		}
		out = append(out, written{it.Offset(), it.Seq(), bytes.Clone(it.Payload())})
	}
	return out, it
}

func sameEntries(t testing.TB, got, want []written) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].off != want[i].off || got[i].seq != want[i].seq || !bytes.Equal(got[i].p, want[i].p) {
			t.Fatalf("entry %d: got off %d seq %d, want off %d seq %d (payload equal %v)",
				i, got[i].off, got[i].seq, want[i].off, want[i].seq, bytes.Equal(got[i].p, want[i].p))
		}
	}
}

func TestNameRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 30, 5, 17, 42, 123e6, time.UTC).UnixMilli()
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{"1s", time.Second, "20261130T051742Z.sched"},
		{"7s", 7 * time.Second, "20261130T051738Z.sched"},
		{"1m", time.Minute, "20261130T051700Z.sched"},
		{"1h", time.Hour, "20261130T050000Z.sched"},
		{"90m", 90 * time.Minute, "20261130T043000Z.sched"},
		{"24h", 24 * time.Hour, "20261130T000000Z.sched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := BucketStart(at, tt.d)
			if s > at || at-s >= tt.d.Milliseconds() || s%tt.d.Milliseconds() != 0 {
				t.Fatalf("BucketStart(%d, %v) = %d: not the bucket holding it", at, tt.d, s)
			}
			if got := Name(s); got != tt.want {
				t.Fatalf("Name = %q, want %q", got, tt.want)
			}
			back, ok := ParseName(tt.want)
			if !ok || back != s {
				t.Fatalf("ParseName(%q) = %d, %v; want %d", tt.want, back, ok, s)
			}
			// Lexical order of names is time order.
			if next := Name(s + tt.d.Milliseconds()); next <= tt.want {
				t.Fatalf("next bucket's name %q does not sort after %q", next, tt.want)
			}
		})
	}
}

func TestParseNameRejects(t *testing.T) {
	for _, name := range []string{
		"20261130T050000Z.sched.tmp", "20261130T050000Z.done", "20261130T050000Z",
		"2026113T050000Z.sched", "20261130T250000Z.sched", "20261130t050000z.sched",
		"20261130T050000+0100.sched", "x0261130T050000Z.sched", ".sched", "",
	} {
		if s, ok := ParseName(name); ok {
			t.Errorf("ParseName(%q) = %d, true; want false", name, s)
		}
	}
}

func TestBucketStartNegative(t *testing.T) {
	if got := BucketStart(-1, time.Second); got != -1000 {
		t.Fatalf("BucketStart(-1, 1s) = %d, want -1000", got)
	}
	if got := BucketStart(-1000, time.Second); got != -1000 {
		t.Fatalf("BucketStart(-1000, 1s) = %d, want -1000", got)
	}
}

func TestValidateDuration(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		ok   bool
	}{
		{"1s", time.Second, true},
		{"90s", 90 * time.Second, true},
		{"1h", time.Hour, true},
		{"24h", 24 * time.Hour, true},
		{"zero", 0, false},
		{"negative", -time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{"1500ms", 1500 * time.Millisecond, false},
		{"24h1s", 24*time.Hour + time.Second, false},
		{"48h", 48 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDuration(tt.d)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateDuration(%v) = %v, want ok %v", tt.d, err, tt.ok)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrBadDuration) || !strings.Contains(err.Error(), "whole number of seconds from 1s to 24h0m0s") {
				t.Fatalf("error %q does not say what is allowed", err)
			}
			if _, err := Create(t.TempDir(), start, tt.d, Options{}); !errors.Is(err, ErrBadDuration) {
				t.Fatalf("Create with %v: %v, want ErrBadDuration", tt.d, err)
			}
		})
	}
	if _, err := Create(t.TempDir(), start+500, time.Hour, Options{}); !errors.Is(err, ErrBadStart) {
		t.Fatalf("Create at a non-whole second: %v, want ErrBadStart", err)
	}
}

func TestMixedDurationsList(t *testing.T) {
	dir := t.TempDir()
	segs := []struct {
		start int64
		d     time.Duration
		n     int
	}{
		{start, time.Hour, 3},
		{start + 3600_000, time.Minute, 0},
		{start + 3660_000, time.Second, 2},
		{start - 86400_000, 24 * time.Hour, 1},
		{start + 7200_000, 7 * time.Second, 4},
	}
	for _, s := range segs {
		w, err := Create(dir, s.start, s.d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, w, s.n, 1, 1, 10)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, junk := range []string{Name(start+999_000) + ".tmp", DoneName(start), "notes.txt", "x.sched"} {
		if err := os.WriteFile(filepath.Join(dir, junk), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(segs, func(a, b struct {
		start int64
		d     time.Duration
		n     int
	}) int {
		return int(a.start/1000 - b.start/1000)
	})
	if len(got) != len(segs) {
		t.Fatalf("List returned %d segments, want %d: %+v", len(got), len(segs), got)
	}
	for i, s := range segs {
		g := got[i]
		fi, err := os.Stat(filepath.Join(dir, Name(s.start)))
		if err != nil {
			t.Fatal(err)
		}
		if g.Start != s.start || g.Duration != s.d || g.Name != Name(s.start) || g.Size != fi.Size() ||
			g.HintLen != fi.Size() || g.HintEntries != uint64(s.n) {
			t.Fatalf("segment %d: got %+v, want start %d duration %v %d entries size %d", i, g, s.start, s.d, s.n, fi.Size())
		}
	}
	if i, ok := Find(got, start+3660_500); !ok || got[i].Duration != time.Second {
		t.Fatalf("Find in the 1s segment: %d, %v", i, ok)
	}
	if _, ok := Find(got, start+3661_000); ok {
		t.Fatal("Find reported a segment for a gap")
	}
}

func TestPlace(t *testing.T) {
	h := int64(3600_000)
	segs := []SegmentInfo{
		{Start: start, Duration: time.Hour},                // old 1h segment [05:00, 06:00)
		{Start: start + h + 60_000, Duration: time.Minute}, // [06:01, 06:02)
		{Start: start + 2*h, Duration: 10 * time.Second},   // [07:00:00, 07:00:10)
	}
	tests := []struct {
		name     string
		at       int64
		d        time.Duration
		start    int64
		dur      time.Duration
		existing bool
	}{
		{"inside_old_1h", start + 1800_000, time.Minute, start, time.Hour, true},
		{"inside_1m", start + h + 61_000, time.Hour, start + h + 60_000, time.Minute, true},
		{"plain_new_bucket", start + 3*h + 5, time.Hour, start + 3*h, time.Hour, false},
		{"clipped_before_next", start + h + 30_000, time.Hour, start + h, time.Minute, false},
		{"clipped_after_prev", start + h + 150_000, time.Hour, start + h + 120_000, time.Hour - 2*time.Minute, false},
		{"clipped_after_10s_segment", start + 2*h + 15_000, time.Hour, start + 2*h + 10_000, time.Hour - 10*time.Second, false},
		{"clipped_both_sides", start + h + 30_000, 24 * time.Hour, start + h, time.Minute, false},
		{"before_all", start - 1, time.Minute, start - 60_000, time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, existing := Place(segs, tt.at, tt.d)
			if got.Start != tt.start || got.Duration != tt.dur || existing != tt.existing {
				t.Fatalf("Place = start %d (%s) duration %v existing %v; want start %d duration %v existing %v",
					got.Start, Name(got.Start), got.Duration, existing, tt.start, tt.dur, tt.existing)
			}
			if !got.Contains(tt.at) {
				t.Fatal("placed segment does not contain deliverAt")
			}
			if err := ValidateDuration(got.Duration); err != nil {
				t.Fatal(err)
			}
			for _, s := range segs {
				if !existing && got.Start < s.End() && s.Start < got.End() {
					t.Fatalf("new segment [%d, %d) overlaps [%d, %d)", got.Start, got.End(), s.Start, s.End())
				}
			}
		})
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 2, 1, 1, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DoneName(start)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second Remove finds nothing and succeeds
		if err := Remove(dir, start); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("files left after Remove: %v", ents)
	}
}

func TestCreateRemovesOrphanDone(t *testing.T) {
	dir := t.TempDir()
	orphan := filepath.Join(dir, DoneName(start))
	if err := os.WriteFile(orphan, []byte("left by an interrupted Remove"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Create(dir, start, time.Hour, quiet)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan dispatch log survived Create: %v", err)
	}
}

func TestRemoveTemp(t *testing.T) {
	dir := t.TempDir()
	names := []string{Name(start) + ".tmp", DoneName(start) + ".tmp", Name(start), "other.tmp"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTemp(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{DoneName(start) + ".tmp", Name(start) + ".tmp"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, n := range []string{Name(start), "other.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("%s was removed: %v", n, err)
		}
	}
}

// TestPlaceFormatDocExample checks the mixed-duration table in
// docs/FORMAT.md.
func TestPlaceFormatDocExample(t *testing.T) {
	at := func(hhmm string) int64 {
		tm, err := time.Parse("2006-01-02 15:04", "2026-11-30 "+hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	old := []SegmentInfo{
		{Start: at("05:00"), Duration: time.Hour},
		{Start: at("06:00"), Duration: time.Hour},
	}
	withNew := append(slices.Clone(old), SegmentInfo{Start: at("07:30"), Duration: 90 * time.Minute})
	tests := []struct {
		name   string
		segs   []SegmentInfo
		due    string
		file   string
		dur    time.Duration
		exists bool
	}{
		{"covered_0550", old, "05:50", "20261130T050000Z.sched", time.Hour, true},
		{"covered_0659", old, "06:59", "20261130T060000Z.sched", time.Hour, true},
		{"new_0740", old, "07:40", "20261130T073000Z.sched", 90 * time.Minute, false},
		{"clipped_0710", old, "07:10", "20261130T070000Z.sched", 30 * time.Minute, false},
		{"clipped_0710_next_exists", withNew, "07:10", "20261130T070000Z.sched", 30 * time.Minute, false},
		{"clipped_0445", old, "04:45", "20261130T043000Z.sched", 30 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seg, exists := Place(tt.segs, at(tt.due), 90*time.Minute)
			if Name(seg.Start) != tt.file || seg.Duration != tt.dur || exists != tt.exists {
				t.Fatalf("Place(%s) = %s %v exists %v; want %s %v exists %v",
					tt.due, Name(seg.Start), seg.Duration, exists, tt.file, tt.dur, tt.exists)
			}
		})
	}
}

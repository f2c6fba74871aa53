package dispatchlog

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// start is 2026-11-30T05:00:00Z, the bucket most tests use.
var start = time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC).UnixMilli()

const hour = time.Hour

// quiet keeps the expected torn-tail warnings out of the test output.
var quiet = Options{Logger: slog.New(slog.DiscardHandler)}

func openLog(t testing.TB, dir string, opts Options) (*Writer, segfile.Recovery) {
	t.Helper()
	w, rec, err := Open(dir, start, time.Hour, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, rec
}

// flush hands buffered records to the OS without an fsync, as a crash
// between a write and its fsync would find them.
func flush(t testing.TB, w *Writer) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.sf.Flush(); err != nil {
		t.Fatal(err)
	}
}

// dones returns n done-records with seqs first, first+step, ... and
// reasons in rotation.
func dones(n int, first, step uint64) []Done {
	out := make([]Done, n)
	for i := range out {
		out[i] = Done{Seq: first + uint64(i)*step, Reason: Reason(i%3 + 1)}
	}
	return out
}

// expect returns the set and counts Load should return for recs.
func expect(recs []Done) ([]uint64, Counts) {
	var seqs []uint64
	var c Counts
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
		c.add(r.Reason)
	}
	slices.Sort(seqs)
	return slices.Compact(seqs), c
}

func checkLoad(t testing.TB, path string, recs []Done) {
	t.Helper()
	set, c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	seqs, wantC := expect(recs)
	if got := slices.Collect(set.Seqs()); !slices.Equal(got, seqs) || set.Len() != len(seqs) {
		t.Fatalf("Load: %d seqs (Len %d), want %d", len(got), set.Len(), len(seqs))
	}
	if c != wantC {
		t.Fatalf("Load counts %+v, want %+v", c, wantC)
	}
}

func TestAppendLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]Done, 5000)
	for i := range random {
		random[i] = Done{Seq: rng.Uint64N(3000), Reason: Reason(rng.IntN(3) + 1)}
	}
	tests := []struct {
		name  string
		calls [][]Done // one Append per element
	}{
		{"nothing", nil},
		{"one_per_reason", [][]Done{{{1, Delivered}}, {{2, Cancelled}}, {{3, DeadLettered}}}},
		{"duplicate_seq", [][]Done{{{7, Delivered}}, {{7, Delivered}, {7, Cancelled}}}},
		{"batch", [][]Done{dones(1000, 1, 1)}},
		{"unsorted_random_with_dups", [][]Done{random[:1000], random[1000:]}},
		{"max_seq", [][]Done{{{0, Delivered}, {MaxSeq, Cancelled}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := openLog(t, dir, Options{bufferSize: 512})
			var all []Done
			for _, recs := range tt.calls {
				if err := w.Append(recs...); err != nil {
					t.Fatal(err)
				}
				all = append(all, recs...)
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, w.Path(), all)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopen after a clean close: nothing to scan, all still there,
			// and the log takes more.
			w, rec := openLog(t, dir, Options{})
			if rec.Truncated || rec.Scanned != 0 || !rec.HintValid {
				t.Fatalf("clean reopen: %+v", rec)
			}
			more := dones(3, 5000, 1)
			if err := w.AppendSync(more...); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, w.Path(), append(all, more...))
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if probs, err := Verify(w.Path()); err != nil || len(probs) != 0 {
				t.Fatalf("Verify = %v, %v", probs, err)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	set, c, err := Load(filepath.Join(t.TempDir(), Name(start)))
	if err != nil || set.Len() != 0 || set.Contains(0) || c.Total() != 0 {
		t.Fatalf("Load of a missing file = %d seqs, %+v, %v", set.Len(), c, err)
	}
}

func TestAppendRejects(t *testing.T) {
	w, _ := openLog(t, t.TempDir(), Options{})
	tests := []struct {
		name string
		recs []Done
		want error
	}{
		{"reason_zero", []Done{{1, 0}}, ErrBadReason},
		{"reason_7", []Done{{1, 7}}, ErrBadReason},
		{"marker_with_seq", []Done{{1, Lost}}, ErrBadReason},
		{"seq_too_large", []Done{{MaxSeq + 1, Delivered}}, ErrBadReason},
		{"bad_reason_in_batch", []Done{{1, Delivered}, {2, 200}}, ErrBadReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := w.Append(tt.recs...); !errors.Is(err, tt.want) {
				t.Fatalf("Append = %v, want %v", err, tt.want)
			}
			if err := w.AppendSync(tt.recs...); !errors.Is(err, tt.want) {
				t.Fatalf("AppendSync = %v, want %v", err, tt.want)
			}
		})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if set, _, err := Load(w.Path()); err != nil || set.Len() != 0 {
		t.Fatalf("rejected records were written: %d, %v", set.Len(), err)
	}
	for name, err := range map[string]error{
		"Append":     w.Append(Done{1, Delivered}),
		"AppendSync": w.AppendSync(Done{1, Delivered}),
		"Sync":       w.Sync(),
		"Close":      w.Close(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestOpenChecksBucket(t *testing.T) {
	dir := t.TempDir()
	w, _ := openLog(t, dir, Options{})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		start int64
		d     time.Duration
		want  error
		says  string
	}{
		{"other_duration", start, time.Minute, ErrMismatch, "holds bucket"},
		{"zero_duration", start, 0, ErrBadBucket, "whole number of seconds from 1s to 24h"},
		{"fractional_duration", start, 1500 * time.Millisecond, ErrBadBucket, "whole number of seconds"},
		{"too_long", start, 25 * time.Hour, ErrBadBucket, "to 24h"},
		{"fractional_start", start + 1, time.Hour, ErrBadBucket, "whole second"},
		{"negative_start", -1000, time.Hour, ErrBadBucket, "from 1970"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Open(dir, tt.start, tt.d, Options{})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Open = %v, want %v saying %q", err, tt.want, tt.says)
			}
		})
	}
	if _, _, err := Open(filepath.Join(dir, "missing"), start, time.Hour, Options{}); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestNames(t *testing.T) {
	if got := Name(start); got != "20261130T050000Z.done" {
		t.Fatalf("Name = %q", got)
	}
	for _, s := range []int64{0, start, start + 1000, 253402300799000} {
		if got, ok := ParseName(Name(s)); !ok || got != s {
			t.Fatalf("ParseName(Name(%d)) = %d, %v", s, got, ok)
		}
	}
	for _, n := range []string{"20261130T050000Z.sched", "20261130T050000Z.done.tmp", "x.done"} {
		if _, ok := ParseName(n); ok {
			t.Fatalf("ParseName(%q) accepted", n)
		}
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		Delivered: "delivered", Cancelled: "cancelled", DeadLettered: "dead-lettered", 0: "reason(0)", 9: "reason(9)",
	} {
		if r.String() != want || r.Valid() != (r >= 1 && r <= 3) {
			t.Errorf("Reason(%d): %q valid %v", uint8(r), r.String(), r.Valid())
		}
	}
}

func TestStickyError(t *testing.T) {
	boom := errors.New("injected fsync failure")
	var fail bool // only this goroutine calls the writer
	opts := Options{SyncFile: func(f *os.File) error {
		if fail {
			return boom
		}
		return f.Sync()
	}}
	w, _ := openLog(t, t.TempDir(), opts)
	if err := w.AppendSync(dones(3, 1, 1)...); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := w.AppendSync(Done{10, Delivered}); !errors.Is(err, boom) {
		t.Fatalf("AppendSync = %v, want the injected error", err)
	}
	fail = false // an fsync is never retried: the error stays
	for name, err := range map[string]error{
		"Append":     w.Append(Done{11, Delivered}),
		"AppendSync": w.AppendSync(Done{12, Delivered}),
		"Sync":       w.Sync(),
		"Close":      w.Close(),
	} {
		if !errors.Is(err, boom) {
			t.Errorf("%s after a failed fsync = %v, want the sticky error", name, err)
		}
	}
	// What was synced before the failure is there; reopening recovers.
	w, _ = openLog(t, filepath.Dir(w.Path()), quiet)
	defer w.Close()
	set, _, err := Load(w.Path())
	if err != nil || !set.Contains(1) || !set.Contains(3) {
		t.Fatalf("after reopen: %v", err)
	}
}

// Header fields are those of package segfile; check that a dispatch log is
// not mistaken for a schedule segment and vice versa.
func TestMagic(t *testing.T) {
	dir := t.TempDir()
	w, _ := openLog(t, dir, Options{})
	w.Close()
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := segfile.DecodeHeader(b, [8]byte{'H', 'G', 'S', 'C', 'H', 'E', 'D', 0}); !errors.Is(err, segfile.ErrBadMagic) {
		t.Fatalf("a dispatch log decodes as a schedule segment: %v", err)
	}
}

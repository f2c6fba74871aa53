package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// damageLog writes 200 records over several segments and returns the
// directory, the records' offsets, the segment names and the log's end.
func damageLog(t *testing.T) (dir string, offs []int64, segs []string, end int64) {
	t.Helper()
	dir = t.TempDir()
	l := openTest(t, dir, SyncNone)
	offs = appendN(t, l, 0, 200)
	end = l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		segs = append(segs, e.Name())
	}
	if len(segs) < 3 {
		t.Fatalf("want 3+ segments, got %v", segs)
	}
	return dir, offs, segs, end
}

// activeOf returns the name of the segment holding offset off.
func activeOf(segs []string, off int64) string {
	name := segs[0]
	for _, s := range segs {
		if b, _ := parseSegmentName(s); b <= off {
			name = s
		}
	}
	return name
}

func TestTornOrDamaged(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage changes dir and returns MinEnd and the offsets it lost.
		damage func(t *testing.T, dir string, offs []int64, segs []string, end int64) (minEnd int64, lost []int64)
		// open is the error Open returns: nil, ErrDamaged or ErrMissingSegment.
		open      error
		truncated bool
	}{
		{name: "torn_last_record", truncated: true, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			last := offs[len(offs)-1]
			seg := activeOf(segs, last)
			base, _ := parseSegmentName(seg)
			zeroFrom(t, filepath.Join(dir, seg), headerSize+last-base+5)
			return last, offs[len(offs)-1:]
		}},
		{name: "zero_tail", damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			last := offs[len(offs)-3]
			seg := activeOf(segs, last)
			base, _ := parseSegmentName(seg)
			zeroFrom(t, filepath.Join(dir, seg), headerSize+last-base)
			return 0, offs[len(offs)-3:]
		}},
		{name: "flip_with_valid_after", open: ErrDamaged, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			seg := activeOf(segs, end-1)
			base, _ := parseSegmentName(seg)
			i := slices.IndexFunc(offs, func(o int64) bool { return o >= base })
			flipByte(t, filepath.Join(dir, seg), headerSize+offs[i+1]-base+10)
			return offs[i+3], offs[i+1 : i+2]
		}},
		{name: "end_below_min_end", open: ErrDamaged, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			last := offs[len(offs)-3]
			seg := activeOf(segs, last)
			base, _ := parseSegmentName(seg)
			zeroFrom(t, filepath.Join(dir, seg), headerSize+last-base)
			return end, offs[len(offs)-3:]
		}},
		{name: "deleted_active_segment", open: ErrMissingSegment, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			seg := activeOf(segs, end-1)
			base, _ := parseSegmentName(seg)
			for _, s := range segs {
				if b, _ := parseSegmentName(s); b >= base {
					os.Remove(filepath.Join(dir, s))
				}
			}
			var lost []int64
			for _, o := range offs {
				if o >= base {
					lost = append(lost, o)
				}
			}
			return end - 20, lost // a checkpoint inside the deleted segment
		}},
		{name: "no_segments", open: ErrMissingSegment, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			for _, s := range segs {
				os.Remove(filepath.Join(dir, s))
			}
			return end, offs
		}},
		{name: "gap", open: ErrMissingSegment, damage: func(t *testing.T, dir string, offs []int64, segs []string, end int64) (int64, []int64) {
			os.Remove(filepath.Join(dir, segs[1]))
			b1, _ := parseSegmentName(segs[1])
			b2, _ := parseSegmentName(segs[2])
			var lost []int64
			for _, o := range offs {
				if o >= b1 && o < b2 {
					lost = append(lost, o)
				}
			}
			return end, lost
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, offs, segs, end := damageLog(t)
			minEnd, lost := tc.damage(t, dir, offs, segs, end)
			before := snapshot(t, dir)
			l, rec, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncNone, MinEnd: minEnd})
			if tc.open == nil {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				if rec.Truncated != tc.truncated {
					t.Fatalf("Truncated = %v, want %v (%+v)", rec.Truncated, tc.truncated, rec)
				}
				checkSurvivors(t, l, offs, lost)
				l.Close()
				return
			}
			if !errors.Is(err, tc.open) {
				t.Fatalf("open error = %v, want %v", err, tc.open)
			}
			var ce *segfile.CorruptionError
			if !errors.As(err, &ce) || ce.Path == "" {
				t.Fatalf("open error = %#v, want a CorruptionError naming the file", err)
			}
			if after := snapshot(t, dir); !equalSnap(before, after) {
				t.Fatal("Open changed the files of a damaged log")
			}
			var kept []string
			fixes, err := Repair(dir, RepairOptions{MinEnd: minEnd, DryRun: true})
			if err != nil || len(fixes) == 0 {
				t.Fatalf("dry run: %v, %v", fixes, err)
			}
			if after := snapshot(t, dir); !equalSnap(before, after) {
				t.Fatal("a dry run changed files")
			}
			fixes, err = Repair(dir, RepairOptions{MinEnd: minEnd, Keep: func(p string) error { kept = append(kept, p); return nil }})
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			for _, f := range fixes {
				if f.Kind != FixRecreateSegment && f.Kind != FixTornTail && !slices.Contains(kept, f.File) {
					t.Fatalf("repair changed %s without Keep", f.File)
				}
			}
			l, _, err = Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncNone, MinEnd: minEnd})
			if err != nil {
				t.Fatalf("open after repair %v: %v", fixes, err)
			}
			defer l.Close()
			checkSurvivors(t, l, offs, lost)
			if l.EndOffset() < minEnd {
				t.Fatalf("end %d after repair is below MinEnd %d", l.EndOffset(), minEnd)
			}
			o, err := l.Append(nil, Record{Type: 1, Payload: []byte("new")})
			if err != nil {
				t.Fatal(err)
			}
			if o[0] < offs[len(offs)-1]+1 {
				t.Fatalf("new record at offset %d reuses an offset below the old end %d", o[0], end)
			}
			if probs, _, err := Verify(dir, nil); err != nil || len(probs) != 0 {
				t.Fatalf("verify after repair: %v %v", probs, err)
			}
		})
	}
}

// checkSurvivors checks that l holds exactly the records of offs (record
// i has payload(i)) but those at the offsets in lost.
func checkSurvivors(t *testing.T, l *Log, offs, lost []int64) {
	t.Helper()
	got, ps, err := readAll(t, l, l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, o := range offs {
		if !slices.Contains(lost, o) {
			want = append(want, o)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %d records, want %d (all but %d lost)", len(got), len(want), len(lost))
	}
	for i, o := range got {
		if j := slices.Index(offs, o); !bytes.Equal(ps[i], payload(j)) {
			t.Fatalf("record at offset %d: payload differs", o)
		}
	}
}

func zeroFrom(t *testing.T, path string, pos int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[pos:])
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func equalSnap(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestSkipRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		span int
	}{{"overhead_only", record.Overhead}, {"short", record.Overhead + 5}, {"with_span", SkipRecordSize}, {"long", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xAB}, tc.span+16)
			if _, err := PutSkip(buf[:tc.span]); err != nil {
				t.Fatal(err)
			}
			_, n, skip, err := decodeSpan(buf)
			if err != nil || !skip || n != tc.span {
				t.Fatalf("decodeSpan = %d, %v, %v; want span %d", n, skip, err, tc.span)
			}
		})
	}
	if _, err := PutSkip(make([]byte, record.Overhead-1)); err == nil {
		t.Fatal("PutSkip into 15 bytes succeeded")
	}
	l := openTest(t, t.TempDir(), SyncNone)
	defer l.Close()
	if _, err := l.Append(nil, Record{Type: TypeSkip}); err == nil {
		t.Fatal("Append of a skip record succeeded")
	}
}

// FuzzScanTail checks the recovery decision on arbitrary segment data: it
// never panics, its end is a chain of valid records, a torn tail has no
// valid record after its start, and damage names a valid next record.
func FuzzScanTail(f *testing.F) {
	rec := func(p string) []byte {
		b := make([]byte, record.Size(len(p)))
		record.Encode(b, 1, 0, []byte(p))
		return b
	}
	two := append(rec("first"), rec("second")...)
	f.Add(two, int64(0))
	f.Add(append(append(rec("a"), 1, 2, 3), rec("b")...), int64(0))
	f.Add(append(rec("a"), make([]byte, 64)...), int64(100))
	torn := rec("torn record")
	f.Add(append(rec("a"), torn[:10]...), int64(0))
	skip := make([]byte, 64)
	PutSkip(skip)
	f.Add(append(skip, rec("after a skip")...), int64(64))
	short := make([]byte, 20)
	PutSkip(short)
	f.Add(append(short, 9, 9, 9), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, minEnd int64) {
		if len(data) > 1<<16 {
			return
		}
		sc := scanTail(data, 0, minEnd, int64(len(data)))
		if sc.end < 0 || sc.end > int64(len(data)) {
			t.Fatalf("end %d outside %d bytes", sc.end, len(data))
		}
		var pos int64
		for range sc.records {
			_, n, _, err := decodeSpan(data[pos:])
			if err != nil {
				t.Fatalf("record before end does not decode at %d: %v", pos, err)
			}
			pos += int64(n)
		}
		if pos != sc.end {
			t.Fatalf("records end at %d, scan says %d", pos, sc.end)
		}
		switch sc.kind {
		case tailClean:
			if nonZeroExtent(data[sc.end:]) != 0 || sc.end < minEnd {
				t.Fatal("clean with junk after the end, or below minEnd")
			}
		case tailTorn:
			if findRecord(data[sc.end:], 1) >= 0 || sc.end < minEnd {
				t.Fatal("torn with a valid record after it, or below minEnd")
			}
		case tailDamaged:
			if sc.next >= 0 {
				if _, _, _, err := decodeSpan(data[sc.next:]); err != nil {
					t.Fatalf("damage names next record at %d that does not decode: %v", sc.next, err)
				}
			} else if sc.end >= minEnd {
				t.Fatal("damaged without a next record and not below minEnd")
			}
		}
	})
}

// TestRepairSealed: a damaged record in a sealed segment (which Open does
// not scan, and readers refuse) is covered by a skip record: readers then
// read every other record, at its old offset.
func TestRepairSealed(t *testing.T) {
	dir, offs, segs, _ := damageLog(t)
	flipByte(t, filepath.Join(dir, segs[0]), headerSize+offs[2]+9)
	fixes, err := Repair(dir, RepairOptions{Keep: func(string) error { return nil }})
	if err != nil || len(fixes) != 1 || fixes[0].Kind != FixSkipDamage || fixes[0].From != offs[2] || fixes[0].To != offs[3] || fixes[0].Records != 1 {
		t.Fatalf("Repair = %v, %v; want one skip over offsets %d..%d", fixes, err, offs[2], offs[3])
	}
	l, _, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkSurvivors(t, l, offs, offs[2:3])
}

// TestPadToMinEnd: with PadToMinEnd a log whose records below MinEnd were
// lost (a power loss under a relaxed fsync policy) opens, keeps every
// record before the loss at its offset, and appends after MinEnd, never
// at an offset below it; one valid record after the loss is still damage.
func TestPadToMinEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  int64 // MinEnd beyond the last lost record's start
		damage bool  // a valid record survives after the cut
	}{
		{name: "lost_tail", extra: 1},
		{name: "lost_tail_min_end_at_end", extra: 0},
		{name: "valid_record_after_the_cut", extra: 1, damage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, offs, segs, end := damageLog(t)
			cut := offs[len(offs)-3]
			seg := activeOf(segs, cut)
			base, _ := parseSegmentName(seg)
			path := filepath.Join(dir, seg)
			minEnd := offs[len(offs)-1] + tc.extra
			if tc.extra == 0 {
				minEnd = end
			}
			if tc.damage {
				flipByte(t, path, headerSize+cut-base+10) // the last two stay valid
			} else {
				zeroFrom(t, path, headerSize+cut-base)
			}
			l, _, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncInterval, MinEnd: minEnd, PadToMinEnd: true})
			if tc.damage {
				if !errors.Is(err, ErrDamaged) {
					t.Fatalf("Open = %v, want ErrDamaged: a valid record after the cut is damage", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer l.Close()
			if l.EndOffset() < minEnd {
				t.Fatalf("end %d is below MinEnd %d", l.EndOffset(), minEnd)
			}
			checkSurvivors(t, l, offs, offs[len(offs)-3:])
			got, err := l.Append(nil, Record{Type: 1, Payload: []byte("after")})
			if err != nil {
				t.Fatal(err)
			}
			if got[0] < minEnd {
				t.Fatalf("a new record got offset %d, below MinEnd %d: an offset another file names is used twice", got[0], minEnd)
			}
		})
	}
}

// TestIteratorDamageAndSkips: an iterator stops on a damaged record of a
// sealed segment with ErrDamaged naming the file and the span that cannot
// be read (up to the next valid record); once repair has covered it,
// Skipped names the span of the skip record it stepped over, and Verify
// lists it too.
func TestIteratorDamageAndSkips(t *testing.T) {
	dir, offs, segs, _ := damageLog(t)
	flipByte(t, filepath.Join(dir, segs[0]), headerSize+offs[2]+9)
	l, _, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncNone, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
	}
	var ce *segfile.CorruptionError
	want := fmt.Sprintf("offsets %d..%d (%d bytes) cannot be read and valid records follow at offset %d", offs[2], offs[3], offs[3]-offs[2], offs[3])
	if err := it.Err(); !errors.Is(err, ErrDamaged) || !errors.As(err, &ce) || ce.Path != filepath.Join(dir, segs[0]) || !strings.Contains(err.Error(), want) {
		t.Fatalf("iterator error %v; want ErrDamaged in %s saying %q", err, segs[0], want)
	}
	it.Close()
	l.Close()

	if _, err := Repair(dir, RepairOptions{Keep: func(string) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	l, _, err = Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncNone, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	it, err = l.NewIterator(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var skipped []Span
	for it.Next() {
		skipped = append(skipped, it.Skipped()...)
		if it.Offset() == offs[3] && len(it.Skipped()) != 1 {
			t.Errorf("the Next that reached offset %d skipped %v", offs[3], it.Skipped())
		}
	}
	if it.Err() != nil || !slices.Equal(skipped, []Span{{offs[2], offs[3]}}) {
		t.Fatalf("skipped %v, err %v; want [{%d %d}]", skipped, it.Err(), offs[2], offs[3])
	}
	_, st, err := Verify(dir, nil)
	if err != nil || !slices.Equal(st.Skipped, skipped) {
		t.Fatalf("Verify skipped %v, %v; want %v", st.Skipped, err, skipped)
	}
}

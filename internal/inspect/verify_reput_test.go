package inspect

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// The formats of docs/FORMAT.md ("Reput checkpoint", "Retired log"),
// written by hand: verify must read what the document says.
func checkpointV2(pos int64, retired uint64) []byte {
	b := make([]byte, 32)
	copy(b, "HGRP")
	binary.LittleEndian.PutUint16(b[4:], 2)
	binary.LittleEndian.PutUint64(b[8:], uint64(pos))
	binary.LittleEndian.PutUint64(b[16:], retired)
	binary.LittleEndian.PutUint64(b[24:], xxhash.Sum64(b[:24]))
	return b
}

func retiredLog(recs ...[4]int64) []byte {
	b := make([]byte, 24)
	copy(b, "HGRT")
	binary.LittleEndian.PutUint16(b[4:], 1)
	binary.LittleEndian.PutUint64(b[16:], xxhash.Sum64(b[:16]))
	for _, r := range recs {
		var p [32]byte
		for i, v := range r {
			binary.LittleEndian.PutUint64(p[8*i:], uint64(v))
		}
		rec := make([]byte, record.Size(32))
		record.Encode(rec, 0x52, 0, p[:])
		b = append(b, rec...)
	}
	return b
}

func TestVerifyReputFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, sched string, ckpt int64)
		file   string // relative to the schedule directory; "*.sched": the segment
		kind   Kind
		detail string
	}{
		{"checkpoint_deleted", func(t *testing.T, d string, _ int64) { os.Remove(filepath.Join(d, "reput.checkpoint")) },
			"reput.checkpoint", Missing, "resumes from the retired log"},
		{"checkpoint_damaged", func(t *testing.T, d string, _ int64) { flip(t, filepath.Join(d, "reput.checkpoint"), 10) },
			"reput.checkpoint", Corruption, "damaged checkpoint"},
		{"both_deleted", func(t *testing.T, d string, _ int64) {
			os.Remove(filepath.Join(d, "reput.checkpoint"))
			os.Remove(filepath.Join(d, "reput.retired"))
		}, "reput.checkpoint", Missing, "refuses to start"},
		{"retired_deleted_after_retirements", func(t *testing.T, d string, ck int64) {
			os.Remove(filepath.Join(d, "reput.retired"))
			os.WriteFile(filepath.Join(d, "reput.checkpoint"), checkpointV2(ck, 3), 0o644)
		}, "reput.retired", Missing, "counts 3 retired buckets"},
		{"retired_damaged", func(t *testing.T, d string, _ int64) { flip(t, filepath.Join(d, "reput.retired"), 9) },
			"reput.retired", Corruption, "hourglass repair"},
		{"retired_short", func(t *testing.T, d string, ck int64) {
			os.WriteFile(filepath.Join(d, "reput.checkpoint"), checkpointV2(ck, 2), 0o644)
		}, "reput.retired", Corruption, "checkpoint counted 2"},
		{"retired_bucket_reappears", func(t *testing.T, d string, ck int64) {
			segs, _ := schedulelog.List(d)
			s := segs[0]
			os.WriteFile(filepath.Join(d, "reput.retired"),
				retiredLog([4]int64{s.Start, s.Duration.Milliseconds(), math.MaxInt32, math.MaxInt32}), 0o644)
			os.WriteFile(filepath.Join(d, "reput.checkpoint"), checkpointV2(ck, 1), 0o644)
		}, "*.sched", Corruption, "delivered a second time"},
		{"header_names_another_bucket", func(t *testing.T, d string, _ int64) {
			segs, _ := schedulelog.List(d)
			s := segs[0]
			os.Rename(filepath.Join(d, s.Name), filepath.Join(d, schedulelog.Name(s.Start+7*24*3600_000)))
			os.Remove(filepath.Join(d, schedulelog.DoneName(s.Start)))
		}, "*.sched", Corruption, "does not match the file name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, ckpt, _ := routedDir(t, 200)
			sched := filepath.Join(dir, ScheduleDir)
			r, err := Verify(Options{Dir: dir, Now: time.Now()})
			if err != nil || !r.Clean() {
				t.Fatalf("before the damage: %v %v", r.Problems, err)
			}
			tc.damage(t, sched, ckpt)
			r, err = Verify(Options{Dir: dir, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range r.Problems {
				name := strings.TrimPrefix(p.File, ScheduleDir+"/")
				match := name == tc.file || tc.file == "*.sched" && strings.HasSuffix(name, ".sched")
				if match && p.Kind == tc.kind && strings.Contains(p.Detail, tc.detail) {
					return
				}
			}
			t.Fatalf("verify found %v; want a %s problem in %s saying %q", r.Problems, tc.kind, tc.file, tc.detail)
		})
	}
}

func flip(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

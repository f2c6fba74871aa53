package dispatchlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/tdmanifest"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

func readManifest(t *testing.T) tdmanifest.Manifest {
	t.Helper()
	m, err := tdmanifest.Load(tdmanifest.Path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTestdataHealthy: the dispatch logs of testdata/healthy hold exactly
// the deliveries and the cancel the manifest lists.
func TestTestdataHealthy(t *testing.T) {
	man := readManifest(t)
	want := map[string]map[uint64]Reason{}
	for _, m := range man.Messages {
		id, err := message.ParseID(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := map[string]Reason{"delivered": Delivered, "cancelled": Cancelled}[m.State]
		if r == 0 {
			continue
		}
		name := m.Bucket[:len(m.Bucket)-len(".sched")] + Suffix
		if want[name] == nil {
			want[name] = map[uint64]Reason{}
		}
		want[name][id.Seq] = r
	}
	if len(want) != 2 {
		t.Fatalf("the manifest has done messages in %d buckets; the testdata has 2 dispatch logs", len(want))
	}
	for name, seqs := range want {
		recs, err := Records(filepath.Join("../testdata/healthy/schedule", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != len(seqs) {
			t.Errorf("%s: %d records, want %d", name, len(recs), len(seqs))
		}
		for _, d := range recs {
			if seqs[d.Seq] != d.Reason {
				t.Errorf("%s: seq %d %v, the manifest says %v", name, d.Seq, d.Reason, seqs[d.Seq])
			}
		}
	}
}

// TestTestdataBitflip: the flipped bit in testdata/done-bitflip is
// corruption at the record the generator damaged, for Load and Verify.
// Open for append trusts the synced part without reading it, so it
// succeeds and changes no record; Load still refuses the log afterwards.
func TestTestdataBitflip(t *testing.T) {
	d := readManifest(t).Damage["done-bitflip"]
	src := filepath.Join("../testdata/done-bitflip", d.File)
	var ce *segfile.CorruptionError
	if _, _, err := Load(src); !errors.As(err, &ce) || ce.Offset != d.Offset {
		t.Fatalf("Load: %v; want a segfile.CorruptionError at %d", err, d.Offset)
	}
	if probs, err := Verify(src); err != nil || len(probs) != 1 || probs[0].Kind != segfile.Corrupt || probs[0].Offset != d.Offset {
		t.Fatalf("Verify = %v, %v; want one corruption at %d", probs, err, d.Offset)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Dir(src))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(src))
	before, _ := os.ReadFile(path)
	start, _ := ParseName(filepath.Base(src))
	w, _, err := Open(dir, start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before[104:], after[104:]) {
		t.Fatal("Open changed the records of the log")
	}
	if _, _, err := Load(path); !errors.As(err, &ce) || ce.Offset != d.Offset {
		t.Fatalf("Load after Open: %v; want the segfile.CorruptionError at %d still", err, d.Offset)
	}
}

package reput

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestReadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadCheckpoint(dir); ok || err != nil {
		t.Fatalf("no checkpoint: ok %v, err %v; want neither", ok, err)
	}
	if err := writeCheckpoint(dir, 4242); err != nil {
		t.Fatal(err)
	}
	if pos, ok, err := ReadCheckpoint(dir); pos != 4242 || !ok || err != nil {
		t.Fatalf("ReadCheckpoint = %d, %v, %v; want 4242, true, nil", pos, ok, err)
	}
	b := encodeCheckpoint(4242)
	b[9] ^= 1
	if err := os.WriteFile(filepath.Join(dir, CheckpointName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadCheckpoint(dir); err == nil {
		t.Fatal("a flipped bit in the checkpoint was not reported")
	}
}

// FuzzDecodeCheckpoint: the checkpoint decoder never panics, never returns a
// negative position, and accepts only what encodeCheckpoint writes.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(0))
	f.Add(encodeCheckpoint(1 << 40))
	f.Add(encodeCheckpoint(7)[:23])
	f.Add([]byte("HGRP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pos, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if pos < 0 {
			t.Fatalf("accepted negative position %d", pos)
		}
		if !bytes.Equal(encodeCheckpoint(pos), b) {
			t.Fatal("accepted bytes that encodeCheckpoint does not write")
		}
	})
}

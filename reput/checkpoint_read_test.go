package reput

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestReadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadCheckpoint(dir); ok || err != nil {
		t.Fatalf("no checkpoint: ok %v, err %v; want neither", ok, err)
	}
	if err := writeCheckpoint(dir, 4242, 7); err != nil {
		t.Fatal(err)
	}
	if pos, ok, err := ReadCheckpoint(dir); pos != 4242 || !ok || err != nil {
		t.Fatalf("ReadCheckpoint = %d, %v, %v; want 4242, true, nil", pos, ok, err)
	}
	if c, ok, err := ReadCheckpointInfo(dir); c != (CheckpointInfo{Position: 4242, Retired: 7, Version: 2}) || !ok || err != nil {
		t.Fatalf("ReadCheckpointInfo = %+v, %v, %v", c, ok, err)
	}
	for name, b := range map[string][]byte{
		"flipped_position": func() []byte { b := encodeCheckpoint(4242, 7); b[9] ^= 1; return b }(),
		"flipped_retired":  func() []byte { b := encodeCheckpoint(4242, 7); b[17] ^= 1; return b }(),
		"truncated":        encodeCheckpoint(4242, 7)[:30],
		"empty":            {},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, CheckpointName), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ReadCheckpoint(dir); err == nil {
				t.Fatal("a damaged checkpoint was not reported")
			}
		})
	}
}

// encodeCheckpointV1 writes what builds before the retired log wrote.
func encodeCheckpointV1(pos int64) []byte {
	b := make([]byte, checkpointV1Size)
	copy(b[0:4], checkpointMagic)
	binary.LittleEndian.PutUint16(b[4:6], checkpointVersionV1)
	binary.LittleEndian.PutUint64(b[8:16], uint64(pos))
	binary.LittleEndian.PutUint64(b[16:24], xxhash.Sum64(b[0:16]))
	return b
}

func TestReadCheckpointV1(t *testing.T) {
	c, err := decodeCheckpoint(encodeCheckpointV1(99))
	if err != nil || c != (ckpt{pos: 99, version: 1}) {
		t.Fatalf("version 1: %+v, %v", c, err)
	}
}

// FuzzDecodeCheckpoint: the checkpoint decoder never panics, never returns a
// negative position, and accepts only what encodeCheckpoint (or a version 1
// writer) writes.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(0, 0))
	f.Add(encodeCheckpoint(1<<40, 12))
	f.Add(encodeCheckpoint(7, 1)[:31])
	f.Add(encodeCheckpointV1(7))
	f.Add([]byte("HGRP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if c.pos < 0 {
			t.Fatalf("accepted negative position %d", c.pos)
		}
		want := encodeCheckpoint(c.pos, c.retired)
		if c.version == 1 {
			want = encodeCheckpointV1(c.pos)
		}
		if !bytes.Equal(want, b) {
			t.Fatal("accepted bytes that no writer writes")
		}
	})
}

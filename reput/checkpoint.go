package reput

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"github.com/hourglassmq/hourglass/segfile"
)

// Checkpoint file constants. They are part of the on-disk format and must
// not change without a new checkpointVersion.
//
//	version 2, 32 bytes:
//	0        4         6        8              16            24        32
//	+--------+---------+--------+--------------+-------------+---------+
//	| "HGRP" | ver u16 | 0 u16  | position u64 | retired u64 | xxh64   |
//	+--------+---------+--------+--------------+-------------+---------+
//
//	version 1 (read, never written), 24 bytes:
//	| "HGRP" | ver u16 | 0 u16  | position u64 | xxh64 |
//
// The position is a commitlog offset: every record below it is durably in
// the schedule segments (or, for cancels, the dispatch logs). retired is
// the number of retirements the retired log held when the checkpoint was
// written (see retired.go), so that a retired log that lost records is
// detected. The checksum covers every byte before it.
const (
	checkpointName      = "reput.checkpoint"
	checkpointMagic     = "HGRP"
	checkpointVersion   = 2
	checkpointSize      = 32
	checkpointV1Size    = 24
	checkpointVersionV1 = 1
)

var errBadCheckpoint = errors.New("reput: damaged checkpoint")

// ckpt is a decoded checkpoint.
type ckpt struct {
	pos     int64
	retired uint64
	version int
}

func encodeCheckpoint(pos int64, retired uint64) []byte {
	b := make([]byte, checkpointSize)
	copy(b[0:4], checkpointMagic)
	binary.LittleEndian.PutUint16(b[4:6], checkpointVersion)
	binary.LittleEndian.PutUint64(b[8:16], uint64(pos))
	binary.LittleEndian.PutUint64(b[16:24], retired)
	binary.LittleEndian.PutUint64(b[24:32], xxhash.Sum64(b[0:24]))
	return b
}

func decodeCheckpoint(b []byte) (ckpt, error) {
	if len(b) < checkpointV1Size || string(b[0:4]) != checkpointMagic {
		return ckpt{}, errBadCheckpoint
	}
	v := binary.LittleEndian.Uint16(b[4:6])
	var c ckpt
	switch {
	case v == checkpointVersionV1 && len(b) == checkpointV1Size:
		if xxhash.Sum64(b[0:16]) != binary.LittleEndian.Uint64(b[16:24]) {
			return ckpt{}, errBadCheckpoint
		}
		c = ckpt{pos: int64(binary.LittleEndian.Uint64(b[8:16])), version: 1}
	case v == checkpointVersion && len(b) == checkpointSize:
		if xxhash.Sum64(b[0:24]) != binary.LittleEndian.Uint64(b[24:32]) {
			return ckpt{}, errBadCheckpoint
		}
		c = ckpt{pos: int64(binary.LittleEndian.Uint64(b[8:16])), retired: binary.LittleEndian.Uint64(b[16:24]), version: 2}
	case v != checkpointVersionV1 && v != checkpointVersion:
		return ckpt{}, fmt.Errorf("%w: version %d, this build reads 1 and %d", errBadCheckpoint, v, checkpointVersion)
	default:
		return ckpt{}, errBadCheckpoint
	}
	if c.pos < 0 || binary.LittleEndian.Uint16(b[6:8]) != 0 {
		return ckpt{}, errBadCheckpoint
	}
	return c, nil
}

// readCkpt returns the checkpoint, or ok=false when there is none. A
// damaged one is an error wrapping errBadCheckpoint.
func readCkpt(dir string) (c ckpt, ok bool, err error) {
	path := filepath.Join(dir, checkpointName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ckpt{}, false, nil
	}
	if err != nil {
		return ckpt{}, false, err
	}
	c, err = decodeCheckpoint(b)
	if err != nil {
		return ckpt{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return c, true, nil
}

// readCheckpoint returns the checkpointed position, or ok=false when there
// is none.
func readCheckpoint(dir string) (pos int64, ok bool, err error) {
	c, ok, err := readCkpt(dir)
	return c.pos, ok, err
}

// writeCheckpoint durably replaces the checkpoint: tmp, fsync, rename,
// fsync the directory.
func writeCheckpoint(dir string, pos int64, retired uint64) error {
	return segfile.WriteFileAtomic(filepath.Join(dir, checkpointName), encodeCheckpoint(pos, retired))
}

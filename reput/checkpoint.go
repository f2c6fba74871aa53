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
//	0        4        6        8              16        24
//	+--------+--------+--------+--------------+---------+
//	| "HGRP" | ver u16| 0 u16  | position u64 | xxh64   |
//	+--------+--------+--------+--------------+---------+
//
// The position is a commitlog offset: every record below it is durably in
// the schedule segments (or, for cancels, the dispatch logs). The checkpoint
// only shortens recovery; it is never the truth on its own (see Reput).
const (
	checkpointName    = "reput.checkpoint"
	checkpointMagic   = "HGRP"
	checkpointVersion = 1
	checkpointSize    = 24
)

var errBadCheckpoint = errors.New("reput: damaged checkpoint")

func encodeCheckpoint(pos int64) []byte {
	b := make([]byte, checkpointSize)
	copy(b[0:4], checkpointMagic)
	binary.LittleEndian.PutUint16(b[4:6], checkpointVersion)
	binary.LittleEndian.PutUint64(b[8:16], uint64(pos))
	binary.LittleEndian.PutUint64(b[16:24], xxhash.Sum64(b[0:16]))
	return b
}

func decodeCheckpoint(b []byte) (int64, error) {
	if len(b) != checkpointSize || string(b[0:4]) != checkpointMagic {
		return 0, errBadCheckpoint
	}
	if xxhash.Sum64(b[0:16]) != binary.LittleEndian.Uint64(b[16:24]) {
		return 0, errBadCheckpoint
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != checkpointVersion {
		return 0, fmt.Errorf("%w: version %d, this build reads %d", errBadCheckpoint, v, checkpointVersion)
	}
	pos := int64(binary.LittleEndian.Uint64(b[8:16]))
	if pos < 0 {
		return 0, errBadCheckpoint
	}
	return pos, nil
}

// readCheckpoint returns the checkpointed position, or ok=false when there
// is none. A damaged checkpoint is reported and treated as absent: it only
// ever shortens the search.
func readCheckpoint(dir string) (pos int64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	pos, err = decodeCheckpoint(b)
	if err != nil {
		return 0, false, err
	}
	return pos, true, nil
}

// writeCheckpoint durably replaces the checkpoint: tmp, fsync, rename,
// fsync the directory.
func writeCheckpoint(dir string, pos int64) error {
	return segfile.WriteFileAtomic(filepath.Join(dir, checkpointName), encodeCheckpoint(pos))
}

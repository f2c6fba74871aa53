package reput

// ReadCheckpoint returns the position stored in the reput checkpoint of the
// schedule directory dir, for tools that inspect a data directory; ok is
// false when there is no checkpoint. A damaged checkpoint is an error
// (Start then resumes from the retired log's floor, or refuses when the
// retired log cannot vouch for what was retired). It only reads, so it is
// safe while reput runs.
func ReadCheckpoint(dir string) (pos int64, ok bool, err error) {
	return readCheckpoint(dir)
}

// CheckpointInfo is what the checkpoint records, for tools.
type CheckpointInfo struct {
	Position int64  // every commitlog record below it is durably routed
	Retired  uint64 // retirements the retired log held when it was written (0 in version 1)
	Version  int
}

// ReadCheckpointInfo is ReadCheckpoint with every field of the checkpoint.
func ReadCheckpointInfo(dir string) (CheckpointInfo, bool, error) {
	c, ok, err := readCkpt(dir)
	return CheckpointInfo{Position: c.pos, Retired: c.retired, Version: c.version}, ok, err
}

// CheckpointName is the file name of the checkpoint in the schedule
// directory.
const CheckpointName = checkpointName

package reput

// ReadCheckpoint returns the position stored in the reput checkpoint of the
// schedule directory dir, for tools that inspect a data directory; ok is
// false when there is no checkpoint. A damaged checkpoint is an error
// (Start treats it as absent and routes from the oldest commitlog segment).
// It only reads, so it is safe while reput runs.
func ReadCheckpoint(dir string) (pos int64, ok bool, err error) {
	return readCheckpoint(dir)
}

// CheckpointName is the file name of the checkpoint in the schedule
// directory.
const CheckpointName = checkpointName

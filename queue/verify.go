package queue

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/segfile"
)

// VerifyTopic checks what the two logs of the topic in directory dir
// (Dir/topics/<topic>) say about each other, read-only, so it is safe
// beside a running queue: an ack log that is gone or holds no checkpoint
// where one must be, a checkpoint or ack the ack log cannot replay, and a
// queue log that ends below what the ack log names or starts above the
// oldest message it still needs. Each finding is a
// *segfile.CorruptionError; damage inside one log (a bad checksum, a
// torn tail) is commitlog.Verify's to find. The error is for logs that
// cannot be opened at all.
func VerifyTopic(dir string) ([]error, error) {
	// Beside a running queue a checkpoint and retention may come between
	// reading the ack log and the queue log: a finding that is only that
	// race is gone when both are read again.
	var found []error
	var err error
	for range 3 {
		if found, err = verifyTopic(dir); err != nil || len(found) == 0 {
			break
		}
	}
	return found, err
}

func verifyTopic(dir string) ([]error, error) {
	acksDir, logDir := filepath.Join(dir, "acks"), filepath.Join(dir, "log")
	hadAcks, err := hasSegments(acksDir)
	if err != nil {
		return nil, err
	}
	hasLog, err := hasSegments(logDir)
	if err != nil || !hasLog {
		return nil, err // a missing log is the caller's to report
	}
	// The ack log first: beside a running queue, what it names was in the
	// queue log before, so the queue log opened after it holds it.
	var r replayer
	var found []error
	var rerr error
	if hadAcks {
		alog, _, err := commitlog.Open(commitlog.Options{Dir: acksDir, ReadOnly: true})
		if err != nil {
			return nil, err
		}
		r, rerr = replayAcks(alog)
		alog.Close()
		if rerr != nil {
			if _, ok := errors.AsType[*segfile.CorruptionError](rerr); !ok {
				return nil, rerr
			}
			// Replay stopped at the damage; what it read before is still
			// checked against the queue log.
			found = append(found, rerr)
		}
	}
	qlog, _, err := commitlog.Open(commitlog.Options{Dir: logDir, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	first, end := qlog.FirstOffset(), qlog.EndOffset()
	qlog.Close()
	if !hadAcks {
		if end > 0 {
			return []error{&segfile.CorruptionError{Path: acksDir, Offset: -1, Err: fmt.Errorf(
				"the ack log has no segment files but the queue log holds records up to offset %d: acks and checkpoints are gone, so acked messages would be handed out again", end)}}, nil
		}
		return nil, nil
	}
	if first > 0 && !r.have && rerr == nil {
		found = append(found, &segfile.CorruptionError{Path: acksDir, Offset: -1, Err: fmt.Errorf(
			"the queue log starts at offset %d (older segments were deleted behind a checkpoint) but the ack log holds no checkpoint: acked messages would be handed out again", first)})
	}
	if r.have && r.ck.lwm < first {
		found = append(found, &segfile.CorruptionError{Path: logDir, Offset: -1, Err: fmt.Errorf(
			"the last checkpoint has unacked records from offset %d but the queue log starts at %d: segments holding messages not yet acked are missing", r.ck.lwm, first)})
	}
	if min := r.minEnd(); end < min {
		found = append(found, &segfile.CorruptionError{Path: logDir, Offset: -1, Err: fmt.Errorf(
			"the queue log ends at offset %d but the ack log names offset %d: messages durably delivered in %d..%d are lost (truncated, zeroed or a segment deleted)", end, min, end, min)})
	}
	return found, nil
}

package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/message"
)

// Intake messages: the payload of a message on subject hg.in.<p> holds the
// messages of one ScheduleBatch (or one Schedule, or several Schedules a
// node gathered while a publish to p was in flight):
//
//	+-------------+-----------------+--------------------------------------+
//	| ver u8 (=2) | count uvarint   | count × {len uvarint, schedule payload} |
//	+-------------+-----------------+--------------------------------------+
//
// count is from 1 to MaxBatch; each schedule payload is message's
// (message.AppendSchedule). Message i of the intake message at stream
// sequence s of partition p has the ID MakeID(p, s, i, its deliverAt).
// This layout is part of the cluster's durable format and must not change
// without a new version byte. Version 1 was a bare schedule payload (one
// message per intake message), which this code does not read.
const intakeVersion = 2

// ErrBadIntake is wrapped by DecodeIntake's errors.
var ErrBadIntake = errors.New("cluster: malformed intake message")

// appendIntakeHeader starts an intake message of count messages.
func appendIntakeHeader(dst []byte, count int) []byte {
	dst = append(dst, intakeVersion)
	return binary.AppendUvarint(dst, uint64(count))
}

// appendIntakeMessage appends one message to an intake message.
func appendIntakeMessage(dst []byte, m *message.Message) []byte {
	dst = binary.AppendUvarint(dst, uint64(message.ScheduleSize(m)))
	return message.AppendSchedule(dst, m)
}

// AppendIntake appends the intake message holding ms to dst.
func AppendIntake(dst []byte, ms []message.Message) []byte {
	dst = appendIntakeHeader(dst, len(ms))
	for i := range ms {
		dst = appendIntakeMessage(dst, &ms[i])
	}
	return dst
}

// DecodeIntake decodes an intake message, appending its messages to ms in
// index order; they alias src. A payload with another version, a count
// outside 1..MaxBatch, a length past the end, a schedule payload that does
// not decode, or bytes after the last message is an error naming what and
// where, and ms is returned as it was.
func DecodeIntake(src []byte, ms []message.Message) ([]message.Message, error) {
	base := len(ms)
	if len(src) == 0 || src[0] != intakeVersion {
		v := -1
		if len(src) > 0 {
			v = int(src[0])
		}
		return ms, fmt.Errorf("%w: version %d, want %d", ErrBadIntake, v, intakeVersion)
	}
	count, k := binary.Uvarint(src[1:])
	if k <= 0 || count < 1 || count > MaxBatch {
		return ms, fmt.Errorf("%w: message count %d at offset 1; want 1 to %d", ErrBadIntake, count, MaxBatch)
	}
	off := 1 + k
	for i := range int(count) {
		n, k := binary.Uvarint(src[off:])
		if k <= 0 || n > uint64(len(src)-off-k) {
			return ms[:base], fmt.Errorf("%w: message %d of %d at offset %d: length %d past the end (%d bytes)", ErrBadIntake, i, count, off, n, len(src))
		}
		off += k
		ms = append(ms, message.Message{})
		if err := message.DecodeSchedule(src[off:off+int(n)], &ms[len(ms)-1]); err != nil {
			return ms[:base], fmt.Errorf("%w: message %d of %d at offset %d: %v", ErrBadIntake, i, count, off, err)
		}
		off += int(n)
	}
	if off != len(src) {
		return ms[:base], fmt.Errorf("%w: %d bytes after the last of %d messages", ErrBadIntake, len(src)-off, count)
	}
	return ms, nil
}

package cluster

import (
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/message"
)

// Done records: the payload of a message on subject hg.done.<p> is one or
// more records of DoneRecordSize bytes each:
//
//	+----------------------+-------------------+-----------+
//	| deliverAt i64 BE     | seq u64 BE        | reason u8 |
//	+----------------------+-------------------+-----------+
//
// deliverAt and seq are the cluster ID of the message. This layout is part
// of the cluster's durable format and must not change without a new
// subject.
const DoneRecordSize = 17

// Reason says why a message is done.
type Reason uint8

// Reasons of done records.
const (
	// Delivered: the delivery stream acknowledged the message.
	Delivered Reason = 1
	// CancelledReason: a Cancel answered cancelled; never deliver it.
	CancelledReason Reason = 2
)

func (r Reason) String() string {
	switch r {
	case Delivered:
		return "delivered"
	case CancelledReason:
		return "cancelled"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// DoneRecord is one decoded done record.
type DoneRecord struct {
	ID     message.ID
	Reason Reason
}

// ErrBadDone is wrapped by DecodeDone's errors.
var ErrBadDone = errors.New("cluster: malformed done record")

// AppendDone appends the record of id with reason to dst.
func AppendDone(dst []byte, id message.ID, reason Reason) []byte {
	dst = appendIDBytes(dst, id)
	return append(dst, byte(reason))
}

// DecodeDone decodes a done-stream payload, calling fn for each record.
// A payload that is empty, not a whole number of records, or holds an
// unknown reason is an error naming the offset; fn is called for no record
// of it.
func DecodeDone(src []byte, fn func(DoneRecord)) error {
	if len(src) == 0 || len(src)%DoneRecordSize != 0 {
		return fmt.Errorf("%w: %d bytes; want a positive multiple of %d", ErrBadDone, len(src), DoneRecordSize)
	}
	for off := 0; off < len(src); off += DoneRecordSize {
		if r := Reason(src[off+16]); r != Delivered && r != CancelledReason {
			return fmt.Errorf("%w: reason %d at offset %d; want %d (delivered) or %d (cancelled)", ErrBadDone, r, off+16, Delivered, CancelledReason)
		}
	}
	for off := 0; off < len(src); off += DoneRecordSize {
		id, _ := idFromBytes(src[off : off+16])
		fn(DoneRecord{ID: id, Reason: Reason(src[off+16])})
	}
	return nil
}

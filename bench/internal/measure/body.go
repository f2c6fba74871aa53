// Package measure holds what every peer benchmark measures the same way: the
// message body that carries a message's ID and due time, the accounting of
// lost, duplicated and early deliveries, and percentiles.
//
// A body is
//
//	+-------+---------+------------+-----------------+---------+
//	| magic | version | id (8, BE) | deliverAt (8 BE)| padding |
//	|  "HG" |    1    |            | Unix ns         |  zeros  |
//	+-------+---------+------------+-----------------+---------+
//
// so a consumer learns both from the body alone, on every system.
package measure

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The body layout; part of what the drivers write and read.
const (
	bodyMagic0  = 'H'
	bodyMagic1  = 'G'
	bodyVersion = 1
	// HeaderSize is the smallest body: magic, version, ID and deliverAt.
	HeaderSize = 2 + 1 + 8 + 8
)

// ErrBadBody is wrapped by every Decode error.
var ErrBadBody = errors.New("measure: bad body")

// EncodeBody returns a body of size bytes (at least HeaderSize) that carries
// id and deliverAt.
func EncodeBody(id uint64, deliverAt time.Time, size int) []byte {
	if size < HeaderSize {
		size = HeaderSize
	}
	b := make([]byte, size)
	b[0], b[1], b[2] = bodyMagic0, bodyMagic1, bodyVersion
	binary.BigEndian.PutUint64(b[3:], id)
	binary.BigEndian.PutUint64(b[11:], uint64(deliverAt.UnixNano()))
	return b
}

// DecodeBody returns the ID and due time a body carries.
func DecodeBody(b []byte) (id uint64, deliverAt time.Time, err error) {
	if len(b) < HeaderSize {
		return 0, time.Time{}, fmt.Errorf("%w: %d bytes, need at least %d", ErrBadBody, len(b), HeaderSize)
	}
	if b[0] != bodyMagic0 || b[1] != bodyMagic1 {
		return 0, time.Time{}, fmt.Errorf("%w: magic %q, want \"HG\"", ErrBadBody, b[:2])
	}
	if b[2] != bodyVersion {
		return 0, time.Time{}, fmt.Errorf("%w: version %d, only %d is known", ErrBadBody, b[2], bodyVersion)
	}
	id = binary.BigEndian.Uint64(b[3:])
	ns := int64(binary.BigEndian.Uint64(b[11:]))
	return id, time.Unix(0, ns), nil
}

// Package audit is the audit trail: an append-only log of the changes
// operators make (a cancel, a purge, a policy, a schedule, a credentials
// reload), each with who made it, when, what it was and its result.
//
// The trail is a directory of segment files, named by the sequence number
// of their first entry (%020d.audit, so lexical order is numeric order).
// Only the last segment is written; once it passes Options.SegmentBytes a
// new one is started, and whole old segments are deleted when the trail
// is over Options.MaxBytes or their last entry is older than
// Options.MaxAge. Each Append is fsynced before it returns.
//
// A segment file:
//
//	0          8         12        16
//	+----------+---------+---------+--------------------------------+
//	| magic    | version | 0 u32   | records (package record) ...   |
//	| HGAUDIT\0| u32 = 1 |         | type 1, payload: one Entry as  |
//	+----------+---------+---------+ JSON                           |
//
// Integers are little-endian. The header and the record type are part of
// the on-disk format and must not change without a new version.
package audit

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/record"
)

// Format constants. They are part of the on-disk format and must not change.
const (
	// Version is the segment format's version.
	Version = 1
	// HeaderSize is the size of a segment's header.
	HeaderSize = 16
	// TypeEntry is the record type of an Entry.
	TypeEntry = 1
)

// Magic starts every segment of the audit trail.
var Magic = [8]byte{'H', 'G', 'A', 'U', 'D', 'I', 'T', 0}

var (
	// ErrBadHeader means a segment does not start with the audit trail's
	// magic and version.
	ErrBadHeader = errors.New("audit: not an audit segment of version 1")
	// ErrBadEntry means a record's checksum holds but its payload is no
	// entry.
	ErrBadEntry = errors.New("audit: malformed entry")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("audit: trail closed")
)

// Entry is one change and its result.
type Entry struct {
	// Seq numbers the entries of the trail: each is one more than the
	// entry before it. Append sets it.
	Seq uint64 `json:"seq"`
	// At is when the change was done. Append sets it when zero.
	At time.Time `json:"at"`
	// Who is the credential (or signal) that made the change.
	Who string `json:"who"`
	// Action is the RPC ("Cancel") or "ReloadCredentials".
	Action string `json:"action"`
	// Target is what it acted on: a topic, a message ID, a schedule.
	Target string `json:"target,omitempty"`
	// Request and Response are the call's messages as JSON, bodies left
	// out.
	Request  string `json:"request,omitempty"`
	Response string `json:"response,omitempty"`
	// Result is "OK" or the status code's name ("NOT_FOUND").
	Result string `json:"result"`
	// Error is the error's message when Result is not OK.
	Error string `json:"error,omitempty"`
	// Peer is the client's address.
	Peer string `json:"peer,omitempty"`
}

// header returns a segment's header.
func header() []byte {
	b := make([]byte, HeaderSize)
	copy(b, Magic[:])
	binary.LittleEndian.PutUint32(b[8:], Version)
	return b
}

// checkHeader checks a segment's first bytes.
func checkHeader(b []byte) error {
	if len(b) < HeaderSize || !bytes.Equal(b[:8], Magic[:]) ||
		binary.LittleEndian.Uint32(b[8:]) != Version || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return ErrBadHeader
	}
	return nil
}

// encode frames e as one record.
func encode(e Entry) ([]byte, error) {
	p, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	b := make([]byte, record.Size(len(p)))
	if _, err := record.Encode(b, TypeEntry, 0, p); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode reads the entries of a segment's bytes (its header included). It
// returns the entries of the whole records and the length of the bytes
// they span (with the header): past it the segment is torn or damaged,
// and err says which (record.ErrShort for a record cut short, another
// error for a damaged one); a segment that ends cleanly returns nil.
func Decode(b []byte) (entries []Entry, good int, err error) {
	if err := checkHeader(b); err != nil {
		return nil, 0, err
	}
	off := HeaderSize
	for off < len(b) {
		rec, n, err := record.Decode(b[off:])
		if errors.Is(err, record.ErrEnd) {
			// Zeros: the end of what was written (a file system may leave
			// zeros past a crash), unless data follows them.
			if bytes.ContainsFunc(b[off:], func(r rune) bool { return r != 0 }) {
				return entries, off, fmt.Errorf("%w at offset %d: zeros followed by data", ErrBadEntry, off)
			}
			return entries, off, nil
		}
		if err != nil {
			return entries, off, err
		}
		var e Entry
		if rec.Type != TypeEntry || json.Unmarshal(rec.Payload, &e) != nil {
			return entries, off, fmt.Errorf("%w at offset %d", ErrBadEntry, off)
		}
		if len(entries) > 0 && e.Seq != entries[len(entries)-1].Seq+1 {
			return entries, off, fmt.Errorf("%w at offset %d: seq %d follows %d", ErrBadEntry, off, e.Seq, entries[len(entries)-1].Seq)
		}
		entries = append(entries, e)
		off += n
	}
	return entries, off, nil
}

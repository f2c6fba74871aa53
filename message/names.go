package message

import (
	"bytes"
	"encoding/binary"
)

// Headers the engine sets on a message with an idempotency key: the key as
// given, and the engine's clock when the Schedule arrived (UTC epoch
// milliseconds, decimal), from which the key's window runs.
const (
	IdempotencyKeyHeader = "hourglass-idempotency-key"
	IdempotencyAtHeader  = "hourglass-idempotency-at"
)

// storedNames are the header names a version-2 schedule payload writes as
// a number (their index) instead of spelling them: the headers Hourglass
// sets on many messages. Their indexes are part of the on-disk format: a
// name is never removed or moved; a new one goes at the end.
var storedNames = [...]string{
	IdempotencyKeyHeader, // 0
	IdempotencyAtHeader,  // 1
	FlowKeyHeader,        // 2
	ExpireAtHeader,       // 3
	TraceParentHeader,    // 4
	TraceStateHeader,     // 5
}

// storedNameBytes are storedNames as the keys of decoded headers, which
// alias them (shared: never written to).
var storedNameBytes = func() (b [len(storedNames)][]byte) {
	for i, n := range storedNames {
		b[i] = []byte(n)
	}
	return b
}()

// nameCode returns the index of name in storedNames, or -1.
func nameCode(name []byte) int {
	if len(name) < len(ReservedPrefix) || string(name[:len(ReservedPrefix)]) != ReservedPrefix {
		return -1
	}
	for i, n := range storedNames {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// scheduleVersionFor is the version AppendSchedule writes for m: 2 when a
// header has a name of storedNames, else 1 (the same bytes as before
// version 2 existed).
func scheduleVersionFor(m *Message) byte {
	for _, h := range m.Headers {
		if nameCode(h.Key) >= 0 {
			return scheduleVersion2
		}
	}
	return scheduleVersion
}

// nameSize is the encoded size of a header's name in version ver.
func nameSize(ver byte, name []byte) int {
	if ver == scheduleVersion {
		return uvarintLen(len(name)) + len(name)
	}
	if c := nameCode(name); c >= 0 {
		return uvarintLen(2*c + 1)
	}
	return uvarintLen(2*len(name)) + len(name)
}

// appendName appends a header's name in version ver: in version 1 its
// length and bytes; in version 2 a uvarint n, odd for the name number
// (n-1)/2 of storedNames, even for a name of n/2 bytes that follow.
func appendName(dst []byte, ver byte, name []byte) []byte {
	if ver == scheduleVersion {
		return appendBytes(dst, name)
	}
	if c := nameCode(name); c >= 0 {
		return binary.AppendUvarint(dst, uint64(2*c+1))
	}
	return append(binary.AppendUvarint(dst, uint64(2*len(name))), name...)
}

// readName reads a header's name written by appendName in version ver. A
// number beyond storedNames is malformed.
func readName(p []byte, ver byte) (name, rest []byte, ok bool) {
	if ver == scheduleVersion {
		return readBytes(p)
	}
	n, k := binary.Uvarint(p)
	switch {
	case k <= 0:
		return nil, nil, false
	case n&1 == 1:
		if c := n >> 1; c < uint64(len(storedNames)) {
			return storedNameBytes[c], p[k:], true
		}
		return nil, nil, false
	case n>>1 > uint64(len(p)-k):
		return nil, nil, false
	}
	end := k + int(n>>1)
	return p[k:end:end], p[end:], true
}

// MayHoldHeader reports, without decoding it, whether the schedule payload
// p may hold a header named name: false means it holds none. It is a cheap
// test to run before DecodeSchedule.
func MayHoldHeader(p, name []byte) bool {
	if len(p) > 0 && p[0] == scheduleVersion2 && nameCode(name) >= 0 {
		return true // written as a number
	}
	return bytes.Contains(p, name)
}

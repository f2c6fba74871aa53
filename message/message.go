// Package message defines what Hourglass stores about a delayed message, its
// ID, and the binary payload encodings of the commitlog's record types.
//
// Encodings here are payloads only; framing and checksums belong to package
// record. Decoding never allocates except to grow a caller-provided header
// slice, and never trusts a length before checking it against the input.
//
// Schedule payload (record type TypeSchedule), all integers little-endian
// unless marked uvarint:
//
//	+---------+------------+---------+-----------+--------------------+
//	| ver u8  | deliverAt  | attempt | topic     | nheaders uvarint   |
//	| (1 or 2)| i64 ms UTC | u32     | uvarint+B | {key, value}...    |
//	+---------+------------+---------+-----------+--------------------+
//	| origin seq u64 | origin deliverAt i64 | body uvarint len + bytes |
//	+----------------+----------------------+--------------------------+
//
// key and value are each a uvarint length and bytes. The origin is the ID of
// the message this one retries (zero for a first attempt), so that a retry
// scheduled by a Nack still names the message the producer was given.
//
// Version 2 is the same but for each header's key: a uvarint n, odd for
// the header name number (n-1)/2 of a fixed table (the names Hourglass
// sets on many messages: its idempotency key and time, a flow key, an
// expiry, a trace context; names.go), even for a name of n/2 bytes that
// follow. AppendSchedule writes version 2 only for a message with a header
// of the table, so a message without one is encoded as in version 1.
//
// Cancel payload (record type TypeCancel):
//
//	+---------+----------------------+----------+
//	| ver u8  | target deliverAt i64 | seq u64  |
//	+---------+----------------------+----------+
//
// Reschedule payload (record type TypeReschedule): a cancel payload of the
// old message, then the schedule payload of its replacement, whose ID is
// its own deliverAt and the record's offset, like a schedule's:
//
//	+-----------------------+--------------------------------------+
//	| cancel payload (17 B) | schedule payload (its own ver first) |
//	+-----------------------+--------------------------------------+
//
// Control payload (record type TypeControl): a change to the server's
// durable settings, routed to the catalog (policies, recurring schedules,
// calendars):
//
//	+---------+---------+--------------------+---------------------+
//	| ver u8  | kind u8 | name uvarint+bytes | value uvarint+bytes |
//	+---------+---------+--------------------+---------------------+
//
// kind is a ControlKind; name is what it is about (a topic, a schedule's
// or a calendar's name); value is the new setting, JSON-encoded by its owner (empty for a
// deletion).
//
// These layouts are part of the on-disk format (docs/FORMAT.md) and must not
// change without a new version byte.
//
// It owns the message model and its payload encodings only, and imports no
// other Hourglass package.
package message

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Record types of the commitlog. Part of the on-disk format.
const (
	// TypeSchedule is a message to deliver at its deliverAt.
	TypeSchedule uint8 = 1
	// TypeCancel asks that the message with the given ID never be delivered.
	TypeCancel uint8 = 2
	// TypeReschedule cancels one message and schedules its replacement,
	// atomically.
	TypeReschedule uint8 = 3
	// TypeControl changes a durable setting (ControlKind).
	TypeControl uint8 = 4
)

// ControlKind says what a control record changes. Part of the on-disk
// format.
type ControlKind uint8

// Control kinds. Part of the on-disk format.
const (
	// ControlPolicy sets a topic's policy (value: its JSON; empty: the
	// defaults).
	ControlPolicy ControlKind = 1
	// ControlSchedule creates or replaces a recurring schedule (value: its
	// JSON definition and state).
	ControlSchedule ControlKind = 2
	// ControlScheduleDelete deletes a recurring schedule (value empty).
	ControlScheduleDelete ControlKind = 3
	// ControlCalendar creates or replaces a working-time calendar (value:
	// its JSON, package calendar's encoding; empty: deletes it).
	ControlCalendar ControlKind = 4
)

// Payload versions. Part of the on-disk format.
const (
	scheduleVersion  = 1
	scheduleVersion2 = 2 // header names of storedNames as numbers
	cancelVersion    = 1
	controlVersion   = 1
)

// Limits on what a message may hold. They bound what a decoder trusts.
const (
	// MaxTopicLen is the longest topic name in bytes.
	MaxTopicLen = 255
	// MaxHeaders is the largest number of headers a producer may give one
	// message (the idempotency key's two count against it).
	MaxHeaders = 64
	// MaxStoredHeaders is the largest number of headers a stored message
	// holds: MaxHeaders and the two of its trace context, which count
	// against no producer's limit.
	MaxStoredHeaders = MaxHeaders + 2
)

// The headers that carry the W3C trace context (traceparent, tracestate)
// of the Schedule call that made a message, to its consumers.
const (
	TraceParentHeader = "hourglass-traceparent"
	TraceStateHeader  = "hourglass-tracestate"
)

// IsTraceHeader reports whether key is TraceParentHeader or
// TraceStateHeader.
func IsTraceHeader(key []byte) bool {
	return string(key) == TraceParentHeader || string(key) == TraceStateHeader
}

// UserHeaders counts the headers of hs a producer gave: all but the
// trace context's.
func UserHeaders(hs []Header) int {
	n := 0
	for _, h := range hs {
		if !IsTraceHeader(h.Key) {
			n++
		}
	}
	return n
}

// ErrMalformed is returned for a payload that is not a valid encoding.
var ErrMalformed = errors.New("message: malformed payload")

// ID names a scheduled message. DeliverAt places it in its schedule segment
// without any global index; Seq is the commitlog offset of the record that
// scheduled it, unique within a data directory. IDs sort by delivery time.
type ID struct {
	DeliverAt int64  // UTC epoch milliseconds
	Seq       uint64 // commitlog offset of the schedule record
}

// IsZero reports whether id is the zero ID (no message).
func (id ID) IsZero() bool { return id == ID{} }

// String renders the ID as 32 lowercase hex digits: deliverAt then seq,
// so that string order is delivery order.
func (id ID) String() string {
	var h [IDTextLen]byte
	return string(id.AppendText(h[:0])) // one allocation, where EncodeToString makes two
}

// IDTextLen is the length of an ID's text form (String, AppendText).
const IDTextLen = 32

// AppendText appends the text form of id (what String returns) to b.
func (id ID) AppendText(b []byte) []byte {
	// Eight digits at a time (hex8): about a third of the time of
	// hex.AppendEncode, and the server writes one per scheduled message.
	x, y := uint64(id.DeliverAt), id.Seq
	b = binary.BigEndian.AppendUint64(b, hex8(uint32(x>>32)))
	b = binary.BigEndian.AppendUint64(b, hex8(uint32(x)))
	b = binary.BigEndian.AppendUint64(b, hex8(uint32(y>>32)))
	return binary.BigEndian.AppendUint64(b, hex8(uint32(y)))
}

// hex8 returns the eight lowercase hex digits of v, the first (most
// significant) in the top byte.
func hex8(v uint32) uint64 {
	// Spread the nibbles over the bytes, nibble i into byte i ...
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f
	// ... then make each byte its digit: '0'+n, plus 'a'-'0'-10 = 39
	// where n > 9 (n+6 carries into bit 4 exactly then).
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101
	return x + 0x3030303030303030 + letters*39
}

// IDBinaryLen is the length of an ID's binary form (AppendBinary).
const IDBinaryLen = 16

// AppendBinary appends the binary form of id to b: the 16 bytes its text
// form spells in hex (deliverAt, then seq, big-endian).
func (id ID) AppendBinary(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(id.DeliverAt))
	return binary.BigEndian.AppendUint64(b, id.Seq)
}

// IDFromBinary decodes what AppendBinary wrote; b must be IDBinaryLen
// bytes.
func IDFromBinary(b []byte) (ID, error) {
	if len(b) != IDBinaryLen {
		return ID{}, fmt.Errorf("message: malformed binary ID: want %d bytes, got %d", IDBinaryLen, len(b))
	}
	id := ID{DeliverAt: int64(binary.BigEndian.Uint64(b[0:8])), Seq: binary.BigEndian.Uint64(b[8:16])}
	if id.DeliverAt < 0 {
		return ID{}, fmt.Errorf("message: malformed binary ID %x: delivery time is negative", b)
	}
	return id, nil
}

// ParseID parses the form written by ID.String.
func ParseID(s string) (ID, error) {
	if len(s) != 32 {
		return ID{}, fmt.Errorf("message: malformed ID %q: want 32 hex digits, got %d characters", s, len(s))
	}
	var b [16]byte
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("message: malformed ID %q: want 32 hex digits (0-9, a-f)", s)
	}
	id := ID{DeliverAt: int64(binary.BigEndian.Uint64(b[0:8])), Seq: binary.BigEndian.Uint64(b[8:16])}
	if id.DeliverAt < 0 {
		return ID{}, fmt.Errorf("message: malformed ID %q: delivery time is negative", s)
	}
	return id, nil
}

// Time returns the delivery time of the message as a time.Time in UTC.
func (id ID) Time() time.Time { return time.UnixMilli(id.DeliverAt).UTC() }

// Header is one message header. Both fields alias the decoded buffer.
type Header struct {
	Key, Value []byte
}

// Message is the content of a schedule record and of a schedule-segment
// entry. Byte slices alias the buffer a message was decoded from.
type Message struct {
	DeliverAt int64  // UTC epoch milliseconds
	Attempt   uint32 // 0 for the first delivery attempt
	Topic     []byte
	Headers   []Header
	Body      []byte
	Origin    ID // the first attempt's ID for a retry; zero otherwise
}

// ScheduleSize returns the exact encoded size of m's schedule payload.
func ScheduleSize(m *Message) int {
	ver := scheduleVersionFor(m)
	n := 1 + 8 + 4 + uvarintLen(len(m.Topic)) + len(m.Topic) + uvarintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += nameSize(ver, h.Key) + uvarintLen(len(h.Value)) + len(h.Value)
	}
	return n + 16 + uvarintLen(len(m.Body)) + len(m.Body)
}

// AppendSchedule appends m's schedule payload to dst and returns it.
// It writes version 2 when a header's name is one of the table's, else
// version 1.
func AppendSchedule(dst []byte, m *Message) []byte {
	ver := scheduleVersionFor(m)
	dst = append(dst, ver)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.DeliverAt))
	dst = binary.LittleEndian.AppendUint32(dst, m.Attempt)
	dst = appendBytes(dst, m.Topic)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, h := range m.Headers {
		dst = appendName(dst, ver, h.Key)
		dst = appendBytes(dst, h.Value)
	}
	dst = binary.LittleEndian.AppendUint64(dst, m.Origin.Seq)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.Origin.DeliverAt))
	return appendBytes(dst, m.Body)
}

// DecodeSchedule decodes a schedule payload (version 1 or 2) into m.
// m.Headers is reused (truncated, then appended to) so a caller that keeps
// one Message decodes without allocating. The slices in m alias src, but
// for the keys of headers whose names version 2 writes as numbers, which
// alias a table shared by every message: never write to a header's key.
func DecodeSchedule(src []byte, m *Message) error {
	if len(src) < 13 || !knownScheduleVersion(src[0]) {
		return ErrMalformed
	}
	ver := src[0]
	m.DeliverAt = int64(binary.LittleEndian.Uint64(src[1:9]))
	m.Attempt = binary.LittleEndian.Uint32(src[9:13])
	p := src[13:]
	var ok bool
	if m.Topic, p, ok = readBytes(p); !ok || len(m.Topic) > MaxTopicLen {
		return ErrMalformed
	}
	nh, k := binary.Uvarint(p)
	if k <= 0 || nh > MaxStoredHeaders {
		return ErrMalformed
	}
	p = p[k:]
	m.Headers = m.Headers[:0]
	for range nh {
		var h Header
		if h.Key, p, ok = readName(p, ver); !ok {
			return ErrMalformed
		}
		if h.Value, p, ok = readBytes(p); !ok {
			return ErrMalformed
		}
		m.Headers = append(m.Headers, h)
	}
	if len(p) < 16 {
		return ErrMalformed
	}
	m.Origin.Seq = binary.LittleEndian.Uint64(p[0:8])
	m.Origin.DeliverAt = int64(binary.LittleEndian.Uint64(p[8:16]))
	if m.Body, p, ok = readBytes(p[16:]); !ok || len(p) != 0 {
		return ErrMalformed
	}
	return nil
}

// OriginOf returns the origin of a schedule payload (zero for a first
// attempt) without decoding its headers and body, and false for a payload
// DecodeSchedule would refuse up to the origin.
func OriginOf(src []byte) (ID, bool) {
	if len(src) < 13 || !knownScheduleVersion(src[0]) {
		return ID{}, false
	}
	ver := src[0]
	p := src[13:]
	var ok bool
	if _, p, ok = readBytes(p); !ok {
		return ID{}, false
	}
	nh, k := binary.Uvarint(p)
	if k <= 0 || nh > MaxStoredHeaders {
		return ID{}, false
	}
	p = p[k:]
	for range nh {
		if _, p, ok = readName(p, ver); !ok {
			return ID{}, false
		}
		if _, p, ok = readBytes(p); !ok {
			return ID{}, false
		}
	}
	if len(p) < 16 {
		return ID{}, false
	}
	return ID{Seq: binary.LittleEndian.Uint64(p[0:8]), DeliverAt: int64(binary.LittleEndian.Uint64(p[8:16]))}, true
}

// CancelSize is the encoded size of a cancel payload.
const CancelSize = 17

// AppendCancel appends the cancel payload for target to dst.
func AppendCancel(dst []byte, target ID) []byte {
	dst = append(dst, cancelVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(target.DeliverAt))
	return binary.LittleEndian.AppendUint64(dst, target.Seq)
}

// DecodeCancel decodes a cancel payload.
func DecodeCancel(src []byte) (ID, error) {
	if len(src) != CancelSize || src[0] != cancelVersion {
		return ID{}, ErrMalformed
	}
	return ID{
		DeliverAt: int64(binary.LittleEndian.Uint64(src[1:9])),
		Seq:       binary.LittleEndian.Uint64(src[9:17]),
	}, nil
}

// AppendReschedule appends the reschedule payload of target's replacement
// m to dst.
func AppendReschedule(dst []byte, target ID, m *Message) []byte {
	return AppendSchedule(AppendCancel(dst, target), m)
}

// SplitReschedule splits a reschedule payload into the old message's ID
// and the replacement's schedule payload (which aliases src). It checks
// the cancel part only; DecodeSchedule checks the rest.
func SplitReschedule(src []byte) (ID, []byte, error) {
	if len(src) < CancelSize {
		return ID{}, nil, ErrMalformed
	}
	id, err := DecodeCancel(src[:CancelSize])
	if err != nil {
		return ID{}, nil, err
	}
	return id, src[CancelSize:], nil
}

// CancelTarget returns the message a commitlog record of type typ and
// payload p makes done without delivering it: the target of a cancel, or
// the old message of a reschedule.
func CancelTarget(typ uint8, p []byte) (ID, bool) {
	switch typ {
	case TypeCancel:
		id, err := DecodeCancel(p)
		return id, err == nil
	case TypeReschedule:
		id, _, err := SplitReschedule(p)
		return id, err == nil
	}
	return ID{}, false
}

// HeaderValue returns the value of the first header named key in hs, or
// "" if there is none.
func HeaderValue(hs []Header, key string) string {
	for _, h := range hs {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// ReservedPrefix begins the name of every header Hourglass gives a meaning
// to and sets itself: an idempotency key and its time, a dead letter's
// origin and reason, a recurring schedule's name and occurrence, a
// cluster's IDs. A producer may not set a header whose name begins with
// it, in any letter case: the server refuses such a Schedule.
const ReservedPrefix = "hourglass-"

// FlowKeyHeader carries a message's flow key (a Schedule's flow_key):
// the key a topic's per-key flow policy counts it under. The server sets
// it; a producer gives the key as a field of its Schedule.
const FlowKeyHeader = "hourglass-flow-key"

// MaxFlowKey bounds a flow key in bytes.
const MaxFlowKey = 200

// Reserved reports whether a header named key is one only Hourglass sets:
// its name begins with ReservedPrefix, in any letter case.
func Reserved(key string) bool {
	return len(key) >= len(ReservedPrefix) && strings.EqualFold(key[:len(ReservedPrefix)], ReservedPrefix)
}

// ExpireAtHeader holds a message's expiry, UTC epoch milliseconds in
// decimal: from then on it is never handed to a consumer (the engine and
// the built-in queue check it; docs/API.md, "Expiry").
const ExpireAtHeader = "hourglass-expire-at"

// ExpireAt returns the expiry of a message with headers hs, and whether it
// has one.
func ExpireAt(hs []Header) (int64, bool) {
	for _, h := range hs {
		if string(h.Key) == ExpireAtHeader {
			ms, err := strconv.ParseInt(string(h.Value), 10, 64)
			return ms, err == nil
		}
	}
	return 0, false
}

// Expired reports whether a message with headers hs is past its expiry
// at nowMs (UTC epoch milliseconds): its expiry is at or before nowMs.
func Expired(hs []Header, nowMs int64) bool {
	at, ok := ExpireAt(hs)
	return ok && at <= nowMs
}

// FrozenHeader marks a message frozen on its own (engine.Engine.Freeze)
// and holds the delay it had left when it was frozen, milliseconds in
// decimal: the message is held at engine.FrozenAt, never delivered, until
// a thaw schedules it that long after the thaw.
const FrozenHeader = "hourglass-frozen"

// FrozenRemaining returns the remaining delay (ms) of a message with
// headers hs that is frozen on its own, and whether it is.
func FrozenRemaining(hs []Header) (int64, bool) {
	for _, h := range hs {
		if string(h.Key) == FrozenHeader {
			ms, err := strconv.ParseInt(string(h.Value), 10, 64)
			return max(ms, 0), err == nil
		}
	}
	return 0, false
}

// Control is a decoded control payload; Name and Value alias the input.
type Control struct {
	Kind  ControlKind
	Name  []byte
	Value []byte
}

// AppendControl appends c's control payload to dst.
func AppendControl(dst []byte, c Control) []byte {
	dst = append(dst, controlVersion, byte(c.Kind))
	return appendBytes(appendBytes(dst, c.Name), c.Value)
}

// DecodeControl decodes a control payload. Unknown kinds decode (a reader
// skips what it does not know); the layout must hold exactly.
func DecodeControl(src []byte) (Control, error) {
	if len(src) < 2 || src[0] != controlVersion {
		return Control{}, ErrMalformed
	}
	c := Control{Kind: ControlKind(src[1])}
	var ok bool
	rest := src[2:]
	if c.Name, rest, ok = readBytes(rest); !ok {
		return Control{}, ErrMalformed
	}
	if c.Value, rest, ok = readBytes(rest); !ok || len(rest) != 0 {
		return Control{}, ErrMalformed
	}
	return c, nil
}

func knownScheduleVersion(v byte) bool { return v == scheduleVersion || v == scheduleVersion2 }

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func readBytes(p []byte) (b, rest []byte, ok bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, nil, false
	}
	end := k + int(n)
	return p[k:end:end], p[end:], true
}

func uvarintLen(n int) int {
	l := 1
	for x := uint64(n); x >= 0x80; x >>= 7 {
		l++
	}
	return l
}

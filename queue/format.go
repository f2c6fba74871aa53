package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// Record types and payload layouts of the queue log and the ack log. They
// are part of the on-disk format (docs/FORMAT.md, "Built-in queue") and
// must not change without a new formatVersion.
const (
	// typeMessage is a queue-log record: one message delivered to the topic.
	typeMessage uint8 = 'M'
	// typeAck is an ack-log record: queue-log offsets that were acked.
	typeAck uint8 = 'A'
	// typeCheckpoint is an ack-log record: the head of a checkpoint.
	typeCheckpoint uint8 = 'C'
	// typeEntries is an ack-log record: entries of the checkpoint whose
	// head precedes it.
	typeEntries uint8 = 'E'

	// formatVersion is the first byte of every payload.
	formatVersion = 1

	messageHeaderSize = 1 + 8 + 8             // ver, ID deliverAt, ID seq
	headSize          = 1 + 8 + 8 + 8 + 8 + 4 // ver, lwm, cursor, end, unread, entries
	entrySize         = 8 + 4                 // offset, attempt
	maxOffset         = math.MaxInt64
)

// errMalformed is the cause of a *segfile.CorruptionError for a record that
// passed its checksum but does not decode.
var errMalformed = errors.New("malformed payload")

// appendMessage appends the queue-log payload of message m with ID id.
func appendMessage(dst []byte, id message.ID, m *message.Message) []byte {
	dst = append(dst, formatVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(id.DeliverAt))
	dst = binary.LittleEndian.AppendUint64(dst, id.Seq)
	return message.AppendSchedule(dst, m)
}

// messageSize returns the exact size of the queue-log payload of m.
func messageSize(m *message.Message) int { return messageHeaderSize + message.ScheduleSize(m) }

// decodeID decodes only the message ID of a queue-log payload.
func decodeID(p []byte, id *message.ID) error {
	if len(p) < messageHeaderSize || p[0] != formatVersion {
		return errMalformed
	}
	id.DeliverAt = int64(binary.LittleEndian.Uint64(p[1:9]))
	id.Seq = binary.LittleEndian.Uint64(p[9:17])
	return nil
}

// decodeMessage decodes a queue-log payload. The slices in m alias p.
func decodeMessage(p []byte, id *message.ID, m *message.Message) error {
	if len(p) < messageHeaderSize || p[0] != formatVersion {
		return errMalformed
	}
	id.DeliverAt = int64(binary.LittleEndian.Uint64(p[1:9]))
	id.Seq = binary.LittleEndian.Uint64(p[9:17])
	if id.DeliverAt < 0 {
		return errMalformed
	}
	if err := message.DecodeSchedule(p[messageHeaderSize:], m); err != nil {
		return errMalformed
	}
	return nil
}

// appendAck appends the ack-log payload acking the queue-log offsets offs.
func appendAck(dst []byte, offs ...int64) []byte {
	dst = append(dst, formatVersion)
	for _, o := range offs {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(o))
	}
	return dst
}

// decodeAck appends the offsets an ack payload names to dst.
func decodeAck(dst []int64, p []byte) ([]int64, error) {
	if len(p) < 1+8 || p[0] != formatVersion || (len(p)-1)%8 != 0 {
		return dst, errMalformed
	}
	for q := p[1:]; len(q) > 0; q = q[8:] {
		o := binary.LittleEndian.Uint64(q)
		if o > maxOffset {
			return dst, errMalformed
		}
		dst = append(dst, int64(o))
	}
	return dst, nil
}

// entry is a queue-log record a checkpoint names. Below the cursor it was
// received and not acked, and attempt is its attempt count; at or above
// the cursor it was acked before the reader reached it (attempt 0).
type entry struct {
	off     int64
	attempt uint32
}

// checkpoint is the state of a topic as of one point in its ack log.
type checkpoint struct {
	lwm     int64   // every record below it is acked
	cursor  int64   // the reader's position: records from here on were never received
	end     int64   // the queue-log offset up to which unread counts records, at least cursor
	unread  int64   // records in [cursor, end)
	entries []entry // sorted by offset, all at or above lwm
}

// encodeCheckpoint returns the ack-log records of ck: a head and as many
// entry records of at most perPart entries as it needs.
func encodeCheckpoint(ck *checkpoint, perPart int) []commitlog.Record {
	n := len(ck.entries)
	recs := make([]commitlog.Record, 0, 1+(n+perPart-1)/perPart)
	buf := make([]byte, 0, headSize+n*entrySize+(n+perPart-1)/perPart)
	buf = appendHead(buf, ck, uint32(n))
	recs = append(recs, commitlog.Record{Type: typeCheckpoint, Payload: buf[:headSize:headSize]})
	for i := 0; i < n; i += perPart {
		start := len(buf)
		buf = appendEntries(buf, ck.entries[i:min(n, i+perPart)])
		recs = append(recs, commitlog.Record{Type: typeEntries, Payload: buf[start:len(buf):len(buf)]})
	}
	return recs
}

// appendHead appends the payload of ck's head announcing n entries.
func appendHead(dst []byte, ck *checkpoint, n uint32) []byte {
	dst = append(dst, formatVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ck.lwm))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ck.cursor))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ck.end))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ck.unread))
	return binary.LittleEndian.AppendUint32(dst, n)
}

// appendEntries appends the payload of an entries record holding es.
func appendEntries(dst []byte, es []entry) []byte {
	dst = append(dst, formatVersion)
	for _, e := range es {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.off))
		dst = binary.LittleEndian.AppendUint32(dst, e.attempt)
	}
	return dst
}

// decodeHead decodes a checkpoint head and returns how many entries follow.
func decodeHead(p []byte) (checkpoint, uint32, error) {
	if len(p) != headSize || p[0] != formatVersion {
		return checkpoint{}, 0, errMalformed
	}
	lwm := binary.LittleEndian.Uint64(p[1:9])
	cursor := binary.LittleEndian.Uint64(p[9:17])
	end := binary.LittleEndian.Uint64(p[17:25])
	ck := checkpoint{
		lwm:    int64(lwm),
		cursor: int64(cursor),
		end:    int64(end),
		unread: int64(binary.LittleEndian.Uint64(p[25:33])),
	}
	if end > maxOffset || lwm > cursor || cursor > end || ck.unread < 0 {
		return checkpoint{}, 0, errMalformed
	}
	return ck, binary.LittleEndian.Uint32(p[33:37]), nil
}

// decodeEntries appends the entries of an entries payload to dst.
func decodeEntries(dst []entry, p []byte) ([]entry, error) {
	if len(p) < 1+entrySize || p[0] != formatVersion || (len(p)-1)%entrySize != 0 {
		return dst, errMalformed
	}
	for q := p[1:]; len(q) > 0; q = q[entrySize:] {
		o := binary.LittleEndian.Uint64(q)
		if o > maxOffset {
			return dst, errMalformed
		}
		dst = append(dst, entry{off: int64(o), attempt: binary.LittleEndian.Uint32(q[8:])})
	}
	return dst, nil
}

// replayer rebuilds a topic's state from its ack log, record by record.
// The state is the last complete checkpoint plus the acks after it. A
// checkpoint is written by one Append, so only a crash can leave one
// incomplete, and only at the end of what was durable: it is discarded
// when the next record is not one of its entries, or the log ends.
//
// A checkpoint's records may span two segments, and retention deletes the
// segments before a newer checkpoint's head: entry records at the very
// start of the log are the tail of such a superseded checkpoint. They are
// skipped, and a complete checkpoint must follow (finish checks).
type replayer struct {
	have      bool       // ck holds a complete checkpoint
	ck        checkpoint // the last complete checkpoint
	acks      []int64    // offsets acked after ck
	pend      *checkpoint
	want      uint32 // entries pend still announces
	discarded int    // incomplete checkpoints dropped
	started   bool   // a record other than leading orphan entries was seen
	orphans   int    // leading orphan entry records skipped
	afterSkip bool   // skipped was called and no record but entries came since
	lost      int    // entry records skipped after a skipped span
	// at is the ack-log offset of ck's head, head that of the head being
	// read; -1 for none. Set by replayAcks, not by add.
	at, head int64
}

// add applies one ack-log record. An error means the log contradicts
// itself: the caller reports it as corruption at that record.
func (r *replayer) add(typ uint8, p []byte) error {
	if typ == typeEntries && (!r.started || r.afterSkip && r.pend == nil) {
		if _, err := decodeEntries(nil, p); err != nil {
			return err
		}
		if r.started {
			r.lost++
		} else {
			r.orphans++
		}
		return nil
	}
	r.started, r.afterSkip = true, false
	switch typ {
	case typeAck:
		r.abandon()
		var err error
		r.acks, err = decodeAck(r.acks, p)
		return err
	case typeCheckpoint:
		r.abandon()
		ck, n, err := decodeHead(p)
		if err != nil {
			return err
		}
		r.pend, r.want = &ck, n
	case typeEntries:
		if r.pend == nil {
			return errors.New("checkpoint entries without a checkpoint head")
		}
		before := len(r.pend.entries)
		var err error
		if r.pend.entries, err = decodeEntries(r.pend.entries, p); err != nil {
			return err
		}
		if uint64(len(r.pend.entries)) > uint64(r.want) {
			return fmt.Errorf("checkpoint has more than the %d entries its head announces", r.want)
		}
		prev := r.pend.lwm - 1
		if before > 0 {
			prev = r.pend.entries[before-1].off
		}
		for _, e := range r.pend.entries[before:] {
			if e.off <= prev {
				return fmt.Errorf("checkpoint entry at offset %d is not above %d", e.off, prev)
			}
			if e.off >= r.pend.cursor && e.attempt != 0 {
				return fmt.Errorf("checkpoint entry at offset %d is past the cursor %d but has attempt %d", e.off, r.pend.cursor, e.attempt)
			}
			prev = e.off
		}
	default:
		return fmt.Errorf("unknown record type %#x", typ)
	}
	if r.pend != nil && uint64(len(r.pend.entries)) == uint64(r.want) {
		r.ck, r.have, r.pend = *r.pend, true, nil
		r.acks = r.acks[:0]
	}
	return nil
}

// skipped tells r that the records before the next one were lost to
// damage and covered by repair (a skip record): a checkpoint they cut is
// incomplete, and entry records right after them belong to a checkpoint
// whose head was lost, so they are skipped.
func (r *replayer) skipped() {
	r.abandon()
	r.afterSkip = true
}

// abandon drops an incomplete checkpoint.
func (r *replayer) abandon() {
	if r.pend != nil {
		r.pend = nil
		r.discarded++
	}
}

// finish ends the replay: it drops an incomplete checkpoint at the end and
// checks that leading orphan entries were superseded.
func (r *replayer) finish() error {
	r.abandon()
	if r.orphans > 0 && !r.have {
		return fmt.Errorf("the log starts with %d records of a checkpoint whose head is gone, and no complete checkpoint follows", r.orphans)
	}
	return nil
}

// receiptSep separates the ID from the lease serial in a receipt.
const receiptSep = "."

// formatReceipt returns the receipt of one lease: the message ID, a dot,
// and the lease's serial number in hex.
func formatReceipt(id message.ID, serial uint64) string {
	// One allocation, the string's: a Receive of a thousand messages
	// makes a thousand receipts.
	var buf [message.IDTextLen + len(receiptSep) + 16]byte
	b := id.AppendText(buf[:0])
	b = append(b, receiptSep...)
	return string(strconv.AppendUint(b, serial, 16))
}

// lowerHex reports whether s is digits and lowercase a to f only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseReceipt parses what formatReceipt wrote.
func parseReceipt(s string) (message.ID, uint64, error) {
	ids, ser, ok := strings.Cut(s, receiptSep)
	if !ok || len(ser) == 0 || len(ser) > 16 {
		return message.ID{}, 0, fmt.Errorf("%w: malformed receipt %q: want <32 hex digits>.<hex serial>", ErrInvalid, s)
	}
	id, err := message.ParseID(ids)
	if err != nil {
		return message.ID{}, 0, fmt.Errorf("%w: malformed receipt %q: %v", ErrInvalid, s, err)
	}
	// What formatReceipt writes, checked without writing it again (an
	// AckBatch parses a thousand): lowercase hex, no leading zeros in the
	// serial.
	serial, err := strconv.ParseUint(ser, 16, 64)
	if err != nil || !lowerHex(ids) || !lowerHex(ser) || (len(ser) > 1 && ser[0] == '0') {
		return message.ID{}, 0, fmt.Errorf("%w: malformed receipt %q: want <32 lowercase hex digits>.<lowercase hex serial>", ErrInvalid, s)
	}
	return id, serial, nil
}

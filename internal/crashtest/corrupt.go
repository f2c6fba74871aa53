package crashtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// How --corrupt-tail finds and damages the active files (docs/FORMAT.md):
//
//   - Commitlog-format files (the engine's commitlog/*.log, and each queue
//     topic's log/*.log and acks/*.log) are preallocated and zero after the
//     last record. Their "end" is the end of the written data: the end of
//     the last record that decodes, walking from byte 32 of the last
//     segment holding a record. Cutting bytes there means zeroing them.
//   - Schedule segments and dispatch logs (schedule/*.sched, *.done) grow
//     as they are written; the one modified last of each kind is the
//     active one. Their end is the file's end.
//
// Two kinds of damage:
//
//   - "torn-append": a record header announcing more bytes than follow is
//     written after the end of the data, as a write torn by the crash
//     would leave it. It removes nothing that was written, so it can
//     never lose anything acknowledged: any loss after it is the server's.
//   - "cut": the last k bytes of the last record (k from 1 to its length)
//     are zeroed (commitlog format) or truncated. Under --fsync always
//     every acknowledged record was fsynced before its answer, so a real
//     torn write can only hit records no one was told are durable; the
//     harness cannot tell which of the written records those are without
//     believing the server, so under always it never cuts. Under interval
//     and none it cuts, decodes what the cut record held first, and every
//     loss or duplicate of a message it names is reported as attributable
//     to the cut (and allowed). Schedule segments and dispatch logs only
//     get torn-append: they are not on the acknowledgement path, and
//     cutting synced done-records would model a disk that lies.

const (
	commitlogHeader = 32  // commitlog segment header (HGCL)
	segfileHeader   = 104 // schedule segment / dispatch log header
	typeQueueMsg    = 'M'
	typeQueueAck    = 'A'
	typeSchedEntry  = 0x53
	typeDone        = 0x44
)

// target is one active file --corrupt-tail may damage.
type target struct {
	path     string
	kind     string // "commitlog", "queue-log", "queue-acks", "sched", "done"
	topic    string // for queue files
	prealloc bool
	recType  uint8 // record type a torn header pretends to be
}

// findTargets lists the active files of dataDir.
func findTargets(dataDir string) ([]target, error) {
	var out []target
	add := func(dir, kind, topic string, typ uint8) error {
		p, err := activeLogSegment(dir)
		if err != nil || p == "" {
			return err
		}
		out = append(out, target{path: p, kind: kind, topic: topic, prealloc: true, recType: typ})
		return nil
	}
	if err := add(filepath.Join(dataDir, "commitlog"), "commitlog", "", message.TypeSchedule); err != nil {
		return nil, err
	}
	topics, err := os.ReadDir(filepath.Join(dataDir, "queue", "topics"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, t := range topics {
		dir := filepath.Join(dataDir, "queue", "topics", t.Name())
		if err := add(filepath.Join(dir, "log"), "queue-log", t.Name(), typeQueueMsg); err != nil {
			return nil, err
		}
		if err := add(filepath.Join(dir, "acks"), "queue-acks", t.Name(), typeQueueAck); err != nil {
			return nil, err
		}
	}
	for _, ext := range []string{".sched", ".done"} {
		p, err := newest(filepath.Join(dataDir, "schedule"), ext)
		if err != nil {
			return nil, err
		}
		if p != "" {
			typ := uint8(typeSchedEntry)
			if ext == ".done" {
				typ = typeDone
			}
			out = append(out, target{path: p, kind: ext[1:], recType: typ})
		}
	}
	return out, nil
}

// activeLogSegment returns the last *.log in dir holding a record, or the
// first one if none does ("" if there are none).
func activeLogSegment(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(logs)
	for i := len(logs) - 1; i >= 0; i-- {
		f, err := os.Open(logs[i])
		if err != nil {
			return "", err
		}
		var hdr [commitlogHeader + record.HeaderSize]byte
		n, _ := f.ReadAt(hdr[:], 0)
		f.Close()
		if n == len(hdr) && !allZero(hdr[commitlogHeader:]) {
			return logs[i], nil
		}
	}
	if len(logs) > 0 {
		return logs[0], nil
	}
	return "", nil
}

// newest returns the most recently modified file in dir ending in ext.
func newest(dir, ext string) (string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var best string
	var bestT time.Time
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ext) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if best == "" || info.ModTime().After(bestT) || (info.ModTime().Equal(bestT) && e.Name() > filepath.Base(best)) {
			best, bestT = filepath.Join(dir, e.Name()), info.ModTime()
		}
	}
	return best, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// tail describes the written data of a file: where its records end and
// where the last whole one starts.
type tail struct {
	end       int // end of the last record that decodes
	lastStart int // start of that record; -1 if there is none
	lastType  uint8
	lastBody  []byte // its payload (aliases the buffer)
}

// scanTail walks the records of data from start (the header size) and
// returns where the decodable data ends. It never trusts a length beyond
// what record.Decode checked; a record that does not decode ends the walk.
func scanTail(data []byte, start int) tail {
	t := tail{end: start, lastStart: -1}
	if start > len(data) {
		t.end = len(data)
		return t
	}
	pos := start
	for pos < len(data) {
		rec, n, err := record.Decode(data[pos:])
		if err != nil {
			break
		}
		t.lastStart, t.lastType, t.lastBody = pos, rec.Type, rec.Payload
		pos += n
		t.end = pos
	}
	return t
}

// damage applies --corrupt-tail to one target and returns what it did.
// cut allows the "cut" mode (never under --fsync always).
func damage(tg target, rng *rand.Rand, cut bool) (Cut, error) {
	data, err := os.ReadFile(tg.path)
	if err != nil {
		return Cut{}, err
	}
	hdr := segfileHeader
	if tg.prealloc {
		hdr = commitlogHeader
	}
	t := scanTail(data, hdr)
	c := Cut{File: tg.path, CommitlogFrom: -1}
	if cut && tg.prealloc && t.lastStart >= 0 && rng.IntN(2) == 0 {
		k := 1 + rng.IntN(t.end-t.lastStart)
		attribute(&c, tg, t)
		c.Mode, c.Bytes = "cut", int64(k)
		c.Torn = !allZero(data[t.lastStart : t.end-k])
		if tg.kind == "commitlog" {
			base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(tg.path), ".log"), 10, 64)
			c.CommitlogFrom = base + int64(t.lastStart-commitlogHeader)
		}
		zero := make([]byte, k)
		return c, writeAt(tg.path, zero, int64(t.end-k))
	}
	// torn-append: a header announcing n payload bytes, then fewer than
	// the n+8 that should follow (payload and checksum).
	n := 24 + rng.IntN(200)
	frag := make([]byte, record.HeaderSize+1+rng.IntN(n+7))
	binary.LittleEndian.PutUint32(frag, uint32(n))
	frag[4] = tg.recType
	for i := record.HeaderSize; i < len(frag); i++ {
		frag[i] = byte(1 + rng.IntN(255))
	}
	at := t.end
	if tg.prealloc && at+len(frag) > len(data) {
		return Cut{}, nil // the segment is full: nothing to tear
	}
	if !tg.prealloc {
		at = len(data) // after whatever the crash left
	}
	c.Mode, c.Bytes, c.Torn = "torn-append", int64(len(frag)), true
	return c, writeAt(tg.path, frag, int64(at))
}

// attribute records what the last record of t held, before it is cut.
func attribute(c *Cut, tg target, t tail) {
	var m message.Message
	switch {
	case tg.kind == "commitlog" && t.lastType == message.TypeSchedule:
		if message.DecodeSchedule(t.lastBody, &m) == nil {
			c.Keys = append(c.Keys, keyOf(m.Body))
		}
	case tg.kind == "commitlog" && t.lastType == message.TypeCancel:
		if id, err := message.DecodeCancel(t.lastBody); err == nil {
			c.CancelIDs = append(c.CancelIDs, id.String())
		}
	case tg.kind == "queue-log":
		c.QueueTopic = tg.topic
		if t.lastType == typeQueueMsg && len(t.lastBody) > 17 && message.DecodeSchedule(t.lastBody[17:], &m) == nil {
			c.Keys = append(c.Keys, keyOf(m.Body))
		}
	case tg.kind == "queue-acks":
		c.AckTopic = tg.topic
	}
}

func writeAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return fmt.Errorf("crashtest: damaging %s: %w", path, err)
	}
	return f.Close()
}

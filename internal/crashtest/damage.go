package crashtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// How --damage damages a stopped server's data directory (one damage per
// restart, between the stop and the start):
//
//   - A flip XORs one byte, with a non-zero value, inside one record that
//     has a whole, valid record after it in the same file. By the issue's
//     definition that is damage, never a torn tail: the last write of a
//     crash leaves zeros or a partial record after the bad one, never a
//     valid record. A flip of the last record would be indistinguishable
//     from a torn tail, which the server may truncate; the harness never
//     makes one.
//   - A delete removes a whole file (moved out of the data directory, so
//     that it can be put back when the run has to continue without a
//     repair command).
//
// The kinds and their files:
//
//	commitlog-flip     the active (newest holding a record) commitlog segment
//	commitlog-sealed-flip  a sealed commitlog segment (damagesealed.go)
//	commitlog-delete   the active commitlog segment, deleted
//	sched-flip         a schedule segment (*.sched) entry
//	done-flip          a dispatch log (*.done) done-record
//	done-delete        a dispatch log with at least one record, deleted
//	checkpoint-delete  schedule/reput.checkpoint, deleted
//	queue-log-flip     a queue topic's message log (active segment)
//	queue-ack-flip     a queue topic's ack log (active segment)
//
// Before flipping, the harness decodes what the record held (the key of a
// schedule, the target of a cancel, a done seq, acked queue offsets), so
// that what the damage provably allows can be named message by message.

// Damage kinds.
const (
	DCommitlogFlip    = "commitlog-flip"
	DCommitlogDelete  = "commitlog-delete"
	DSchedFlip        = "sched-flip"
	DDoneFlip         = "done-flip"
	DDoneDelete       = "done-delete"
	DCheckpointDelete = "checkpoint-delete"
	DQueueLogFlip     = "queue-log-flip"
	DQueueAckFlip     = "queue-ack-flip"
)

// DamageKinds lists every damage kind, in report order.
var DamageKinds = []string{DCommitlogFlip, DCommitlogSealedFlip, DCommitlogDelete, DSchedFlip, DDoneFlip, DDoneDelete,
	DCheckpointDelete, DQueueLogFlip, DQueueAckFlip}

// isDelete reports whether kind removes a file rather than flipping a byte.
func isDelete(kind string) bool {
	return kind == DCommitlogDelete || kind == DDoneDelete || kind == DCheckpointDelete
}

// span is one whole record of a file: [start, end).
type span struct{ start, end int64 }

// damageFile is one file a damage kind may hit.
type damageFile struct {
	path  string
	recs  []span // the records with a valid record after them (flip kinds)
	base  int64  // commitlog-format files: the offset of the first data byte (the name)
	topic string // queue files
}

// damageCands are the candidate files of each kind, found by scanDamage.
type damageCands map[string][]damageFile

// typeSkip is the commitlog format's skip record (commitlog.TypeSkip),
// which hourglass repair writes over a damaged span: a span u64 at the
// start of its payload (when it has 8 bytes or more) covers the bytes
// after it.
const typeSkip = 0xFF

// scanRecords lists the whole records of data from start up to the first
// that does not decode. Skip records are stepped over with their span and
// not listed: flipping one would damage what a repair already gave up.
func scanRecords(data []byte, start int) []span {
	var out []span
	pos := start
	for pos >= 0 && pos < len(data) {
		rec, n, err := record.Decode(data[pos:])
		if err != nil {
			break
		}
		if rec.Type == typeSkip {
			if len(rec.Payload) >= 8 {
				sp := binary.LittleEndian.Uint64(rec.Payload)
				if sp < uint64(n) || sp > uint64(len(data)-pos) {
					break
				}
				n = int(sp)
			}
			pos += n
			continue
		}
		out = append(out, span{int64(pos), int64(pos + n)})
		pos += n
	}
	return out
}

// flippable returns the records of data that have a whole record after
// them (a record a skip record follows counts: it is not the end).
func flippable(data []byte, start int) []span {
	recs := scanRecords(data, start)
	if len(recs) < 2 {
		return nil
	}
	return recs[:len(recs)-1]
}

// scanDamage finds the candidates of every kind in dataDir.
func scanDamage(dataDir string) (damageCands, error) {
	c := damageCands{}
	flipFile := func(kind, path string, hdr int, base int64, topic string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if recs := flippable(data, hdr); len(recs) > 0 {
			c[kind] = append(c[kind], damageFile{path: path, recs: recs, base: base, topic: topic})
		}
		return nil
	}
	clDir := filepath.Join(dataDir, "commitlog")
	if p, err := activeLogSegment(clDir); err != nil {
		return nil, err
	} else if p != "" {
		base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(p), ".log"), 10, 64)
		if err := flipFile(DCommitlogFlip, p, commitlogHeader, base, ""); err != nil {
			return nil, err
		}
		if data, err := os.ReadFile(p); err == nil && len(scanRecords(data, commitlogHeader)) > 0 {
			c[DCommitlogDelete] = append(c[DCommitlogDelete], damageFile{path: p, base: base})
		}
		if err := scanSealed(c, clDir, p); err != nil {
			return nil, err
		}
	}
	sched := filepath.Join(dataDir, "schedule")
	ents, err := os.ReadDir(sched)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		p := filepath.Join(sched, e.Name())
		switch {
		case farBucket(e.Name()):
			// The filler's bucket: no load reaches it during a run, so
			// nothing would ever meet (or report) its damage.
		case strings.HasSuffix(e.Name(), ".sched"):
			if err := flipFile(DSchedFlip, p, segfileHeader, 0, ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		case strings.HasSuffix(e.Name(), ".done"):
			if err := flipFile(DDoneFlip, p, segfileHeader, 0, ""); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			data, err := os.ReadFile(p)
			sp := strings.TrimSuffix(p, ".done") + ".sched"
			if _, serr := os.Stat(sp); err == nil && serr == nil && len(scanRecords(data, segfileHeader)) > 0 {
				c[DDoneDelete] = append(c[DDoneDelete], damageFile{path: p})
			}
		case e.Name() == "reput.checkpoint":
			c[DCheckpointDelete] = append(c[DCheckpointDelete], damageFile{path: p})
		}
	}
	topics, err := os.ReadDir(filepath.Join(dataDir, "queue", "topics"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, t := range topics {
		for kind, sub := range map[string]string{DQueueLogFlip: "log", DQueueAckFlip: "acks"} {
			p, err := activeLogSegment(filepath.Join(dataDir, "queue", "topics", t.Name(), sub))
			if err != nil {
				return nil, err
			}
			if p == "" {
				continue
			}
			base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(p), ".log"), 10, 64)
			if err := flipFile(kind, p, commitlogHeader, base, t.Name()); err != nil {
				return nil, err
			}
		}
	}
	for _, fs := range c {
		slices.SortFunc(fs, func(a, b damageFile) int { return strings.Compare(a.path, b.path) })
	}
	return c, nil
}

// nextKind takes from queue the first kind that has candidates and
// returns it with the rest of the queue; "" (and queue unchanged) when no
// kind in queue has any. The runner refills the queue with a seeded
// permutation of DamageKinds when it runs empty, so that every kind is
// injected once per len(DamageKinds) restarts that can take it.
func nextKind(queue []string, cands damageCands) (string, []string) {
	for i, k := range queue {
		if len(cands[k]) > 0 {
			return k, slices.Delete(slices.Clone(queue), i, i+1)
		}
	}
	return "", queue
}

// DamagePlan is one damage, chosen by planDamage and applied by apply.
type DamagePlan struct {
	Kind   string `json:"kind"`
	Path   string `json:"path"`             // absolute
	Offset int64  `json:"offset"`           // the flipped byte; -1 for a deletion
	Mask   byte   `json:"mask,omitempty"`   // XORed into the byte
	Rec    span   `json:"-"`                // the damaged record
	Base   int64  `json:"base,omitempty"`   // commitlog-format files: the first data byte's offset
	Topic  string `json:"topic,omitempty"`  // queue files
	RecOff int64  `json:"record,omitempty"` // the damaged record's start in the file
}

// planDamage picks a file of kind, and for a flip a record of it and a
// byte inside that record, with rng.
func planDamage(kind string, files []damageFile, rng *rand.Rand) DamagePlan {
	f := files[rng.IntN(len(files))]
	p := DamagePlan{Kind: kind, Path: f.path, Offset: -1, Base: f.base, Topic: f.topic}
	if isDelete(kind) {
		return p
	}
	r := f.recs[rng.IntN(len(f.recs))]
	p.Rec, p.RecOff = r, r.start
	p.Offset = r.start + rng.Int64N(r.end-r.start)
	p.Mask = byte(1 + rng.IntN(255))
	return p
}

// Held is what a damaged record held (decoded before the damage), or what
// a deleted file named.
type Held struct {
	// Keys are bodies of schedule records, schedule entries or queue
	// messages in the damaged record.
	Keys []string `json:"keys,omitempty"`
	// Seqs are commitlog offsets: of the schedule record (commitlog-flip)
	// or of the entry (sched-flip, done-flip).
	Seqs []int64 `json:"seqs,omitempty"`
	// CancelIDs are targets of a damaged cancel record.
	CancelIDs []string `json:"cancel_ids,omitempty"`
	// IDs are the message IDs of a damaged queue message, schedule record
	// or schedule entry, one per key of Keys (for a schedule record,
	// whose ID is its delivery time and its own offset, the ID it was
	// answered with).
	IDs []string `json:"ids,omitempty"`
	// QueueOffsets are queue-log offsets a damaged ack record acked.
	QueueOffsets []int64 `json:"queue_offsets,omitempty"`
	// What names the record's type in words ("schedule", "ack",
	// "checkpoint head", ...).
	What string `json:"what,omitempty"`
}

func (h Held) String() string {
	s := h.What
	if len(h.Keys) > 0 {
		s += " of " + strings.Join(h.Keys, ",")
	}
	if len(h.CancelIDs) > 0 {
		s += " of " + strings.Join(h.CancelIDs, ",")
	}
	if len(h.QueueOffsets) > 0 {
		s += fmt.Sprintf(" of queue offsets %v", h.QueueOffsets)
	}
	if h.What == "done-record" && len(h.Seqs) > 0 {
		s += fmt.Sprintf(" of seq %d", h.Seqs[0])
	}
	return s
}

// decodeHeld says what the record rec of a file of kind held.
func decodeHeld(kind string, rec []byte, recOff, base int64) Held {
	r, _, err := record.Decode(rec)
	if err != nil {
		return Held{What: "undecodable record"}
	}
	var h Held
	var m message.Message
	switch kind {
	case DCommitlogFlip, DCommitlogSealedFlip:
		switch r.Type {
		case message.TypeSchedule:
			h.What = "schedule"
			seq := base + recOff - commitlogHeader
			if message.DecodeSchedule(r.Payload, &m) == nil {
				h.Keys = append(h.Keys, keyOf(m.Body))
				h.IDs = append(h.IDs, message.ID{DeliverAt: m.DeliverAt, Seq: uint64(seq)}.String())
			}
			h.Seqs = append(h.Seqs, seq)
		case message.TypeCancel:
			h.What = "cancel"
			if id, err := message.DecodeCancel(r.Payload); err == nil {
				h.CancelIDs = append(h.CancelIDs, id.String())
			}
		default:
			h.What = fmt.Sprintf("commitlog record type %d", r.Type)
		}
	case DSchedFlip:
		h.What = "schedule entry"
		if len(r.Payload) >= 8 {
			h.Seqs = append(h.Seqs, int64(binary.LittleEndian.Uint64(r.Payload)))
			pad := int(r.Flags)
			if body := r.Payload[8:]; pad < len(body) && message.DecodeSchedule(body[:len(body)-pad], &m) == nil {
				h.Keys = append(h.Keys, keyOf(m.Body))
				h.IDs = append(h.IDs, message.ID{DeliverAt: m.DeliverAt, Seq: uint64(h.Seqs[0])}.String())
			}
		}
	case DDoneFlip:
		h.What = "done-record"
		if len(r.Payload) >= 8 {
			h.Seqs = append(h.Seqs, int64(binary.LittleEndian.Uint64(r.Payload)))
		}
	case DQueueLogFlip:
		h.What = "queue message"
		if r.Type == typeQueueMsg && len(r.Payload) > 17 {
			id := message.ID{DeliverAt: int64(binary.LittleEndian.Uint64(r.Payload[1:])), Seq: binary.LittleEndian.Uint64(r.Payload[9:])}
			h.IDs = append(h.IDs, id.String())
			if message.DecodeSchedule(r.Payload[17:], &m) == nil {
				h.Keys = append(h.Keys, keyOf(m.Body))
			}
		}
	case DQueueAckFlip:
		switch r.Type {
		case typeQueueAck:
			h.What = "ack"
			for p := r.Payload[min(1, len(r.Payload)):]; len(p) >= 8; p = p[8:] {
				h.QueueOffsets = append(h.QueueOffsets, int64(binary.LittleEndian.Uint64(p)))
			}
		case 'C':
			h.What = "checkpoint head"
		case 'E':
			h.What = "checkpoint entries"
		default:
			h.What = fmt.Sprintf("ack-log record type %#x", r.Type)
		}
	}
	return h
}

// applied is a damage as done, with what is needed to undo it.
type applied struct {
	plan    DamagePlan
	held    Held
	dataDir string
	snap    string // a copy of the data directory as it was before the damage ("" once dropped)
}

// apply damages the data directory as p says, after copying the whole
// directory (but quarantine/) to snap, outside it: undo puts that back,
// so that a run can go on from the state before the damage even after a
// start, a repair and a start after it changed any file.
func apply(p DamagePlan, dataDir, snap string) (*applied, error) {
	a := &applied{plan: p, dataDir: dataDir, snap: snap}
	if err := copyTree(dataDir, snap); err != nil {
		return nil, err
	}
	if isDelete(p.Kind) {
		if err := os.Remove(p.Path); err != nil {
			return nil, fmt.Errorf("crashtest: deleting %s: %w", p.Path, err)
		}
		if d, err := os.Open(filepath.Dir(p.Path)); err == nil {
			d.Sync()
			d.Close()
		}
		return a, nil
	}
	f, err := os.OpenFile(p.Path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec := make([]byte, p.Rec.end-p.Rec.start)
	if _, err := f.ReadAt(rec, p.Rec.start); err != nil {
		return nil, fmt.Errorf("crashtest: reading %s: %w", p.Path, err)
	}
	a.held = decodeHeld(p.Kind, rec, p.Rec.start, p.Base)
	if p.Kind == DQueueAckFlip && len(a.held.QueueOffsets) > 0 {
		a.held.Keys = queueKeys(filepath.Join(filepath.Dir(filepath.Dir(p.Path)), "log"), a.held.QueueOffsets)
	}
	b := []byte{rec[p.Offset-p.Rec.start] ^ p.Mask}
	if _, err := f.WriteAt(b, p.Offset); err != nil {
		return nil, fmt.Errorf("crashtest: flipping a byte of %s: %w", p.Path, err)
	}
	return a, f.Sync()
}

// snapPath is where the snapshot holds the damaged file.
func (a *applied) snapPath() string {
	rel, _ := filepath.Rel(a.dataDir, a.plan.Path)
	return filepath.Join(a.snap, rel)
}

// changedSince reports whether the damaged file is no longer what apply
// left (the original with the one byte flipped, or no file): a start that
// refused it wrote to it first.
func (a *applied) changedSince() bool {
	if isDelete(a.plan.Kind) {
		_, err := os.Stat(a.plan.Path)
		return err == nil // recreated
	}
	orig, err1 := os.ReadFile(a.snapPath())
	now, err2 := os.ReadFile(a.plan.Path)
	if err1 != nil || err2 != nil || len(orig) != len(now) {
		return true
	}
	orig[a.plan.Offset] ^= a.plan.Mask
	return !bytes.Equal(orig, now)
}

// undo puts back the data directory (but quarantine/) as it was before
// the damage.
func (a *applied) undo() error {
	if a.snap == "" {
		return errors.New("crashtest: no snapshot to undo the damage from")
	}
	ents, err := os.ReadDir(a.dataDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == "quarantine" || e.Name() == "LOCK" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(a.dataDir, e.Name())); err != nil {
			return fmt.Errorf("crashtest: undoing the damage: %w", err)
		}
	}
	snaps, err := os.ReadDir(a.snap)
	if err != nil {
		return err
	}
	for _, e := range snaps {
		if err := os.Rename(filepath.Join(a.snap, e.Name()), filepath.Join(a.dataDir, e.Name())); err != nil {
			return fmt.Errorf("crashtest: undoing the damage: %w", err)
		}
	}
	a.discard()
	return nil
}

// discard drops the snapshot undo would need.
func (a *applied) discard() {
	if a.snap != "" {
		os.RemoveAll(a.snap)
		a.snap = ""
	}
}

// copyTree copies the regular files and directories under from (but
// quarantine/ and LOCK at its top) to to, which must not exist.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if rel == "quarantine" || rel == "LOCK" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, dst)
		}
		return nil
	})
}

// copyFile copies from to to, leaving blocks of zeros as holes (the
// commitlog's preallocated segments are mostly zeros).
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	var size int64
	for {
		n, rerr := src.ReadAt(buf, size)
		if n > 0 && !allZero(buf[:n]) {
			if _, err := dst.WriteAt(buf[:n], size); err != nil {
				dst.Close()
				return fmt.Errorf("crashtest: copying %s: %w", from, err)
			}
		}
		size += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			dst.Close()
			return fmt.Errorf("crashtest: copying %s: %w", from, rerr)
		}
	}
	if err := dst.Truncate(size); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// queueKeys returns the bodies of the queue-log records at offsets in the
// queue log directory dir (those it can read).
func queueKeys(dir string, offsets []int64) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var keys []string
	for _, e := range ents {
		base, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64)
		if err != nil || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, off := range offsets {
			pos := off - base + commitlogHeader
			if off < base || pos >= int64(len(data)) {
				continue
			}
			r, _, err := record.Decode(data[pos:])
			var m message.Message
			if err == nil && r.Type == typeQueueMsg && len(r.Payload) > 17 && message.DecodeSchedule(r.Payload[17:], &m) == nil {
				keys = append(keys, keyOf(m.Body))
			}
		}
	}
	return keys
}

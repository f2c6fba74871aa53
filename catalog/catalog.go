// Package catalog keeps the tables the engine derives from the commitlog
// besides the schedule segments and dispatch logs:
//
//   - Keys: (topic, idempotency key) → the ID of the message scheduled with
//     that key, for the message's whole life (a reschedule moves the key
//     to the replacement), so that Cancel, Reschedule and Get work by key;
//   - Moved: the first ID of a message that lives on under another (the
//     origin of a retry, reschedule or redrive) → the ID of its latest
//     incarnation (directories written before 2026-12-05 also map a
//     rescheduled message to its replacement);
//   - Policies, Schedules and Calendars: the durable settings control
//     records carry (a topic's delivery policy, a recurring schedule, a
//     working-time calendar), by name.
//
// The tables live in one B+tree file (go.etcd.io/bbolt), so their memory
// is the operating system's page cache, not the heap, whatever their size.
// Reput is the only writer: it stages what it routes (Put, Delete), and
// Commit writes everything staged in one fsynced transaction before reput
// advances its checkpoint. Readers see staged entries at once. A crash
// loses what was staged and not committed; reput routes it again from the
// checkpoint (the same records in the same order give the same tables).
// Entries of messages whose segment is gone are swept (Sweep).
//
// It imports package message and segfile only (and bbolt).
package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// Table names a table of the catalog. The names are part of the on-disk
// format.
type Table string

// Tables.
const (
	Keys      Table = "keys"      // topic "\x00" key → message.ID (16 bytes)
	Moved     Table = "moved"     // origin message.ID (16 bytes) → latest incarnation's message.ID (16 bytes)
	Policies  Table = "policies"  // topic → JSON (the owner's encoding)
	Schedules Table = "schedules" // name → JSON (the owner's encoding)
	Calendars Table = "calendars" // name → JSON (package calendar's encoding)
	Meta      Table = "meta"      // "version" → the content version (decimal), see Version
	// Delivered: a retired bucket's start (BucketKey) → its length and
	// the topics its messages went to (the owner's encoding), so that a
	// message the queue still holds is found after its segment is gone.
	Delivered Table = "delivered"
)

var tables = []Table{Keys, Moved, Policies, Schedules, Meta, Delivered, Calendars}

// BucketKey is a key of the Delivered table: a bucket's start, big-endian,
// so that keys sort by time.
func BucketKey(start int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(start)) }

// MaxDeliveredTopics bounds the topics a Delivered entry names: a bucket
// that delivered to more keeps none (its messages are not found in the
// queue once it is gone).
const MaxDeliveredTopics = 1000

// EncodeDelivered is the value of a Delivered entry: the bucket's length
// in milliseconds and its topics, one a line (topics hold no newline).
func EncodeDelivered(d time.Duration, topics []string) []byte {
	if len(topics) > MaxDeliveredTopics {
		topics = nil
	}
	return []byte(strconv.FormatInt(d.Milliseconds(), 10) + "\n" + strings.Join(topics, "\n"))
}

// DecodeDelivered reads a Delivered entry's value.
func DecodeDelivered(v []byte) (time.Duration, []string, bool) {
	ms, rest, _ := strings.Cut(string(v), "\n")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return 0, nil, false
	}
	var topics []string
	if rest != "" {
		topics = strings.Split(rest, "\n")
	}
	return time.Duration(n) * time.Millisecond, topics, true
}

// Floor returns the committed entry of t with the largest key at or below
// key, if there is one (staged entries are not looked at: it is for tables
// whose writer commits each entry at once, like Delivered).
func (c *Catalog) Floor(t Table, key []byte) (k, v []byte, ok bool, err error) {
	err = c.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket([]byte(t)).Cursor()
		ck, cv := cur.Seek(key)
		switch {
		case ck == nil:
			ck, cv = cur.Last() // every key is below key
		case !bytes.Equal(ck, key):
			ck, cv = cur.Prev() // ck is above key: the one before it
		}
		if ck != nil {
			k, v, ok = bytes.Clone(ck), bytes.Clone(cv), true
		}
		return nil
	})
	return k, v, ok, err
}

// versionKey is the Meta entry that holds the content version.
var versionKey = []byte("version")

// Version returns the content version the catalog's writer recorded with
// SetVersion (its owner's numbering: what its tables hold), 0 if none.
func (c *Catalog) Version() (int, error) {
	v, ok, err := c.Get(Meta, versionKey)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, &segfile.CorruptionError{Path: c.path, Offset: -1, Err: fmt.Errorf("catalog: version %q: %w", v, err)}
	}
	return n, nil
}

// SetVersion stages the content version, committed with what is staged.
func (c *Catalog) SetVersion(v int) { c.Put(Meta, versionKey, strconv.AppendInt(nil, int64(v), 10)) }

// CopyTo writes a consistent copy of the committed file to path (tmp,
// fsync, rename, fsync of its directory).
func (c *Catalog) CopyTo(path string) error {
	return c.db.View(func(tx *bolt.Tx) error {
		f, err := segfile.CreateAtomic(path, func(f *os.File) error {
			_, err := tx.WriteTo(f)
			return err
		}, nil)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// FileName is the catalog's file in reput's directory.
const FileName = "catalog.db"

// Catalog is one catalog file. Its methods are safe for concurrent use;
// Put, Delete, Commit and Sweep are for one writer (reput's goroutine).
type Catalog struct {
	db   *bolt.DB
	path string

	mu sync.RWMutex
	// staged holds what was put or deleted (nil value) since the last
	// Commit began; committing what that Commit is writing. Readers look
	// in staged, then committing, then the file.
	staged, committing map[Table]map[string][]byte
	// hint is each table's entry count in the last batch Begin took: a
	// table's next staged map starts at that size rather than growing to
	// it (rehashing every key at each doubling).
	hint map[Table]int
}

// Open opens (creating if needed) the catalog file at path. A damaged file
// is a *segfile.CorruptionError.
func Open(path string) (*Catalog, error) {
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 5 * time.Second, InitialMmapSize: initialMmap})
	if err != nil {
		if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
			return nil, &segfile.CorruptionError{Path: path, Offset: -1, Err: err}
		}
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, t := range tables {
			if _, err := tx.CreateBucketIfNotExists([]byte(t)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	return &Catalog{db: db, path: path, staged: map[Table]map[string][]byte{}, hint: map[Table]int{}}, nil
}

// Path returns the catalog's file path.
func (c *Catalog) Path() string { return c.path }

// Close closes the file; what is staged and not committed is dropped.
func (c *Catalog) Close() error { return c.db.Close() }

// Put stages key → value in t; readers see it at once.
func (c *Catalog) Put(t Table, key, value []byte) {
	c.stage(t, key, bytes.Clone(value))
}

// Delete stages the removal of key from t.
func (c *Catalog) Delete(t Table, key []byte) { c.stage(t, key, nil) }

func (c *Catalog) stage(t Table, key, value []byte) {
	c.mu.Lock()
	c.stagedLocked(t, 1)[string(key)] = value
	c.mu.Unlock()
}

// maxHint bounds a hint: after a restart routed millions of keys in one
// batch, the next map does not start at that size.
const maxHint = 1 << 16

// stagedLocked returns t's staged map, made for at least n entries (and
// the last batch's count) if t has none yet. c.mu is held.
func (c *Catalog) stagedLocked(t Table, n int) map[string][]byte {
	m := c.staged[t]
	if m == nil {
		m = make(map[string][]byte, max(n, c.hint[t]))
		c.staged[t] = m
	}
	return m
}

// Staged returns how many entries wait for Commit.
func (c *Catalog) Staged() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, m := range c.staged {
		n += len(m)
	}
	return n
}

// Commit writes everything staged in one transaction and fsyncs it.
func (c *Catalog) Commit() error {
	b := c.Begin()
	if b == nil {
		return nil
	}
	return b.Write()
}

// Batch is what Begin took of the staged entries, for Write.
type Batch struct {
	c *Catalog
	m map[Table]map[string][]byte
}

// Begin takes everything staged so far into a batch that Write commits,
// and returns nil if nothing is staged. Readers see the batch until Write
// has written it; entries staged after Begin go into the next batch. One
// batch at a time: Write (or drop) the last one before the next Begin.
func (c *Catalog) Begin() *Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.staged) == 0 {
		return nil
	}
	c.committing, c.staged = c.staged, map[Table]map[string][]byte{}
	for t, m := range c.committing {
		c.hint[t] = min(len(m), maxHint)
	}
	return &Batch{c: c, m: c.committing}
}

// Write commits the batch in one transaction and fsyncs it. It may run on
// a goroutine of its own while entries are staged. On failure the batch
// goes back under what was staged since (a retry writes both, the newer
// winning).
func (b *Batch) Write() error {
	c := b.c
	err := c.db.Update(func(tx *bolt.Tx) error {
		for t, m := range b.m {
			bk := tx.Bucket([]byte(t))
			// In key order: bbolt splits nodes at commit, and inserting
			// out of order into one node moves the rest of it each time
			// (quadratic in a batch of a hundred thousand keys).
			keys := slices.Sorted(maps.Keys(m))
			if t == Keys && inRuns(bk.Cursor(), keys) {
				bk.FillPercent = keysFill
			}
			for _, k := range keys {
				v := m[k]
				var err error
				if v == nil {
					err = bk.Delete([]byte(k))
				} else {
					err = bk.Put([]byte(k), v)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		c.dropResident()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.committing = nil
	if err != nil {
		for t, m := range b.m {
			s := c.staged[t]
			if s == nil {
				c.staged[t] = m
				continue
			}
			for k, v := range m {
				if _, newer := s[k]; !newer {
					s[k] = v
				}
			}
		}
		return fmt.Errorf("catalog: commit %s: %w", c.path, err)
	}
	return nil
}

// Get returns key's value in t (a copy) and whether it is there.
func (c *Catalog) Get(t Table, key []byte) ([]byte, bool, error) {
	c.mu.RLock()
	for _, layer := range []map[Table]map[string][]byte{c.staged, c.committing} {
		if v, ok := layer[t][string(key)]; ok {
			c.mu.RUnlock()
			return bytes.Clone(v), v != nil, nil
		}
	}
	c.mu.RUnlock()
	var out []byte
	err := c.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(t)).Get(key); v != nil {
			out = bytes.Clone(v)
		}
		return nil
	})
	return out, out != nil, err
}

// Scan calls fn with up to n entries of t whose keys are after after (all
// from the start if after is nil), in key order, staged ones included;
// fn's slices are its own. It returns the last key it passed to fn when
// it stopped at n (nil when t has no more).
func (c *Catalog) Scan(t Table, after []byte, n int, fn func(key, value []byte)) ([]byte, error) {
	// The overlay's entries of t, merged with the file's in key order.
	c.mu.RLock()
	over := map[string][]byte{}
	for _, layer := range []map[Table]map[string][]byte{c.committing, c.staged} {
		for k, v := range layer[t] {
			over[k] = v
		}
	}
	c.mu.RUnlock()
	var okeys []string
	for k := range over {
		if after == nil || k > string(after) {
			okeys = append(okeys, k)
		}
	}
	sortStrings(okeys)
	// The entries are collected in the read transaction and handed to fn
	// after it: fn may take its time, and a long read transaction would
	// hold up the writer's (bbolt remaps the file only without readers).
	type kv struct{ k, v []byte }
	var page []kv
	more := false
	err := c.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket([]byte(t)).Cursor()
		k, v := seekAfter(cur, after)
		oi := 0
		for k != nil || oi < len(okeys) {
			var key, val []byte
			switch {
			case oi < len(okeys) && (k == nil || okeys[oi] <= string(k)):
				key, val = []byte(okeys[oi]), over[okeys[oi]]
				if k != nil && okeys[oi] == string(k) {
					k, v = cur.Next()
				}
				oi++
			default:
				if _, shadowed := over[string(k)]; shadowed {
					k, v = cur.Next()
					continue
				}
				key, val = k, v
				k, v = cur.Next()
			}
			if val == nil {
				continue // deleted
			}
			if len(page) == n {
				more = true
				return nil
			}
			page = append(page, kv{bytes.Clone(key), bytes.Clone(val)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, e := range page {
		fn(e.k, e.v)
	}
	if !more || len(page) == 0 {
		return nil, nil
	}
	return page[len(page)-1].k, nil
}

// seekAfter moves cur to the first key after after, or to the first key
// when after is nil, and returns it (nil at the end).
func seekAfter(cur *bolt.Cursor, after []byte) (k, v []byte) {
	if after == nil {
		return cur.First()
	}
	if k, v = cur.Seek(after); k != nil && bytes.Equal(k, after) {
		return cur.Next()
	}
	return k, v
}

// Sweep looks at up to n committed entries of t after after and stages
// the removal of those dead says are dead (and that nothing staged
// changed since). It returns where to go on (nil: from the start, the
// table was swept to its end) and how many it removed.
func (c *Catalog) Sweep(t Table, after []byte, n int, dead func(key, value []byte) bool) ([]byte, int, error) {
	var gone [][]byte
	var next []byte
	err := c.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket([]byte(t)).Cursor()
		k, v := seekAfter(cur, after)
		var last []byte
		for i := 0; k != nil; i++ {
			if i == n {
				next = last // go on after the last one looked at
				return nil
			}
			if dead(k, v) {
				gone = append(gone, bytes.Clone(k))
			}
			last = bytes.Clone(k)
			k, v = cur.Next()
		}
		return nil
	})
	if err != nil {
		return after, 0, err
	}
	c.mu.Lock()
	removed := 0
	for _, k := range gone {
		if _, touched := c.staged[t][string(k)]; touched {
			continue
		}
		if c.staged[t] == nil {
			c.staged[t] = map[string][]byte{}
		}
		c.staged[t][string(k)] = nil
		removed++
	}
	c.mu.Unlock()
	return next, removed, nil
}

// KeyOf is the Keys table's key of (topic, key).
func KeyOf(topic, key string) []byte {
	b := make([]byte, 0, len(topic)+1+len(key))
	return append(append(append(b, topic...), 0), key...)
}

// EncodeID is an ID as the Keys and Moved tables store it.
func EncodeID(id message.ID) []byte {
	var b [16]byte
	putID(b[:], id)
	return b[:]
}

// DecodeID decodes an ID EncodeID encoded, or the ID of a Keys entry's
// value (EncodeKey).
func DecodeID(b []byte) (message.ID, bool) {
	if len(b) != 16 && len(b) != keyValueSize {
		return message.ID{}, false
	}
	return getID(b), true
}

// LookupID returns the ID stored under key in t (Keys or Moved).
func (c *Catalog) LookupID(t Table, key []byte) (message.ID, bool, error) {
	v, ok, err := c.Get(t, key)
	if err != nil || !ok {
		return message.ID{}, false, err
	}
	id, ok := DecodeID(v)
	if !ok {
		return message.ID{}, false, &segfile.CorruptionError{Path: c.path, Offset: -1,
			Err: fmt.Errorf("catalog: table %s holds a %d-byte ID", t, len(v))}
	}
	return id, true, nil
}

// ErrInUse is returned by Verify for a catalog a running server holds.
var ErrInUse = errors.New("catalog: in use by a running server")

// Verify checks the catalog file at path page by page (bbolt's own
// consistency check) and returns what it found wrong; nil when sound. It
// only reads. A file a running server holds is ErrInUse (not checked).
func Verify(path string) ([]error, error) {
	db, err := bolt.Open(path, 0o644, &bolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, ErrInUse
	}
	if err != nil {
		return []error{err}, nil
	}
	defer db.Close()
	var found []error
	err = db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			found = append(found, e)
		}
		for _, t := range tables {
			// A catalog a build before calendars wrote has no such
			// table; Open adds it.
			if tx.Bucket([]byte(t)) == nil && t != Calendars {
				found = append(found, fmt.Errorf("table %s is missing", t))
			}
		}
		return nil
	})
	return found, err
}

// keysFill is how full bbolt fills the Keys table's pages when it splits
// them at a commit of keys that go in runs (inRuns); its default, half,
// is kept for the others. Producers' keys often grow in order (order-41,
// order-42): a commit's keys then go in together between the same two
// keys of the table (at its end, or, for numbers without leading zeros,
// around each one), every split is among them, and a page split in half
// is never filled again: the table took twice the disk its entries
// needed (200,000 such keys: 115 B each at half, 68 at 0.9). Keys that
// land one by one between keys of the table would fare worse than at
// half: pages split at 0.9 are split again by the next key (160 B against
// 239 for random keys). etcd uses 0.9 for its keys written in order.
const keysFill = 0.9

// inRuns reports whether most of keys (sorted) go into the table in
// runs: looked at every runSample-th key, no key of the table lies
// between it and the next one. cur is the table's.
func inRuns(cur *bolt.Cursor, keys []string) bool {
	runs, looked := 0, 0
	for i := 0; i+1 < len(keys); i += runSample {
		k, _ := cur.Seek([]byte(keys[i]))
		if k != nil && string(k) == keys[i] {
			k, _ = cur.Next() // the key is there already: look past it
		}
		looked++
		if k == nil || string(k) >= keys[i+1] {
			runs++
		}
	}
	return looked > 0 && 2*runs > looked
}

// runSample is how many keys inRuns passes over between two it looks at.
const runSample = 16

// initialMmap is the size of the catalog's first mapping of its file.
// bbolt maps the file afresh each time it outgrows the mapping, and before
// it does, it copies every key and value the open write transaction
// touched out of the old mapping onto the heap: while a catalog grows to
// its first gigabyte, a commit of a checkpoint's keys did that several
// times. A mapping past the file's end costs address space only (nothing
// is read or resident until used; the file grows as bbolt writes). On a
// 32-bit platform, where a gigabyte of address space is dear, bbolt's
// own growth applies.
const initialMmap = 1 << 30 * int(^uint(0)>>63)

package catalog

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// A Keys entry's value is the message's ID (EncodeID) and the time its
// Schedule arrived, UTC epoch milliseconds (i64, big-endian): the
// idempotency window runs from it. Values written before arrival times were
// kept are the ID alone (16 bytes): their arrival is unknown (0).
const keyValueSize = 24

// KeyID is a Keys entry for PutKeys: the key (KeyOf's bytes, as a string),
// the ID it names and when that message's Schedule arrived (0: unknown).
type KeyID struct {
	Key string
	ID  message.ID
	At  int64
}

// EncodeKey is a Keys entry's value.
func EncodeKey(id message.ID, at int64) []byte {
	var b [keyValueSize]byte
	putID(b[:], id)
	binary.BigEndian.PutUint64(b[16:], uint64(at))
	return b[:]
}

// DecodeKey decodes a Keys entry's value: the ID, and when its Schedule
// arrived (0 for a value written before that was kept).
func DecodeKey(v []byte) (id message.ID, at int64, ok bool) {
	switch len(v) {
	case 16:
		return getID(v), 0, true
	case keyValueSize:
		return getID(v), int64(binary.BigEndian.Uint64(v[16:])), true
	}
	return message.ID{}, 0, false
}

// PutKeys stages each pair of each batch in the Keys table, in order (a
// later pair with the same key wins), under one lock: reput stages the
// keys of routed records a batch at a time. It keeps the pairs' key
// strings and not the slices.
func (c *Catalog) PutKeys(batches ...[]KeyID) {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	if n == 0 {
		return
	}
	vals := make([]byte, keyValueSize*n) // one allocation for the values
	c.mu.Lock()
	m := c.stagedLocked(Keys, n)
	for _, b := range batches {
		for _, p := range b {
			v := vals[:keyValueSize:keyValueSize]
			vals = vals[keyValueSize:]
			putID(v, p.ID)
			binary.BigEndian.PutUint64(v[16:], uint64(p.At))
			m[p.Key] = v
		}
	}
	c.mu.Unlock()
}

// KeyHit is what LookupKeys found for one key.
type KeyHit struct {
	ID message.ID
	At int64 // when its Schedule arrived, UTC epoch ms; 0: unknown
	OK bool
}

// LookupKeys looks up each of keys (KeyOf's form) in the Keys table,
// staged entries first, in one read transaction for those it must read
// from the file, and sets hits[i].
func (c *Catalog) LookupKeys(keys []string, hits []KeyHit) error {
	var file []int
	c.mu.RLock()
	for i, k := range keys {
		hits[i] = KeyHit{}
		v, found := c.staged[Keys][k]
		if !found {
			v, found = c.committing[Keys][k]
		}
		if !found {
			file = append(file, i)
			continue
		}
		if v != nil {
			if err := c.hit(v, &hits[i]); err != nil {
				c.mu.RUnlock()
				return err
			}
		}
	}
	c.mu.RUnlock()
	if len(file) == 0 {
		return nil
	}
	return c.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(Keys))
		for _, i := range file {
			if v := bk.Get([]byte(keys[i])); v != nil {
				if err := c.hit(v, &hits[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (c *Catalog) hit(v []byte, h *KeyHit) error {
	id, at, ok := DecodeKey(v)
	if !ok {
		return &segfile.CorruptionError{Path: c.path, Offset: -1, Err: fmt.Errorf("catalog: a %d-byte value in table %s", len(v), Keys)}
	}
	*h = KeyHit{ID: id, At: at, OK: true}
	return nil
}

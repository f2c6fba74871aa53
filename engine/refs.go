package engine

import (
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/wheel"
)

// A wheel.Ref is an 8-bit slot and a 32-bit index (wheel.NewRef). A slot
// names a region of a loaded bucket: 32 GiB of its segment (an index is an
// entry offset within the region divided by the entry alignment of 8), or
// the bucket's entries rebuilt from the commitlog (an index into
// bucket.rebuilt). A bucket takes one slot per region that holds a loaded
// entry, almost always one, so a segment of any size is loaded whole while
// fewer than 256 regions are in memory (8 TiB of segments).
const (
	// regionShift is log2 of a region's size: 2^32 indexes of 8 bytes.
	regionShift = 32 + 3
	// rebuiltBase is the base of the region holding rebuilt entries.
	rebuiltBase = -1
)

// errSlotsFull is returned when 256 regions are loaded.
var errSlotsFull = errors.New("engine: 256 loaded segment regions (8 TiB) in memory; more cannot be referenced")

// slotRef is what a Ref's slot names.
type slotRef struct {
	b    *bucket
	base int64 // offset of index 0 in b's segment; rebuiltBase for b.rebuilt
}

// region is one slot a bucket holds.
type region struct {
	base int64
	slot uint8
}

// rebuiltEntry is an entry of a damaged region of a segment, read back
// from the commitlog: its seq and schedule payload.
type rebuiltEntry struct {
	seq     uint64
	payload []byte
}

// entryRef returns the Ref of the entry at off in b's segment, or, for a
// negative off, of b.rebuilt[-1-off]. It takes a slot for the entry's
// region if b has none yet. Driver goroutine only.
func (d *driver) entryRef(b *bucket, off int64) (wheel.Ref, error) {
	if off < 0 {
		slot, err := d.regionSlot(b, rebuiltBase)
		if err != nil {
			return 0, err
		}
		i := -1 - off
		if i > int64(^uint32(0)) {
			return 0, fmt.Errorf("engine: %d entries rebuilt for bucket %s; at most %d", i+1, fmtMs(b.start), uint64(^uint32(0))+1)
		}
		return wheel.NewRef(slot, uint32(i)), nil
	}
	if off < schedulelog.FirstOffset || off%schedulelog.Align != 0 {
		return 0, fmt.Errorf("engine: offset %d in bucket %s is not an entry offset", off, fmtMs(b.start))
	}
	base := off &^ (1<<regionShift - 1)
	slot, err := d.regionSlot(b, base)
	if err != nil {
		return 0, err
	}
	return wheel.NewRef(slot, uint32((off-base)/schedulelog.Align)), nil
}

// resolve returns the bucket and entry offset (negative for a rebuilt
// entry, as entryRef takes it) that ref names; b is nil for a slot no
// longer loaded.
func (d *driver) resolve(ref wheel.Ref) (b *bucket, off int64) {
	s := d.slots[ref.Bucket()]
	if s.b == nil {
		return nil, 0
	}
	if s.base == rebuiltBase {
		return s.b, -1 - int64(ref.Index())
	}
	return s.b, s.base + int64(ref.Index())*schedulelog.Align
}

// regionSlot returns b's slot for the region at base, taking a free one
// if b has none.
func (d *driver) regionSlot(b *bucket, base int64) (uint8, error) {
	for _, r := range b.regions {
		if r.base == base {
			return r.slot, nil
		}
	}
	for i := range d.slots {
		if d.slots[i].b == nil {
			d.slots[i] = slotRef{b: b, base: base}
			b.regions = append(b.regions, region{base: base, slot: uint8(i)})
			return uint8(i), nil
		}
	}
	return 0, errSlotsFull
}

// freeSlots releases every slot b holds.
func (d *driver) freeSlots(b *bucket) {
	for _, r := range b.regions {
		d.slots[r.slot] = slotRef{}
	}
	b.regions = nil
}

// entry decodes the entry at off of b (see entryRef) into m and returns
// its seq.
func (b *bucket) entry(off int64, m *message.Message) (uint64, error) {
	if off >= 0 {
		return b.mr.Entry(off, m)
	}
	i := -1 - off
	if i >= int64(len(b.rebuilt)) {
		return 0, fmt.Errorf("engine: no rebuilt entry %d in bucket %s", i, fmtMs(b.start))
	}
	re := &b.rebuilt[i]
	return re.seq, message.DecodeSchedule(re.payload, m)
}

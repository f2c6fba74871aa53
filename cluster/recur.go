package cluster

// Recurring schedules in cluster mode. A schedule belongs to the partition
// SchedulePartition(name). Its definition is a control item in that
// partition's intake stream, and each write of it (create, update, pause,
// resume, delete, and each firing, which arms the next occurrence) is one
// intake message holding the definition and the occurrence it arms:
// stored whole or not at all. The owner's local engine replays the items
// into its catalog, and a recur.Scheduler per partition, the local
// engine's sink in front of the partition's, runs on it as on one node,
// writing through recurStore.

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/recur"
)

// Headers of the control items of recurring schedules in intake messages.
// Part of the intake format; a Schedule that sets one is refused.
const (
	// recurPutHeader names the schedule whose definition the item's body
	// is (a ControlSchedule record's value).
	recurPutHeader = "hourglass-recur-put"
	// recurDeleteHeader names the schedule the item deletes.
	recurDeleteHeader = "hourglass-recur-delete"
	// recurOriginHeader is on a compaction's copy of a definition: the
	// intake sequence of the item it copies (8 bytes, big-endian).
	recurOriginHeader = "hourglass-recur-origin"
)

// reservedHeader reports whether a Schedule may not set the header k.
func reservedHeader(k string) bool {
	switch k {
	case idHeader, replacesHeader, recurPutHeader, recurDeleteHeader, recurOriginHeader:
		return true
	}
	return false
}

// SchedulePartition is the partition of the recurring schedule name: its
// definition and its occurrences are there.
func SchedulePartition(name string, partitions int) int {
	return KeyPartition("", name, partitions)
}

// defMark is what the owner knows of a schedule's latest control item:
// its intake sequence (a copy's origin) and whether it deleted it.
type defMark struct {
	seq     uint64
	deleted bool
}

// controlItem encodes c as an intake item; origin, if not 0, marks it a
// compaction's copy of the item at that sequence.
func controlItem(c message.Control, origin uint64, now time.Time) message.Message {
	m := message.Message{DeliverAt: now.UnixMilli(), Body: c.Value}
	k := recurPutHeader
	if c.Kind == message.ControlScheduleDelete {
		k = recurDeleteHeader
	}
	m.Headers = []message.Header{{Key: []byte(k), Value: c.Name}}
	if origin > 0 {
		m.Headers = append(m.Headers, message.Header{Key: []byte(recurOriginHeader), Value: binary.BigEndian.AppendUint64(nil, origin)})
	}
	return m
}

// itemControl returns the control record an intake item holds and the
// sequence of the item it copies (0: it is the original), or false if it
// is a message. An item naming both kinds, one of them twice, or an origin
// that is not 8 bytes is an error (its item is skipped).
func itemControl(m *message.Message) (message.Control, uint64, bool, error) {
	var c message.Control
	var origin uint64
	kinds, origins := 0, 0
	for _, h := range m.Headers {
		switch string(h.Key) {
		case recurPutHeader:
			c = message.Control{Kind: message.ControlSchedule, Name: h.Value, Value: m.Body}
			kinds++
		case recurDeleteHeader:
			c = message.Control{Kind: message.ControlScheduleDelete, Name: h.Value}
			kinds++
		case recurOriginHeader:
			if len(h.Value) != 8 {
				return c, 0, true, fmt.Errorf("cluster: header %s of %d bytes; want 8", recurOriginHeader, len(h.Value))
			}
			origin = binary.BigEndian.Uint64(h.Value)
			origins++
		}
	}
	switch {
	case kinds == 0 && origins == 0:
		return c, 0, false, nil
	case kinds != 1:
		return c, 0, true, fmt.Errorf("cluster: a schedule's control item with %d of the headers %s and %s; want one", kinds, recurPutHeader, recurDeleteHeader)
	case origins > 1:
		return c, 0, true, fmt.Errorf("cluster: header %s twice", recurOriginHeader)
	case len(c.Name) == 0:
		return c, 0, true, fmt.Errorf("cluster: a schedule's control item without a name")
	}
	return c, origin, true, nil
}

// noteControl decides whether the control item c, read at intake sequence
// seq (a copy of the one at origin), is applied: not if a later item of
// its schedule was applied (a compaction's copy stored after a write that
// replaced it). Called with mu held.
func (pt *partition) noteControl(c message.Control, seq, origin uint64) bool {
	at := seq
	if origin > 0 {
		at = origin
	}
	name := string(c.Name)
	if mk, ok := pt.mu.defSeq[name]; ok && mk.seq >= at {
		return false
	}
	pt.mu.defSeq[name] = defMark{seq: at, deleted: c.Kind == message.ControlScheduleDelete}
	return true
}

// copyDefs adds to pk a copy of each schedule definition whose latest item
// is at or below l0 (which the purge removes), once the intake stream was
// consumed up to l0: the catalog then holds that definition or a later one
// (consumed since, above l0 and kept, which replays over the copy in
// either order, as the copy carries the older item's sequence).
func (pt *partition) copyDefs(ctx context.Context, l0 uint64, pk *packer) error {
	pt.mu.Lock()
	eng := pt.mu.eng
	type def struct {
		name string
		seq  uint64
	}
	var defs []def
	for name, mk := range pt.mu.defSeq {
		if mk.seq <= l0 && !mk.deleted {
			defs = append(defs, def{name, mk.seq})
		}
	}
	pt.mu.Unlock()
	if len(defs) == 0 {
		return nil
	}
	if err := eng.WaitRouted(ctx); err != nil {
		return err
	}
	now := pt.n.now()
	for _, d := range defs {
		v, ok, err := eng.Setting(catalog.Schedules, d.name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := pk.add(controlItem(message.Control{Kind: message.ControlSchedule, Name: []byte(d.name), Value: v}, d.seq, now)); err != nil {
			return err
		}
	}
	return pk.flush()
}

// forgetDeleted drops the marks of deletions at or below l0: after the
// purge no item of those schedules below them is left. Called with mu
// held.
func (pt *partition) forgetDeleted(l0 uint64) {
	for name, mk := range pt.mu.defSeq {
		if mk.deleted && mk.seq <= l0 {
			delete(pt.mu.defSeq, name)
		}
	}
}

// recurStore is a partition as the store of its recur.Scheduler: writes
// are intake messages of the partition, reads its local engine's
// catalog once it has consumed them.
type recurStore struct {
	pt  *partition
	eng *engine.Engine
}

var _ recur.Store = recurStore{}

func (s recurStore) Now() time.Time         { return s.pt.n.now() }
func (s recurStore) Ready() <-chan struct{} { return s.eng.Ready() }

func (s recurStore) Load(name string) ([]byte, bool, error) {
	return s.eng.Setting(catalog.Schedules, name)
}

// Calendar finds none: calendars are not served in cluster mode (the
// server refuses schedules that name one).
func (s recurStore) Calendar(string) ([]byte, bool, error) { return nil, false, nil }

func (s recurStore) Scan(after []byte, n int, fn func(name, value []byte)) ([]byte, error) {
	return s.eng.ScanSettings(catalog.Schedules, after, n, fn)
}

// Write publishes ctls and the occurrences reqs as one intake message of
// the partition (with retry as its Nats-Msg-Id: a firing handed over
// again within the intake stream's duplicate window is stored once), and
// answers once JetStream stored it while this node held the partition.
func (s recurStore) Write(ctx context.Context, reqs []engine.Request, ctls []message.Control, retry string) error {
	pt := s.pt
	n := pt.n
	if !pt.lease.valid(n.now()) {
		return errLeaseLost
	}
	now := n.now()
	ms := make([]message.Message, 0, len(ctls)+len(reqs))
	for _, c := range ctls {
		ms = append(ms, controlItem(c, 0, now))
	}
	for i, r := range reqs {
		at := deliverAt(r, now)
		if at > now.UnixMilli()+n.opts.MaxDelay.Milliseconds() {
			return fmt.Errorf("%w: occurrence %d is due at %s, beyond the max delay %v", engine.ErrTooFar, i, time.UnixMilli(at).UTC().Format(time.RFC3339), n.opts.MaxDelay)
		}
		ms = append(ms, message.Message{DeliverAt: at, Attempt: r.Attempt, Topic: []byte(r.Topic), Headers: r.Headers, Body: r.Body, Origin: r.Origin})
	}
	if len(ms) == 0 {
		return nil
	}
	ids, err := n.publishIntake(ctx, pt.p, ms, retry)
	if err != nil {
		// It may be stored all the same (a PubAck lost): the next
		// WaitRouted reads the stream to its end first, so that a firing
		// handed over again finds what this one armed rather than arming
		// again (at another time, if its misfire policy arms from now,
		// where retry would not match).
		pt.recurSynced.Store(false)
		return err
	}
	_, seq, _ := SplitID(ids[0])
	pt.mu.Lock()
	pt.mu.written = max(pt.mu.written, seq)
	pt.mu.Unlock()
	// Stored after the lease ran out, it may be missed by the new owner,
	// which read the stream when it took over.
	if !pt.lease.valid(n.now()) {
		return unavailable("partition %d moved while storing a recurring schedule; the outcome is unknown, retry", pt.p)
	}
	return nil
}

// WaitRouted waits until the local engine's catalog holds every write of
// this owner, and, the first time, everything the stream held (what the
// previous owners wrote): an occurrence handed over again after a
// takeover must find the schedule's armed time as its last owner left it.
func (s recurStore) WaitRouted(ctx context.Context) error {
	pt := s.pt
	if !pt.recurSynced.Load() {
		if err := pt.caughtUp(ctx); err != nil {
			return err
		}
		pt.recurSynced.Store(true)
	}
	pt.mu.Lock()
	w := pt.mu.written
	pt.mu.Unlock()
	if err := pt.waitConsumed(ctx, w); err != nil {
		return err
	}
	return s.eng.WaitRouted(ctx)
}

func (s recurStore) Lookup(ctx context.Context, topic, key string) (message.ID, bool, error) {
	return s.pt.lookup(ctx, topic, key)
}

// LookupKept is Lookup: a partition's keys are its own (Backfill asks).
func (s recurStore) LookupKept(ctx context.Context, topic, key string) (message.ID, bool, error) {
	return s.pt.lookup(ctx, topic, key)
}

func (s recurStore) Cancel(ctx context.Context, id message.ID) (engine.CancelResult, error) {
	return s.pt.cancel(ctx, id)
}

func (s recurStore) Get(ctx context.Context, id message.ID) (engine.Found, error) {
	f, _, err := s.pt.get(ctx, id)
	return f, err
}

// scheduler returns the partition's Scheduler once its local engine is
// open and its catalog holds what the stream held.
func (pt *partition) scheduler(ctx context.Context) (*recur.Scheduler, error) {
	if err := pt.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := (recurStore{pt: pt, eng: pt.localEngine()}).WaitRouted(ctx); err != nil {
		return nil, err
	}
	return pt.sched, nil
}

func (pt *partition) localEngine() *engine.Engine {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.mu.eng
}

// sinkOut is the partition's delivery as the next sink of its Scheduler.
type sinkOut struct{ pt *partition }

func (o sinkOut) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	return o.pt.deliver(ctx, topic, batch)
}

// Deliver implements engine.Sink for the local engine: it leaves out the
// messages that are done (cancelled: a cancelled occurrence arms
// nothing, as on one node, where the repair pass arms the next) and hands
// the rest to the partition's Scheduler, which arms the next occurrences
// and passes them on to deliver.
func (pt *partition) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	if !pt.lease.valid(pt.n.now()) {
		return errLeaseLost
	}
	kept := make([]engine.Delivery, 0, len(batch))
	pt.mu.Lock()
	for _, d := range batch {
		id, _ := idFromBytes([]byte(message.HeaderValue(d.Message.Headers, idHeader)))
		if _, done := pt.mu.done[id]; done && !id.IsZero() {
			delete(pt.mu.taken, id)
			continue
		}
		kept = append(kept, d)
	}
	pt.mu.Unlock()
	if len(kept) == 0 {
		return nil
	}
	return pt.sched.Deliver(ctx, topic, kept)
}

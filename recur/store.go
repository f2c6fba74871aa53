package recur

import (
	"context"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Store is where a Scheduler keeps its definitions and occurrences: the
// engine of one node (Attach), or a cluster partition whose durable
// state is in JetStream (AttachStore). Its methods may be called from
// any goroutine.
type Store interface {
	// Now is the store's clock.
	Now() time.Time
	// Ready is closed once the store serves (the engine has recovered).
	Ready() <-chan struct{}
	// Load returns the stored definition name (a ControlSchedule record's
	// value) as of the last write WaitRouted covered.
	Load(name string) ([]byte, bool, error)
	// Scan pages through the stored definitions in name order after
	// after, calling fn for up to n of them, and returns the name to go
	// on after (nil: no more).
	Scan(after []byte, n int, fn func(name, value []byte)) ([]byte, error)
	// Write stores the control records ctls and the occurrences reqs
	// atomically: all of them are durable, or none is. A non-empty retry
	// names the write: a second Write of the same retry (a firing handed
	// over again after a failure) is stored once, as long as the store
	// remembers it.
	Write(ctx context.Context, reqs []engine.Request, ctls []message.Control, retry string) error
	// WaitRouted returns once Load and Scan see every write that returned
	// before the call (and, for a cluster partition, every write its
	// previous owners made).
	WaitRouted(ctx context.Context) error
	// Calendar returns the stored calendar name (a ControlCalendar
	// record's value), if there is one.
	Calendar(name string) ([]byte, bool, error)
	// Lookup, LookupKept, Cancel and Get are the engine's, for the
	// occurrences.
	Lookup(ctx context.Context, topic, key string) (message.ID, bool, error)
	LookupKept(ctx context.Context, topic, key string) (message.ID, bool, error)
	Cancel(ctx context.Context, id message.ID) (engine.CancelResult, error)
	Get(ctx context.Context, id message.ID) (engine.Found, error)
}

// engineStore is a local engine as a Store: definitions in its catalog's
// schedules table, each write one commitlog append.
type engineStore struct{ *engine.Engine }

func (e engineStore) Load(name string) ([]byte, bool, error) {
	return e.Setting(catalog.Schedules, name)
}

func (e engineStore) Calendar(name string) ([]byte, bool, error) {
	return e.Setting(catalog.Calendars, name)
}

func (e engineStore) Scan(after []byte, n int, fn func(name, value []byte)) ([]byte, error) {
	return e.ScanSettings(catalog.Schedules, after, n, fn)
}

// Write ignores retry: a firing writes under the schedule's lock, in the
// append that records the armed time, and needs no deduplication.
func (e engineStore) Write(ctx context.Context, reqs []engine.Request, ctls []message.Control, _ string) error {
	_, err := e.ScheduleWith(ctx, reqs, ctls)
	return err
}

// Service is what the recurring-schedule RPCs call: a Scheduler on one
// node, or a cluster node's schedules (package cluster), which routes
// each call to the Scheduler of the schedule's partition.
type Service interface {
	Create(ctx context.Context, d *Def) (time.Time, error)
	Update(ctx context.Context, d *Def) (time.Time, error)
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) (time.Time, error)
	Delete(ctx context.Context, name string) error
	Get(ctx context.Context, name string, n int) (Info, error)
	List(ctx context.Context, after, topic string, n, nextN int) ([]Info, string, error)
	Backfill(ctx context.Context, name string, from, to time.Time) (Backfilled, error)
}

var _ Service = (*Scheduler)(nil)

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// Defaults for zero Options fields.
const (
	DefaultSegmentDuration = time.Hour
	DefaultPreloadLead     = 10 * time.Minute
	// MaxHandoffLead bounds Options.HandoffLead.
	MaxHandoffLead  = time.Second
	DefaultMaxDelay = 10 * 365 * 24 * time.Hour
	// DefaultStallAfter is how long a stage of the data path (routing,
	// loading, firing) may fail and retry before Health reports it and
	// Schedule refuses new messages with its StallError.
	DefaultStallAfter = 2 * time.Second
	// defaultFireBatch is the most messages the driver puts in one batch
	// for a topic's lane.
	defaultFireBatch = 512
	// MaxSinkBatchBytes bounds the encoded messages the engine merges into
	// one Sink call (Options.SinkBatch); a single fired batch may exceed it.
	MaxSinkBatchBytes  = 8 << 20
	DefaultMaxInflight = 1 << 16
	// DefaultMaxSinkBackoff is Options.MaxSinkBackoff's default.
	DefaultMaxSinkBackoff = 30 * time.Second
	// MinSinkBackoff and MaxSinkBackoffLimit bound Options.MaxSinkBackoff.
	MinSinkBackoff      = 10 * time.Millisecond
	MaxSinkBackoffLimit = time.Hour
)

// Delivery is one due message handed to a Sink.
type Delivery struct {
	ID message.ID
	// Message is valid only during the Deliver call: its slices point into
	// a buffer the engine reuses for later batches. A Sink that keeps
	// anything past the call copies it.
	Message *message.Message
}

// Sink receives due messages. Deliver is called with due messages of one
// topic, in the order they fired (deliverAt order among the messages in the
// wheel at that moment; a message scheduled to fire at once can follow one
// due a moment later that was already routed), from one goroutine per
// topic at a time
// (different topics concurrently). Returning nil means every message in
// the batch is safely delivered: the engine then records them done, and a
// restart never delivers them again. On error the batch is retried after
// a backoff (at least once delivery); a failing topic does not hold up
// the others.
type Sink interface {
	Deliver(ctx context.Context, topic string, batch []Delivery) error
}

// ExpiryHandler is implemented by a Sink that may keep messages past
// their expiry (message.ExpireAtHeader) from consumers itself, as the
// built-in queue does when a Receive reaches one. To any other Sink, and
// to one whose HandlesExpiry is false, the engine hands no message past
// its expiry: it records it dead-lettered instead (Stats.Expired).
type ExpiryHandler interface {
	// HandlesExpiry says whether the Sink keeps expired messages from
	// consumers (a Sink that wraps another asks the one it wraps).
	HandlesExpiry() bool
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, topic string, batch []Delivery) error

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, topic string, batch []Delivery) error {
	return f(ctx, topic, batch)
}

// Options configure an Engine. Only Dir and Sink are required.
type Options struct {
	// Dir is the data directory; created if missing. It holds
	// commitlog/ and schedule/.
	Dir string
	// SegmentDuration is the bucket length of new schedule segments, a
	// whole number of seconds from 1 s to 24 h; default 1 h.
	SegmentDuration time.Duration
	// PreloadLead is how long before a bucket starts it is loaded into
	// the wheel; default 10 min, and it must be shorter than
	// SegmentDuration (default: a sixth of SegmentDuration when that is
	// under an hour).
	PreloadLead time.Duration
	// Fsync is the commitlog durability policy; default always.
	Fsync commitlog.SyncPolicy
	// MaxDelay bounds how far ahead a message may be scheduled; default 10
	// years. Beyond it Schedule fails with an error naming the limit.
	MaxDelay time.Duration
	// Now is the wall clock; default time.Now. Due checks use it, so a
	// backward jump never fires early. Sleeping uses timers (monotonic).
	Now func() time.Time
	// Sink receives due messages. Required.
	Sink Sink
	// IdempotencyWindow is how long a Request's IdempotencyKey is
	// remembered per topic; 0 turns keys off (they are still stored as a
	// header). After a restart the keys of the records the commitlog still
	// holds (at least its newest full segment) are remembered again.
	IdempotencyWindow time.Duration
	// HandoffLead hands each message to the Sink up to this long before
	// its deliverAt instead of at it, so that the sink's own write (an
	// fsync in the built-in queue) is done by the time the message is due.
	// Only for a sink that keeps every message from its consumers until
	// its Delivery's deliverAt (queue.Queue does): the engine no longer
	// guarantees I4 itself. A Cancel within the lead of deliverAt answers
	// AlreadyDone. Default 0: at deliverAt. At most MaxHandoffLead.
	HandoffLead time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// CommitlogSegmentSize is the size of a commitlog segment file;
	// default commitlog's (a cluster partition, whose local state is
	// rebuilt from its stream, uses smaller ones).
	CommitlogSegmentSize int64
	// SinkBatch bounds the messages in one Sink call: while the sink is
	// busy, a topic's waiting batches are merged into the next call up to
	// this many messages (and about MaxSinkBatchBytes of them). Default and
	// at least 512, the most the driver fires for a topic at once. A sink
	// that writes a batch with one fsync (queue.Queue) drains a burst
	// faster with a larger one; its first message then waits for the whole
	// batch's write.
	SinkBatch int
	// MaxInflight bounds the messages handed to the sink and not yet
	// confirmed; beyond it due messages wait in the wheel. Default 65536.
	MaxInflight int
	// OnControl, if set, receives every control record reput routes (a
	// topic's policy, a recurring schedule), in commitlog order, also
	// those after the checkpoint again at each start: it must be
	// idempotent. It runs on reput's goroutine and must not block long.
	OnControl func(message.Control)
	// OnFsync, if set, is called after each commitlog fsync with how long
	// it took (for metrics). It must not block.
	OnFsync func(time.Duration)
	// MaxSinkBackoff is the longest wait between retries of a failing
	// sink call: the wait starts at 50 ms (or this, if shorter) and
	// doubles up to it. Default 30 s; from MinSinkBackoff to
	// MaxSinkBackoffLimit. A short one resumes delivery soon after a sink
	// that failed for a while (a NATS election) answers again.
	MaxSinkBackoff time.Duration
	// Observer, if set, receives events for metrics. Its methods are
	// called from the engine's goroutines and must not block.
	Observer Observer

	// LaneIdle is how long a topic's lane (its two delivery goroutines)
	// lives on with nothing to deliver; default DefaultLaneIdle, negative
	// until Close. The root package sets it to the queue's idle-topic
	// timeout, so that an idle topic holds no goroutine anywhere.
	LaneIdle time.Duration

	// CountPending makes Open count what each topic holds pending
	// (Engine.PendingOf) when the last Close left no counts file (after a
	// crash): every schedule segment and dispatch log is read once before
	// the first bucket loads, which delays Ready. Without it PendingOf
	// answers ErrNotCounted unless that file was there.
	CountPending bool

	// fireBatch bounds the messages the driver puts in one batch for a
	// topic's lane; default defaultFireBatch. Tests make it small.
	fireBatch int
	// afterWatch, if set, is called by a bucket's loader once reput
	// watches the bucket, before it reads the segment. Tests hold a load
	// there.
	afterWatch func(bucket int64)
}

// Observer receives engine events for metrics. Embed NopObserver to
// implement only some methods.
type Observer interface {
	// Fired is called when a message is handed to the sink, with how late
	// that is after its deliverAt (negative, by up to HandoffLead, when it
	// is handed over early).
	Fired(topic string, lateness time.Duration)
	// Done is called when a message's done-record is durable.
	Done(topic string, n int)
	// Retried is called when a sink call failed and will be retried.
	Retried(topic string, n int, err error)
}

// NopObserver ignores every event.
type NopObserver struct{}

// Fired does nothing.
func (NopObserver) Fired(string, time.Duration) {}

// Done does nothing.
func (NopObserver) Done(string, int) {}

// Retried does nothing.
func (NopObserver) Retried(string, int, error) {}

func (o *Options) fill() error {
	if o.Dir == "" {
		return errors.New("engine: Options.Dir is empty")
	}
	if o.Sink == nil {
		return errors.New("engine: Options.Sink is nil: due messages need somewhere to go")
	}
	if o.SegmentDuration == 0 {
		o.SegmentDuration = DefaultSegmentDuration
	}
	if err := schedulelog.ValidateDuration(o.SegmentDuration); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if o.HandoffLead < 0 || o.HandoffLead > MaxHandoffLead {
		return fmt.Errorf("engine: handoff lead %v: from 0 to %v", o.HandoffLead, MaxHandoffLead)
	}
	if o.PreloadLead == 0 {
		o.PreloadLead = min(DefaultPreloadLead, o.SegmentDuration/6)
	}
	if o.PreloadLead < 0 || o.PreloadLead >= o.SegmentDuration {
		return fmt.Errorf("engine: preload lead %v must be positive and shorter than the segment duration %v", o.PreloadLead, o.SegmentDuration)
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.MaxDelay < 0 {
		return fmt.Errorf("engine: max delay %v is negative", o.MaxDelay)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.fireBatch <= 0 {
		o.fireBatch = defaultFireBatch
	}
	if o.SinkBatch <= 0 {
		o.SinkBatch = o.fireBatch
	}
	if o.SinkBatch < o.fireBatch {
		return fmt.Errorf("engine: sink batch %d is below the fire batch %d: a Sink call must hold a fired batch; set at least %d", o.SinkBatch, o.fireBatch, o.fireBatch)
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.LaneIdle == 0 {
		o.LaneIdle = DefaultLaneIdle
	}
	if o.MaxSinkBackoff == 0 {
		o.MaxSinkBackoff = DefaultMaxSinkBackoff
	}
	if o.MaxSinkBackoff < MinSinkBackoff || o.MaxSinkBackoff > MaxSinkBackoffLimit {
		return fmt.Errorf("engine: max sink backoff %v: from %v to %v (0 for the default %v)", o.MaxSinkBackoff, MinSinkBackoff, MaxSinkBackoffLimit, DefaultMaxSinkBackoff)
	}
	return nil
}

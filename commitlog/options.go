package commitlog

import (
	"fmt"
	"log/slog"
	"time"
)

// SyncPolicy says when appended records are made durable.
type SyncPolicy int

const (
	// SyncAlways makes Append return only after an fsync covers its records.
	// Appenders waiting at the same time share one fsync (group commit).
	// It is the zero value.
	SyncAlways SyncPolicy = iota
	// SyncInterval flushes at least every Options.SyncInterval; Append
	// returns before its records are durable.
	SyncInterval
	// SyncNone never flushes before Close. For tests and benchmarks only:
	// a machine crash can lose any amount of acknowledged data.
	SyncNone
)

var policyNames = [...]string{SyncAlways: "always", SyncInterval: "interval", SyncNone: "none"}

func (p SyncPolicy) String() string {
	if p >= 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// ParseSyncPolicy parses "always", "interval" or "none".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	for p, name := range policyNames {
		if s == name {
			return SyncPolicy(p), nil
		}
	}
	return 0, fmt.Errorf("commitlog: unknown fsync policy %q: want always, interval or none", s)
}

// Defaults for zero Options fields.
const (
	DefaultSegmentSize  = 128 << 20
	DefaultSyncInterval = 10 * time.Millisecond
	DefaultAllocStep    = 4 << 20
)

// Options configure a Log. The zero value of every field but Dir is usable.
type Options struct {
	// Dir holds the segment files. It is created if missing.
	Dir string
	// SegmentSize is the size of each new segment file including its
	// header; default 128 MiB, at least 4 KiB. Existing segments keep the
	// size they were created with.
	SegmentSize int64
	// AllocStep is how much disk a segment claims at a time: a new
	// segment file has its full size but blocks for only its first
	// AllocStep bytes, and more are allocated AllocStep at a time ahead of
	// the writes. Default 4 MiB, at least 4 KiB, at most SegmentSize. A
	// full disk fails only the appends that need a new step (ErrDiskFull),
	// and they work again as soon as that much space is free. Small logs
	// (a queue topic's) use a small step so that they cost what they hold.
	AllocStep int64
	// Sync is the durability policy; default SyncAlways.
	Sync SyncPolicy
	// SyncInterval bounds the time between flushes under SyncInterval;
	// default 10 ms.
	SyncInterval time.Duration
	// ReadOnly opens the log without modifying anything: no recovery
	// truncation, no preallocation, no appends. Safe beside a running
	// writer; a torn tail is treated as the end of the log.
	ReadOnly bool
	// Logger receives recovery reports; default slog.Default().
	Logger *slog.Logger
	// FallocateFirst allocates the first segment of a new log with
	// fallocate even under SyncAlways, where space is otherwise written
	// with zeros ahead of need: Open of a new log writes no zeros, and
	// the fsyncs in that first step cost more (each converts extents).
	// For logs created on the request path, such as queue topics.
	FallocateFirst bool
	// MinEnd is a position another file names (the reput checkpoint, a
	// queue's acknowledged position): a log that recovers to an end below
	// it is damaged, not torn, and Open returns a *segfile.CorruptionError
	// instead of truncating. Zero means no such position is known.
	MinEnd int64
	// MinEndFrom names what named MinEnd in error messages, such as "the
	// reput checkpoint schedule/reput.checkpoint"; default "another file".
	MinEndFrom string
	// PadToMinEnd makes Open write a skip record from a torn or clean end
	// up to MinEnd (or a little past it) instead of refusing, when no
	// valid record lies beyond the end. Set it for a log whose fsync
	// policy lets a power loss take what another file already names
	// (SyncInterval, SyncNone): those records are the policy's allowed
	// loss, and the skip keeps their offsets from being used again. Under
	// SyncAlways an end below MinEnd is damage, and Open refuses.
	PadToMinEnd bool
	// OnSync, if set, is called after each fsync with its duration (for
	// metrics). It runs on the syncing goroutine and must not block.
	OnSync func(time.Duration)
}

func (o *Options) fill() error {
	if o.Dir == "" {
		return fmt.Errorf("commitlog: Options.Dir is empty")
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < minSegmentSize {
		return fmt.Errorf("commitlog: segment size %d bytes is too small: at least %d", o.SegmentSize, minSegmentSize)
	}
	if o.AllocStep == 0 {
		o.AllocStep = DefaultAllocStep
	}
	if o.AllocStep < minSegmentSize {
		return fmt.Errorf("commitlog: allocation step %d bytes is too small: at least %d", o.AllocStep, minSegmentSize)
	}
	o.AllocStep = min(o.AllocStep, o.SegmentSize)
	if o.Sync < SyncAlways || o.Sync > SyncNone {
		return fmt.Errorf("commitlog: unknown fsync policy %d", o.Sync)
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MinEndFrom == "" {
		o.MinEndFrom = "another file"
	}
	return nil
}

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
)

// Options configure a Log. The zero value of every field but Dir is usable.
type Options struct {
	// Dir holds the segment files. It is created if missing.
	Dir string
	// SegmentSize is the size of each new segment file including its
	// header; default 128 MiB, at least 4 KiB. Existing segments keep the
	// size they were created with.
	SegmentSize int64
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
	// FallocateFirst creates the first segment of a new log with
	// fallocate even under SyncAlways, where later segments are written
	// with zeros ahead of need: Open of a new log returns in about a
	// millisecond instead of after writing a segment of zeros, and the
	// fsyncs in that first segment cost more (each converts extents).
	// For logs created on the request path, such as queue topics.
	FallocateFirst bool
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
	if o.Sync < SyncAlways || o.Sync > SyncNone {
		return fmt.Errorf("commitlog: unknown fsync policy %d", o.Sync)
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// Defaults for zero Options fields, and hard limits.
const (
	DefaultMaxAttempts     = 16
	DefaultLease           = 30 * time.Second
	DefaultMaxLease        = 12 * time.Hour
	DefaultSegmentSize     = 16 << 20
	DefaultAckSegmentSize  = 1 << 20
	DefaultCheckpointEvery = 4096
	DefaultMaxTopics       = 10000

	// MaxReceive is the most messages one Receive may ask for.
	MaxReceive = 10000
	// MaxTopicLen is the longest topic a producer may name; its dead-letter
	// topic adds DLQSuffix.
	MaxTopicLen = 200
	// DLQSuffix names a topic's dead-letter topic: "orders" -> "orders.dlq".
	DLQSuffix = ".dlq"
)

var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("queue: closed")
	// ErrNotLeased is returned by Ack and Nack for a message that is not
	// leased: never received, already acked or nacked, or its lease ran out
	// (it is then receivable again, or dead-lettered).
	ErrNotLeased = errors.New("queue: message not leased (unknown, already settled, or its lease expired)")
	// ErrExpired is returned by Ack for a message past its expiry in a
	// topic whose policy expires messages not acked by then
	// (Expiry.Unacked): it ended as expired instead.
	ErrExpired = errors.New("queue: message expired before it was acked")
	// ErrNotWaiting is returned by Take for a message that does not wait
	// to be received (leased, acked, or not there).
	ErrNotWaiting = errors.New("queue: message not waiting to be received")
	// ErrInvalidTopic is wrapped by the error for a topic name ValidateTopic rejects.
	ErrInvalidTopic = errors.New("queue: invalid topic")
	// ErrInvalid is wrapped by the error for an argument out of range.
	ErrInvalid = errors.New("queue: invalid argument")
	// ErrNoReschedule is returned by Nack with a delay when no Reschedule
	// function is set (SetReschedule).
	ErrNoReschedule = errors.New("queue: Nack with a delay needs a Reschedule function; none is set")
	// ErrTooManyTopics is wrapped by Admit's error for a new topic beyond
	// Options.MaxTopics.
	ErrTooManyTopics = errors.New("queue: too many topics")
	// ErrTooLarge is wrapped by Deliver's error for a message that cannot
	// fit in one queue-log segment (Options.SegmentSize).
	ErrTooLarge = errors.New("queue: message larger than a queue-log segment")
)

// RescheduleFunc schedules a retry of a nacked message; it is the engine's
// Schedule. It returns the new message's ID once the retry is durable.
type RescheduleFunc func(ctx context.Context, req engine.Request) (message.ID, error)

// Options configure a Queue. Only Dir is required.
type Options struct {
	// Dir holds the queue's data: Dir/topics/<topic>/{log,acks}/. It is
	// created if missing.
	Dir string
	// MaxAttempts is how many times a message is handed out before a
	// failure (an expired lease or a Nack) sends it to <topic>.dlq instead;
	// default 16. Attempts count from the message's Attempt field, which a
	// Nack's retry raises.
	MaxAttempts int
	// DefaultLease is the lease of a Receive that asks for none; default 30 s,
	// at most DefaultMaxLease, the longest lease a Receive may ask for.
	DefaultLease time.Duration
	// Now is the wall clock; default time.Now. It decides when a message
	// is due (never received before its deliverAt) and the times a
	// Message shows (ReceivedAt, LeaseUntil). Leases run on the monotonic
	// clock instead, so a step of the wall clock neither expires them nor
	// prolongs them.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Fsync is the durability policy of every queue and ack log; default
	// always: Deliver and Ack return only after an fsync covers them,
	// shared by concurrent callers of the same topic (group commit).
	// Under interval Acks return at once and are synced at the interval,
	// but Deliver still waits for an fsync of the queue log: consumers
	// see only what it holds durably, and the interval would make every
	// message up to that much later.
	Fsync commitlog.SyncPolicy
	// SegmentSize is the size of a queue-log segment file; default 16 MiB.
	// A message must fit in one segment (its body plus about 60 bytes and
	// its headers): larger ones make Deliver fail with ErrTooLarge, so
	// the server must bound message sizes below it. Disk is claimed in
	// 64 KiB steps as a segment fills, not a segment at a time.
	SegmentSize int64
	// AckSegmentSize is the size of an ack-log segment file; default 1 MiB,
	// at least 4 KiB.
	AckSegmentSize int64
	// MaxTopics bounds the topics Admit lets in, dead-letter topics
	// included; default DefaultMaxTopics, -1 for no limit. Deliver never
	// refuses a topic: what Admit let in before a restart is delivered
	// after it even beyond the limit, and so is a dead letter whose
	// dead-letter topic is new.
	MaxTopics int
	// The unexported fields are set by tests only.

	// maxLease bounds the lease a Receive may ask for; default
	// DefaultMaxLease.
	maxLease time.Duration
	// checkpointEvery is how many acks of a topic may follow its last
	// checkpoint before the next is written (at least as many as the
	// topic's outstanding messages); default DefaultCheckpointEvery.
	// Checkpoints bound restart time and the memory restart needs, and let
	// retention delete acked queue-log segments.
	checkpointEvery int
	// stallAfter is how long a stage of a topic may fail before Health
	// reports it; default DefaultStallAfter.
	stallAfter time.Duration
	// dedupWindow is how many of a topic's last records Open remembers;
	// default DefaultDedupWindow, -1 turns it off (see DefaultDedupWindow).
	dedupWindow int

	// since is the lease clock: the monotonic time elapsed since t;
	// default time.Since. Tests step it apart from Now.
	since func(t time.Time) time.Duration

	// IdleTopic is how long a topic stays open with nothing leased or
	// being written and no Receive waiting; then it writes a checkpoint
	// and closes its logs (files, mappings, goroutines) until it is used
	// again, so that a topic costs memory and descriptors only while in
	// use. Default DefaultIdleTopic (1 minute); negative: until Close.
	IdleTopic time.Duration
	// beforeRetire, if set, is called by the sweeper for each topic it
	// retires, after no caller can take it and before its logs close
	// (tests race a new message with the retirement).
	beforeRetire func(topic string)

	// onAckSync, if set, is called by each ack log's syncer after every
	// fsync and before the records it covers count as durable (tests hold
	// an fsync in flight with it).
	onAckSync func(time.Duration)
	// syncInterval, if set, replaces commitlog.DefaultSyncInterval for
	// the logs under SyncInterval (tests make it long).
	syncInterval time.Duration
	// HoldReceives keeps Receives from handing anything out until
	// ReleaseReceives: the owner of the topics' policies sets them first
	// (a paused topic must not hand out messages at start-up).
	HoldReceives bool
}

// DefaultDedupWindow is how many of a topic's last records Open remembers,
// so that Deliver drops the messages the engine delivers again after a
// crash that came before it recorded them done (a second copy would
// otherwise be handed out after the first was acked). It must be at least
// the engine's MaxInflight: the server sets that to it. It costs about 50
// bytes per remembered ID, per topic, until the ID is delivered again or
// the process ends.
const DefaultDedupWindow = 16384

func (o *Options) fill() error {
	if o.Dir == "" {
		return errors.New("queue: Options.Dir is empty")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.stallAfter <= 0 {
		o.stallAfter = DefaultStallAfter
	}
	if o.MaxTopics == 0 {
		o.MaxTopics = DefaultMaxTopics
	}
	if o.MaxTopics < -1 {
		return fmt.Errorf("queue: max topics %d: at least 1, or -1 for no limit", o.MaxTopics)
	}
	if o.dedupWindow == 0 {
		o.dedupWindow = DefaultDedupWindow
	}
	if o.MaxAttempts < 1 {
		return fmt.Errorf("queue: max attempts %d: at least 1", o.MaxAttempts)
	}
	if o.maxLease == 0 {
		o.maxLease = DefaultMaxLease
	}
	if o.DefaultLease == 0 {
		o.DefaultLease = min(DefaultLease, o.maxLease)
	}
	if o.DefaultLease < 0 || o.maxLease < 0 || o.DefaultLease > o.maxLease {
		return fmt.Errorf("queue: default lease %v: from 1ns to %v", o.DefaultLease, o.maxLease)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.since == nil {
		o.since = time.Since
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.AckSegmentSize == 0 {
		o.AckSegmentSize = DefaultAckSegmentSize
	}
	const minSeg = 4096
	if o.SegmentSize < minSeg || o.AckSegmentSize < minSeg {
		return fmt.Errorf("queue: segment sizes %d and %d bytes: at least %d", o.SegmentSize, o.AckSegmentSize, minSeg)
	}
	if o.IdleTopic == 0 {
		o.IdleTopic = DefaultIdleTopic
	}
	if o.checkpointEvery == 0 {
		o.checkpointEvery = DefaultCheckpointEvery
	}
	if o.checkpointEvery < 1 {
		return fmt.Errorf("queue: checkpoint interval %d acks: at least 1", o.checkpointEvery)
	}
	return nil
}

// maxMessagePayload is the largest queue-log payload a segment holds.
func (o *Options) maxMessagePayload() int {
	return int(min(int64(record.MaxPayload), o.SegmentSize-32-record.Overhead))
}

// entriesPerRecord is how many checkpoint entries go in one ack-log record,
// so that each fits in an ack-log segment.
func (o *Options) entriesPerRecord() int {
	return int(min(4096, (o.AckSegmentSize-32-record.Overhead-1)/entrySize))
}

// ValidateTopic reports whether topic may name a queue topic. A topic is 1
// to 200 bytes of ASCII letters, digits, '.', '_' and '-', starting with a
// letter, a digit or '_'; the dead-letter topic of a valid topic (the
// topic followed by ".dlq") is valid too. Topics are directory names as
// they are: on a case-insensitive filesystem "A" and "a" would collide,
// so the queue needs a case-sensitive one.
func ValidateTopic(topic string) error {
	base := topic
	if len(base) > MaxTopicLen {
		base = base[:len(base)-len(DLQSuffix)]
		if s := topic[len(base):]; s != DLQSuffix || len(base) > MaxTopicLen {
			return fmt.Errorf("%w %.40q...: %d bytes; at most %d (plus %q for a dead-letter topic)", ErrInvalidTopic, topic, len(topic), MaxTopicLen, DLQSuffix)
		}
	}
	if base == "" {
		return fmt.Errorf("%w: empty; a topic is 1 to %d bytes of A-Z a-z 0-9 . _ -", ErrInvalidTopic, MaxTopicLen)
	}
	n := 0 // characters so far
	for i, c := range topic {
		n++
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || (i > 0 && (c == '.' || c == '-'))
		if ok {
			continue
		}
		what := "may only hold A-Z a-z 0-9 . _ -"
		if i == 0 && (c == '.' || c == '-') {
			what = "must start with a letter, a digit or _"
		}
		at := fmt.Sprintf("character %d (%q)", n, c)
		if _, size := utf8.DecodeRuneInString(topic[i:]); c == utf8.RuneError && size == 1 {
			at = fmt.Sprintf("byte %d (%#x, not UTF-8)", i+1, topic[i])
		}
		return fmt.Errorf("%w %q: %s not allowed: a topic %s", ErrInvalidTopic, topic, at, what)
	}
	return nil
}

// isDLQ reports whether topic is a dead-letter topic: its failures stay in
// it rather than going to another level of dead-letter topic.
func isDLQ(topic string) bool {
	return len(topic) > len(DLQSuffix) && topic[len(topic)-len(DLQSuffix):] == DLQSuffix
}

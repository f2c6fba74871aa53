// Package peers runs the benchmark's systems: each one's server process
// (started on 127.0.0.1 with its data in a directory of its own, killed
// with SIGKILL and restarted on the same data for the crash workload) and
// a driver that schedules and consumes delayed messages on it the way a
// user of that system would.
package peers

import (
	"context"
	"fmt"
	"time"
)

// Msg is one delayed message: the body carries ID and DeliverAt (see
// package measure), the fields are for the drivers that need them apart.
type Msg struct {
	ID        uint64
	DeliverAt time.Time
	Body      []byte
}

// Driver talks to one running server of its system.
type Driver interface {
	// Setup makes an empty queue (table, stream, topic) for a run.
	Setup(ctx context.Context) error
	// NewProducer returns a producer with its own connection(s).
	NewProducer(ctx context.Context) (Producer, error)
	// NewConsumer returns a consumer with its own connection(s).
	NewConsumer(ctx context.Context) (Consumer, error)
	// Close releases what the driver holds.
	Close() error
}

// Producer stores messages. One goroutine uses a Producer.
type Producer interface {
	// Produce returns nil once the system has acknowledged every message
	// of msgs under its durability setting; on an error none, some or all
	// of them may be stored.
	Produce(ctx context.Context, msgs []Msg) error
	Close() error
}

// Consumer receives due messages. One goroutine uses a Consumer.
type Consumer interface {
	// Run receives due messages until ctx ends, calls handle with each
	// body as soon as it is in hand, then acknowledges or deletes it as
	// the system requires. It survives the server going away and coming
	// back (reconnecting), telling onErr of every error, and returns nil
	// when ctx ends.
	Run(ctx context.Context, handle func(body []byte), onErr func(error)) error
	Close() error
}

// System is one benchmarked system in one durability setting.
type System struct {
	// Name is the system ("redis"), Variant its setting ("appendfsync always").
	Name, Variant string
	// Durability says in words what an acknowledged message survives.
	Durability string
	// Delivery is the delivery guarantee of the consumer path used.
	Delivery string
	// Notes on how the workload maps onto this system.
	Notes string
	// Server starts the server; Driver connects to a started one.
	newServer func(dir string, port int) *Server
	newDriver func(s *Server) (Driver, error)
}

// Label is "name (variant)".
func (s System) Label() string {
	if s.Variant == "" {
		return s.Name
	}
	return fmt.Sprintf("%s (%s)", s.Name, s.Variant)
}

// NewServer returns the system's server for data directory dir (which
// must exist and be empty) and TCP port port; Start starts it.
func (s System) NewServer(dir string, port int) *Server { return s.newServer(dir, port) }

// NewDriver connects a driver to srv, which must be started.
func (s System) NewDriver(srv *Server) (Driver, error) { return s.newDriver(srv) }

// Config says where the systems' programs are.
type Config struct {
	// HourglassBin is the hourglass binary (built from ../cmd/hourglass).
	HourglassBin string
	// PebbleBin is the pebbledelay binary (built from ./cmd/pebbledelay).
	PebbleBin string
	// NatsBin is the nats-server binary.
	NatsBin string
	// PgBin is PostgreSQL's bin directory (initdb, postgres).
	PgBin string
	// PollInterval is how long the polling consumers (Redis, PostgreSQL)
	// wait after a poll that found nothing due.
	PollInterval time.Duration
	// Redeliver is how long an at-least-once system waits for an ack
	// before it delivers a message again: Hourglass's and pebbledelay's
	// lease, beanstalkd's TTR, the NATS consumer's AckWait. The same for
	// all of them.
	Redeliver time.Duration
	// ConsumeBatch, if not 0, is the most messages one consumer call takes
	// on every system whose consumers take several (the Consume credits of
	// Hourglass and pebbledelay, the Redis script, the PostgreSQL DELETE,
	// the NATS Fetch); 0 keeps each driver's own default (100, 1000, 1000
	// and 100). beanstalkd reserves one job per call whatever this says.
	ConsumeBatch int
	// FlowKeys, if not 0, gives Hourglass's messages a flow key each, the
	// message's number modulo FlowKeys; FlowFair sets the topic's policy
	// to flow_fair first. Hourglass and pebbledelay's drivers only.
	FlowKeys int
	FlowFair bool
	// NoKeys sends Hourglass's messages without an idempotency key (the
	// driver gives each its number as its key otherwise).
	NoKeys bool
}

// orDefault is n, or def when n is 0.
func orDefault(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// Systems returns every system and setting the benchmark compares, the
// per-write-fsync setting of each first; Hourglass over its other
// protocols (hourglass-unary, -stream, -connect) come last.
func Systems(cfg Config) []System {
	all := []System{
		hourglassSystem(cfg, "always", ProtoDefault),
		hourglassSystem(cfg, "interval", ProtoDefault),
		redisSystem(cfg, "always"),
		redisSystem(cfg, "everysec"),
		postgresSystem(cfg),
		beanstalkdSystem(cfg, true),
		beanstalkdSystem(cfg, false),
		natsSystem(cfg, true),
		natsSystem(cfg, false),
		pebbleSystem(cfg, "always"),
		pebbleSystem(cfg, "interval"),
	}
	// Hourglass over its other protocols last, so that the index of every
	// system above stays what it was.
	for _, p := range Protocols[1:] {
		all = append(all, hourglassSystem(cfg, "always", p), hourglassSystem(cfg, "interval", p))
	}
	return all
}

// Package serverbench drives a running Hourglass server over the network
// and reports what `hourglass-bench server` prints: the same JSON keys as
// `bench engine` (internal/enginebench), 0 where a key does not apply,
// plus a few keys of its own (addr, protocol, topic, clients, consumers,
// clock_skew_ms, ...). It talks to the server the ways its users do: unary
// gRPC calls (grpc-go), Connect over HTTP/1.1 (connect-go), or the
// ScheduleStream and Consume streams (ProtocolStream).
package serverbench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/queue"
)

// Scenarios.
const (
	Batch    = "batch"    // requests of --batch messages from --clients goroutines; nothing fires during the run
	Single   = "single"   // requests of one message from --clients goroutines; nothing fires
	Lateness = "lateness" // schedule, while consumers receive and ack (Receive and AckBatch, or Consume streams); lateness, loss, duplicates
	Backlog  = "backlog"  // schedule N messages spread over --spread and leave them pending
	Drain    = "drain"    // receive the part of a backlog due within --window of its start; lateness, loss, duplicates
	Get      = "get"      // time Get of pending messages while --rate Schedules a second arrive
)

// Scenarios lists the scenarios in the order the help shows them.
var Scenarios = []string{Batch, Single, Lateness, Backlog, Drain, Get}

// Defaults and bounds.
const (
	DefaultScenario  = Batch
	DefaultAddr      = "http://127.0.0.1:7420"
	DefaultBodySize  = 256
	DefaultBatch     = 100
	DefaultConsumers = 4
	// DefaultCredits is Config.Credits when not set: the Go client's
	// default Prefetch.
	DefaultCredits = 100
	DefaultWindow  = 10 * time.Second
	DefaultTimeout = 5 * time.Minute
	// DefaultSpread is how far a backlog's due times reach: 30 days.
	DefaultSpread = 30 * 24 * time.Hour
	// MaxSpread is the server's default --max-delay, 10 years.
	MaxSpread = 10 * 365 * 24 * time.Hour
	// DefaultDueAfter is when a backlog's first message is due, after
	// the start, unless DueFrom is given.
	DefaultDueAfter = time.Hour
	// DefaultBacklogTimeout bounds a backlog run.
	DefaultBacklogTimeout = time.Hour
	// DefaultDrainWindow is how much of a backlog's due range a drain
	// receives: its first hour.
	DefaultDrainWindow = time.Hour
	DefaultGrace       = 30 * time.Second
	MaxMessages        = 100_000_000
	MaxBodySize        = 1 << 20
	MaxBatch           = 1000 // the server's ScheduleBatch limit
	MaxClients         = 1024
	MaxConsumers       = 256
	MaxCredits         = 1000
	// FarAhead is how far ahead batch and single schedule: nothing they
	// schedule fires during the run.
	FarAhead = time.Hour
)

// DefaultMessages is --messages when not given.
func DefaultMessages(scenario string) int {
	switch scenario {
	case Single:
		return 100_000
	case Lateness:
		return 20_000
	case Backlog:
		return 10_000_000
	}
	return 1_000_000 // batch, get
}

// DefaultClients is --clients when not given.
func DefaultClients(scenario string) int {
	if scenario == Single {
		return 64
	}
	return 8
}

// Config is one run. Zero Messages and Clients take the scenario's default.
type Config struct {
	Addr      string
	Token     string
	Scenario  string
	Messages  int
	BodySize  int
	Batch     int
	Clients   int
	Consumers int
	// Credits is the most messages a lateness or drain consumer holds
	// at once: a Receive's max_messages, a Consume stream's credits
	// (client.ConsumeOptions.Prefetch). 0: DefaultCredits.
	Credits int
	Window  time.Duration
	Timeout time.Duration
	Grace   time.Duration
	Topic   string // empty: a fresh unique topic
	// Protocol is how the clients talk: ProtocolGRPC (unary gRPC calls on
	// one HTTP/2 connection per server, as gRPC clients make them),
	// ProtocolConnect (Connect's protocol over HTTP/1.1, a connection per
	// call in flight, as curl and browsers make them) or ProtocolStream
	// (ScheduleStream and Consume streams over HTTP/2).
	Protocol string
	// MaxCalls, for the single scenario over ProtocolGRPC, sends the
	// Schedules through one client.Client per server with
	// client.WithMaxCalls(MaxCalls): concurrent Schedules beyond MaxCalls
	// in flight share ScheduleBatch calls. 0 (the default here, unlike
	// the Go client's) sends every Schedule as its own call.
	MaxCalls int
	// Spread, DueFrom: a backlog's messages are due evenly over
	// [DueFrom, DueFrom+Spread) on the server's clock (spreadOrder);
	// backlog takes DueFrom as DefaultDueAfter after its start when zero,
	// drain needs the backlog run's.
	Spread  time.Duration
	DueFrom time.Time
	// Keys, for backlog: each message carries its index as its
	// idempotency key.
	Keys bool
	// Rate, for get: Schedules a second while Gets are timed; 0 means
	// DefaultRate.
	Rate int
	// Progress, if set, shows progress bars (scheduling, receiving).
	Progress io.Writer
}

// Protocols.
const (
	ProtocolGRPC    = "grpc"
	ProtocolConnect = "connect"
	ProtocolStream  = "stream"
	DefaultProtocol = ProtocolGRPC
)

// Protocols lists the protocols in the order the help shows them.
var Protocols = []string{ProtocolGRPC, ProtocolConnect, ProtocolStream}

// normalize fills defaults and checks the configuration; the errors say
// what is allowed.
func (c *Config) normalize() error {
	if c.Scenario == "" {
		c.Scenario = DefaultScenario
	}
	known := false
	for _, s := range Scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		return fmt.Errorf("--scenario %q is unknown; use one of %s", c.Scenario, strings.Join(Scenarios, ", "))
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	switch c.Protocol {
	case "":
		c.Protocol = DefaultProtocol
	case ProtocolGRPC, ProtocolConnect, ProtocolStream:
	default:
		return fmt.Errorf("--protocol %q is unknown; use %s (unary gRPC calls over HTTP/2), %s (Connect over HTTP/1.1) or %s (ScheduleStream and Consume over HTTP/2)", c.Protocol, ProtocolGRPC, ProtocolConnect, ProtocolStream)
	}
	for _, a := range c.Addrs() {
		if !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
			return fmt.Errorf("--addr %q: want a URL such as http://127.0.0.1:7420 (http:// or https://), or several separated by commas", a)
		}
	}
	if len(c.Addrs()) > 1 && c.Scenario == Lateness && c.Protocol == ProtocolConnect {
		return fmt.Errorf("--addr %q: the lateness scenario over connect receives from one server; give one URL, or use --protocol grpc or stream to receive from every node of a cluster", c.Addr)
	}
	if c.Messages == 0 && c.Scenario == Drain {
		return fmt.Errorf("--scenario drain needs the backlog run's --messages: which messages fall due within --window follows from it, --due-from and --spread")
	}
	if c.Messages == 0 {
		c.Messages = DefaultMessages(c.Scenario)
	}
	if c.Messages < 1 || c.Messages > MaxMessages {
		return fmt.Errorf("--messages %d is out of range; it must be from 1 to %d", c.Messages, MaxMessages)
	}
	if c.BodySize < 8 || c.BodySize > MaxBodySize {
		return fmt.Errorf("--body-size %d is out of range; it must be from 8 to %d (and within the server's --max-body)", c.BodySize, MaxBodySize)
	}
	if c.Batch < 1 || c.Batch > MaxBatch {
		return fmt.Errorf("--batch %d is out of range; it must be from 1 to %d", c.Batch, MaxBatch)
	}
	if c.Clients == 0 {
		c.Clients = DefaultClients(c.Scenario)
	}
	if c.Clients < 1 || c.Clients > MaxClients {
		return fmt.Errorf("--clients %d is out of range; it must be from 1 to %d", c.Clients, MaxClients)
	}
	if c.MaxCalls < 0 || c.MaxCalls > MaxClients {
		return fmt.Errorf("--max-calls %d is out of range; it must be from 0 (every Schedule its own call) to %d", c.MaxCalls, MaxClients)
	}
	if c.MaxCalls > 0 && c.Scenario != Single {
		return fmt.Errorf("--max-calls applies to --scenario single only (batch and lateness send ScheduleBatch themselves)")
	}
	if c.MaxCalls > 0 && c.Protocol != ProtocolGRPC {
		return fmt.Errorf("--max-calls applies to --protocol %s only (the Go client's merging; %s and %s send every Schedule as its own request)", ProtocolGRPC, ProtocolConnect, ProtocolStream)
	}
	if c.Credits == 0 {
		c.Credits = DefaultCredits
	}
	if c.Credits < 1 || c.Credits > MaxCredits {
		return fmt.Errorf("--credits %d is out of range; it must be from 1 to %d (a Receive's most messages)", c.Credits, MaxCredits)
	}
	if c.Consumers == 0 {
		c.Consumers = DefaultConsumers
	}
	if c.Consumers < 1 || c.Consumers > MaxConsumers {
		return fmt.Errorf("--consumers %d is out of range; it must be from 1 to %d", c.Consumers, MaxConsumers)
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Grace < 0 {
		return fmt.Errorf("--grace %v must be positive", c.Grace)
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Rate < 1 || c.Rate > 10_000_000 {
		return fmt.Errorf("--rate %d is out of range; it must be from 1 to 10000000 messages a second", c.Rate)
	}
	if c.Scenario == Get && c.Protocol != ProtocolGRPC {
		return fmt.Errorf("--scenario get runs over --protocol %s only", ProtocolGRPC)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
		if c.Scenario == Drain {
			c.Window = DefaultDrainWindow
		}
	}
	if c.Window < time.Millisecond || c.Window > 24*time.Hour {
		return fmt.Errorf("--window %v is out of range; it must be from 1ms to 24h0m0s", c.Window)
	}
	if err := c.normalizeBacklog(); err != nil {
		return err
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
		switch c.Scenario {
		case Backlog:
			c.Timeout = DefaultBacklogTimeout
		case Drain: // until the window's end, with room for the grace
			c.Timeout = max(DefaultTimeout, time.Until(c.DueFrom.Add(min(c.Window, c.Spread)))+c.Grace+time.Minute)
		}
	}
	if c.Timeout < 0 {
		return fmt.Errorf("--timeout %v must be positive", c.Timeout)
	}
	if c.Topic != "" {
		if err := queue.ValidateTopic(c.Topic); err != nil {
			return fmt.Errorf("--topic: %v", err)
		}
	}
	return nil
}

// Addrs returns the servers of Addr, which may list several separated by
// commas (the nodes of a cluster): client i sends to Addrs()[i%len].
func (c *Config) Addrs() []string {
	var out []string
	for _, a := range strings.Split(c.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// normalizeBacklog checks the settings of backlog and drain: the spread,
// the start of the due range and (for drain) the topic.
func (c *Config) normalizeBacklog() error {
	if c.Scenario != Backlog && c.Scenario != Drain {
		if c.Spread != 0 || !c.DueFrom.IsZero() {
			return fmt.Errorf("--spread and --due-from apply to --scenario %s and %s only", Backlog, Drain)
		}
		if c.Keys {
			return fmt.Errorf("--keys applies to --scenario %s only", Backlog)
		}
		return nil
	}
	if c.Keys && c.Scenario != Backlog {
		return fmt.Errorf("--keys applies to --scenario %s only", Backlog)
	}
	if c.Spread == 0 {
		c.Spread = DefaultSpread
	}
	if c.Spread < time.Second || c.Spread > MaxSpread {
		return fmt.Errorf("--spread %v is out of range; it must be from 1s to %v (the server's default --max-delay, 10y)", c.Spread, MaxSpread)
	}
	if c.Scenario == Drain {
		var missing []string
		if c.Topic == "" {
			missing = append(missing, "--topic")
		}
		if c.DueFrom.IsZero() {
			missing = append(missing, "--due-from")
		}
		if len(missing) > 0 {
			return fmt.Errorf("--scenario drain receives what a backlog run scheduled: give its %s (the backlog run prints them, with --messages and --spread)", strings.Join(missing, " and "))
		}
	}
	return nil
}

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/hourglassmq/hourglass/internal/enginebench"
	"github.com/hourglassmq/hourglass/internal/serverbench"
)

const benchEngineDescription = `Runs the engine in this process, in a fresh data directory, with a sink that
only counts, and prints a table to stdout (with --json, also one JSON object as
the last line). Progress bars go to stderr when it is a terminal.

Scenarios (t0 is when scheduling starts; N is --messages):
  uniform     N messages due t0 + 1s + N/500000 s + U[0, --window) (the window
              starts once scheduling is done); those scheduled after
              their time are due at once. Waits for every delivery.
  hot-second  N messages due within one whole second, about t0 + 2s + N/500000 s.
              Headline: lateness_max_ms (target: all within 1000 ms).
  far-future  N messages due 1 to 30 days ahead; nothing fires. Measures the live
              heap once all are scheduled and routed: heap_bytes_per_pending
              (target: future buckets cost no memory).
  recovery    N messages due t0 + S + U[0, 5s), S = 10s + 2s per million, in
              the loaded buckets. Once all are routed the engine is closed and
              reopened: ready_seconds is Open to Ready, heap_bytes_per_pending
              the live heap after Ready per pending message (target: 16 bytes
              at most). Then waits for every delivery: none may be lost or
              delivered twice.

The targets are stated for --fsync interval.

JSON keys (0 where a key does not apply):
  scenario                  the scenario run
  messages                  messages asked for (--messages)
  schedule_per_sec          messages scheduled / seconds to schedule them all
  fire_per_sec              deliveries / seconds from the first to the last
  lateness_p50_ms           sink arrival - deliverAt, median, in ms
  lateness_p99_ms           99th percentile, in ms
  lateness_max_ms           maximum, in ms
  early                     deliveries before their deliverAt (must be 0)
  lost                      messages scheduled and not delivered by the end (must be 0)
  duplicates                messages delivered more than once (must be 0)
  heap_bytes_per_pending    live heap growth / pending messages, in bytes
  ready_seconds             recovery: seconds from Open to Ready after the restart
  scheduled, delivered      messages accepted; messages delivered at least once
  schedule_seconds          seconds to schedule them
  lateness_mean_ms          mean lateness, in ms
  route_seconds             far-future, recovery: seconds from the end of scheduling
                            until everything was routed into the schedule segments
  delivered_before_restart  recovery: delivered by the first engine (0 expected)
  pending_at_ready          recovery: messages in the wheel at Ready after the restart
  segments                  schedule segments on disk at the end
  engine_fired              the engine's hand-overs to the sink; above delivered when
                            a full sink lane sent messages back to the wheel
  engine_retries            failed sink calls the engine retried (0: this sink never fails)
  heap_growth_bytes         the live heap growth behind heap_bytes_per_pending
  due_from_s, due_to_s      the span of due times, in seconds after t0
  end                       complete, timeout, interrupted or no-progress
  sink_seconds              seconds spent inside the counting sink (small: it is not
                            what limits fire_per_sec)
  anomalies                 deliveries of unknown messages, corrupt entries,
                            unrecorded deliveries (must be 0)
  and the settings: body_size, fsync, segment_duration_s, preload_lead_s,
  producers, batch, gomaxprocs.`

// benchEngineCommand is `hourglass-bench engine`; the work is in internal/enginebench.
func benchEngineCommand() *cli.Command {
	return &cli.Command{
		Name:        "engine",
		Usage:       "benchmark the engine in-process: schedule rate, fire rate, lateness, loss, heap, restart time",
		UsageText:   "hourglass-bench engine [--scenario uniform|hot-second|far-future|recovery] [--messages N] [--json] [options]",
		Description: benchEngineDescription,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "scenario", Value: enginebench.DefaultScenario,
				Usage: "what to measure, by `NAME`: " + strings.Join(enginebench.Scenarios, ", ") + " (see above)"},
			&cli.IntFlag{Name: "messages", Value: enginebench.DefaultMessages,
				Usage: fmt.Sprintf("`N`umber of messages to schedule, 1 to %d", enginebench.MaxMessages)},
			&cli.DurationFlag{Name: "window", Value: enginebench.DefaultWindow,
				Usage: "uniform only: the span the due times are spread over, a `DURATION` such as 10s or 2m"},
			&cli.IntFlag{Name: "body-size", Value: enginebench.DefaultBodySize,
				Usage: fmt.Sprintf("`BYTES` per message body, %d to %d (the first 8 carry the message index)", 8, enginebench.MaxBodySize)},
			&cli.StringFlag{Name: "fsync", Value: enginebench.DefaultFsync,
				Usage: "commitlog durability `POLICY`: always (answer after fsync), interval (fsync every 10 ms) or none; the targets are stated for interval"},
			&cli.StringFlag{Name: "dir", DefaultText: "a fresh temporary directory, removed afterwards",
				Usage: "data directory (`PATH`) for the engine; it must be empty or absent, and is kept afterwards"},
			&cli.DurationFlag{Name: "segment-duration", Value: enginebench.DefaultSegmentDuration, DefaultText: "1h",
				Usage: "length of the engine's schedule buckets, a `DURATION` of whole seconds from 1s to 24h"},
			&cli.IntFlag{Name: "producers", Value: enginebench.DefaultProducers,
				Usage: fmt.Sprintf("`N`umber of goroutines calling ScheduleBatch concurrently, 1 to %d", enginebench.MaxProducers)},
			&cli.IntFlag{Name: "batch", Value: enginebench.DefaultBatch,
				Usage: fmt.Sprintf("`N` messages per ScheduleBatch call, 1 to %d", enginebench.MaxBatch)},
		}, runFlags(runEnd{timeout: enginebench.DefaultTimeout, timeoutText: "5m", grace: enginebench.DefaultGrace, what: "delivered"})...),
		OnUsageError: usageError,
		Action:       benchAction("engine", runBenchEngine),
	}
}

func runBenchEngine(c *cli.Context, progress io.Writer) (benchReport, error) {
	cfg := enginebench.Config{
		Scenario:        c.String("scenario"),
		Messages:        c.Int("messages"),
		Window:          c.Duration("window"),
		BodySize:        c.Int("body-size"),
		Fsync:           c.String("fsync"),
		Dir:             c.String("dir"),
		SegmentDuration: c.Duration("segment-duration"),
		Producers:       c.Int("producers"),
		Batch:           c.Int("batch"),
		Timeout:         c.Duration("timeout"),
		Grace:           c.Duration("grace"),
		Logger:          slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Progress:        progress,
	}
	rep, err := enginebench.Run(c.Context, cfg)
	if rep == nil {
		return nil, err
	}
	return rep, err
}

// runEnd holds what differs between the commands in runFlags.
type runEnd struct {
	timeout     time.Duration // --timeout's value (0: the scenario's)
	timeoutText string        // its default as --help says it
	grace       time.Duration
	graceScope  string // the scenarios --grace applies to, "" for all
	what        string // what a message is when it arrives ("delivered", "received")
}

// runFlags are the flags both commands end a run with and report it by:
// --timeout, --grace and --json.
func runFlags(e runEnd) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "timeout", Value: e.timeout, DefaultText: e.timeoutText,
			Usage: "bound on the whole run, a `DURATION`; when it ends the run reports what it saw, and what was not " + e.what + " counts as lost"},
		&cli.DurationFlag{Name: "grace", Value: e.grace, DefaultText: e.grace.String(),
			Usage: e.graceScope + "once the last message is due, stop waiting after this `DURATION` without a delivery; the rest counts as lost"},
		&cli.BoolFlag{Name: "json",
			Usage: "also print the report as one JSON object, the last line of stdout"},
	}
}

// benchAction is the Action of the bench command name: it refuses
// arguments, runs run with stderr for progress bars when that is a
// terminal (else nil), and prints the report run returns, if any.
func benchAction(name string, run func(c *cli.Context, progress io.Writer) (benchReport, error)) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() > 0 {
			return fmt.Errorf("%s takes no arguments, got %q", name, c.Args().Slice())
		}
		var progress io.Writer
		if f, ok := c.App.ErrWriter.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			progress = f
		}
		rep, err := run(c, progress)
		if rep == nil {
			return err
		}
		return printBenchReport(c, rep, err)
	}
}

// benchReport is the report of bench engine or bench server.
type benchReport interface {
	WriteTable(io.Writer) error
	WriteJSON(io.Writer) error
}

// printBenchReport prints rep, and with --json also as JSON, then returns
// err, the run's: a report with an error is of a run that is over but did
// not end cleanly (the engine did not close cleanly), so what was
// measured is printed, then the command fails.
func printBenchReport(c *cli.Context, rep benchReport, err error) error {
	if werr := rep.WriteTable(c.App.Writer); werr != nil {
		return werr
	}
	if c.Bool("json") {
		if werr := rep.WriteJSON(c.App.Writer); werr != nil {
			return werr
		}
	}
	return err
}

const benchServerDescription = `Drives a running server over the network and prints a table to stdout
(with --json, also one JSON object as the last line, with the same keys as
bench engine, 0 where a key does not apply). Each run uses a fresh topic
unless --topic is given, so runs do not interfere.

The load generator runs with Go's GC percent at 400 (unless GOGC is set):
it shares the machine with the server, and with the default its garbage
collector took a quarter of the client's CPU (docs/BENCHMARKS.md). The
server keeps its own settings.

Protocols (--protocol; the server serves them all on its one port):
  grpc      native gRPC (grpc-go's generated client): unary calls from all
            the clients on one HTTP/2 connection per server (h2c for
            http://). The default.
  connect   Connect's protocol, binary protobuf (connect-go's generated
            client) over HTTP/1.1 with Go's default transport: a connection
            per call in flight, kept alive, as curl and browsers call.
  stream    the streams: one ScheduleStream per server shared by all the
            clients, each client waiting for the answer to its own request
            (so up to --clients requests in flight on it); lateness consumes
            with the Go client's Consume (a Consume stream per consumer,
            --credits credits, acks sent back on the stream).

Scenarios (N is --messages):
  batch     N messages (default 1,000,000) in requests of --batch messages
            (ScheduleBatch calls, or batch requests on the ScheduleStream)
            from --clients goroutines (default 8), due 1h ahead so nothing
            fires during the run. Headline: schedule_per_sec (target
            300,000/s with batches of 100, 256-byte bodies, server at
            --fsync always).
  single    N messages (default 100,000) in requests of one message (Schedule
            calls, or message requests on the ScheduleStream) from --clients
            goroutines (default 64), each goroutine sending one at a time.
            Headline: schedule_per_sec (target 20,000/s with 64 clients).
            Every Schedule is its own call: --max-calls is 0 here, unlike the
            Go client's default of 2. With --max-calls N (grpc only) the
            clients share one client.Client per server with WithMaxCalls(N),
            which keeps N calls in flight and merges the Schedules that
            arrive meanwhile into ScheduleBatch calls (calls and merged in
            the JSON say how many went how).
  lateness  N messages (default 20,000) in requests of --batch, due evenly over
            --window (10s) starting once scheduling is over (1s + N/20,000 s
            after the start, on the server's clock), while --consumers (4)
            receive and ack them: long polls of Receive and AckBatch calls
            (grpc, connect), or Consume streams (stream); over HTTP/2, 64
            consumers share a connection. Lateness is the
            client's receive time, moved to the server's clock by the skew
            the Time call measured (printed as clock_skew_ms), minus
            deliverAt. Headline: lateness_p99_ms (target 10 ms); early,
            lost, duplicates must be 0.
  backlog   N messages (default 10,000,000) in requests of --batch, due
            evenly over --spread (720h, 30 days) from --due-from (default 1h
            after the start), in an order that jumps across the whole range
            (consecutive messages land in different hourly segments), with
            their index as idempotency key if --keys. Nothing fires during
            the run; it prints the drain command for what it scheduled.
            Headline: schedule_per_sec. scripts/bench-backlog.sh adds the
            server's memory, disk and restart time.
  drain     receives, with --consumers, the messages of a backlog run (give
            its --topic, --messages, --due-from and --spread) that fall due
            within --window (1h) of its --due-from, and waits for their due
            times. Headline: lateness_p99_ms of the first due hour; lost
            (due in the window, not received), early, duplicates must be 0.
  get       N messages (default 1,000,000) due 1h ahead, at --rate messages a
            second (50,000) in requests of --batch from --clients goroutines,
            while two goroutines Get messages already answered, picked at
            random, one call at a time (grpc only). Headline: get_p99_ms
            (target 2 ms); every Get must answer pending.

batch, single, backlog and get leave their messages pending on the server (batch
and single due 1h later), on their own topic.

JSON keys: those of bench engine (see 'hourglass-bench engine --help'); here
fsync is "server" (the server's policy is not visible to a client), and
fire_per_sec, lateness_*, delivered are measured at the consumers. Added:
  addr, protocol, topic     where the run went, and how
  clients, consumers        goroutines scheduling; goroutines receiving
  clock_skew_ms             server clock - client clock (Time with the shortest round trip)
  clock_rtt_ms              that call's round trip
  errors                    failed calls
  end                       as in bench engine, or error: a Schedule failed (the
                            run stops), or a consumer failed for good
  max_calls                 --max-calls
  calls                     the requests the messages went in: Schedule and
                            ScheduleBatch calls, or ScheduleStream requests
  merged                    messages the Go client merged into ScheduleBatch calls (--max-calls)
  due_from, spread          backlog and drain: the backlog's due range
  expected                  drain: the backlog's messages due within --window
  keys                      backlog: idempotency keys sent (--keys)
  rate, gets                get: the Schedules a second asked for; the Gets timed
  get_p50_ms, get_p99_ms, get_max_ms   get: their latency, call to answer`

// loadGenGCPercent is bench server's GC percent: a leaner load generator
// leaves more of the shared machine to the server it measures.
const loadGenGCPercent = 400

// benchServerCommand is `hourglass-bench server`; the work is in internal/serverbench.
func benchServerCommand() *cli.Command {
	return &cli.Command{
		Name:        "server",
		Usage:       "benchmark a running server over the network: schedule rate, lateness, loss",
		UsageText:   "hourglass-bench server [--addr URL] [--scenario batch|single|lateness|backlog|drain|get] [--protocol grpc|connect|stream] [--messages N] [--json] [options]",
		Description: benchServerDescription,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "addr", Value: serverbench.DefaultAddr, EnvVars: []string{"HOURGLASS_ADDR"},
				Usage: "the server's `URL`, or several, comma-separated (the nodes of a cluster): client i sends to the i-th modulo their number, and lateness consumers (grpc, stream) go round robin over them"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"HOURGLASS_TOKEN"},
				Usage: "bearer `TOKEN` for a server started with --auth-token"},
			&cli.StringFlag{Name: "scenario", Value: serverbench.DefaultScenario,
				Usage: "what to measure, by `NAME`: " + strings.Join(serverbench.Scenarios, ", ") + " (see above)"},
			&cli.IntFlag{Name: "messages", DefaultText: "1000000 for batch, 100000 for single, 20000 for lateness, 10000000 for backlog; drain: the backlog's",
				Usage: fmt.Sprintf("`N`umber of messages to schedule, 1 to %d", serverbench.MaxMessages)},
			&cli.IntFlag{Name: "body-size", Value: serverbench.DefaultBodySize,
				Usage: fmt.Sprintf("`BYTES` per message body, 8 to %d (the first 8 carry the message index)", serverbench.MaxBodySize)},
			&cli.IntFlag{Name: "batch", Value: serverbench.DefaultBatch,
				Usage: fmt.Sprintf("`N` messages per request (batch, lateness), 1 to %d", serverbench.MaxBatch)},
			&cli.IntFlag{Name: "clients", DefaultText: "64 for single, 8 otherwise",
				Usage: fmt.Sprintf("`N`umber of goroutines scheduling concurrently, 1 to %d", serverbench.MaxClients)},
			&cli.IntFlag{Name: "max-calls",
				Usage: "single over grpc only: send through the Go client with WithMaxCalls(`N`), merging concurrent Schedules into ScheduleBatch calls beyond N in flight; 0 (the default here, unlike the Go client's 2) sends each Schedule as its own call"},
			&cli.StringFlag{Name: "cpuprofile",
				Usage: "write the load generator's CPU profile to `FILE` (go tool pprof FILE); the server's is at /debug/pprof/profile with serve --pprof"},
			&cli.StringFlag{Name: "protocol", Value: serverbench.DefaultProtocol,
				Usage: "`PROTOCOL` of the clients: grpc (unary gRPC calls on one HTTP/2 connection per server, h2c for http://), " +
					"connect (Connect over HTTP/1.1, a connection per call in flight, like curl) " +
					"or stream (one ScheduleStream per server; Consume streams for lateness); see above"},
			&cli.IntFlag{Name: "consumers", Value: serverbench.DefaultConsumers,
				Usage: fmt.Sprintf("lateness and drain: `N`umber of consumers (long polls of Receive, or Consume streams), 1 to %d", serverbench.MaxConsumers)},
			&cli.IntFlag{Name: "credits", Value: serverbench.DefaultCredits,
				Usage: fmt.Sprintf("lateness and drain: the most messages a consumer holds at once (a Consume stream's credits, a Receive's max_messages), 1 to %d", serverbench.MaxCredits)},
			&cli.DurationFlag{Name: "window", DefaultText: "10s; 1h for drain",
				Usage: "lateness: the span the due times are spread over; drain: the part of the backlog's due range to receive, from its start; a `DURATION` from 1ms to 24h"},
			&cli.DurationFlag{Name: "spread", DefaultText: "720h (30 days)",
				Usage: "backlog and drain: the messages are due evenly over this `DURATION` from --due-from, 1s to 10y"},
			&cli.TimestampFlag{Name: "due-from", Layout: time.RFC3339Nano, Timezone: time.UTC, DefaultText: "backlog: 1h after the start; drain: required",
				Usage: "backlog and drain: the `TIME` (RFC 3339, the server's clock) the first message is due; give drain the backlog run's"},
			&cli.IntFlag{Name: "rate", Value: serverbench.DefaultRate,
				Usage: "get only: `N` Schedules a second while Gets of pending messages are timed"},
			&cli.BoolFlag{Name: "keys",
				Usage: "backlog only: send each message's index as its idempotency key, so the run also measures the server's key index"},
			&cli.StringFlag{Name: "topic", DefaultText: "a fresh topic per run, bench-SCENARIO-TIME-RANDOM",
				Usage: "the `TOPIC` to schedule to (and receive from)"},
		}, runFlags(runEnd{timeoutText: "5m; 1h for backlog; drain: until the window's end plus --grace and 1m",
			grace: serverbench.DefaultGrace, graceScope: "lateness only: ", what: "received"})...),
		OnUsageError: usageError,
		Action:       benchAction("server", runBenchServer),
	}
}

func runBenchServer(c *cli.Context, progress io.Writer) (benchReport, error) {
	cfg := serverbench.Config{
		Addr:      c.String("addr"),
		Token:     c.String("token"),
		Scenario:  c.String("scenario"),
		Messages:  c.Int("messages"),
		BodySize:  c.Int("body-size"),
		Batch:     c.Int("batch"),
		Clients:   c.Int("clients"),
		Consumers: c.Int("consumers"),
		Credits:   c.Int("credits"),
		Window:    c.Duration("window"),
		Timeout:   c.Duration("timeout"),
		Grace:     c.Duration("grace"),
		Topic:     c.String("topic"),
		Protocol:  c.String("protocol"),
		MaxCalls:  c.Int("max-calls"),
		Spread:    c.Duration("spread"),
		Keys:      c.Bool("keys"),
		Rate:      c.Int("rate"),
		Progress:  progress,
	}
	if t := c.Timestamp("due-from"); t != nil {
		cfg.DueFrom = *t
	}
	// An explicit 0 is an error, not the default.
	zero := map[string]string{
		"messages":  fmt.Sprintf("from 1 to %d", serverbench.MaxMessages),
		"clients":   fmt.Sprintf("from 1 to %d", serverbench.MaxClients),
		"consumers": fmt.Sprintf("from 1 to %d", serverbench.MaxConsumers),
	}
	for _, name := range []string{"messages", "clients", "consumers"} {
		if c.IsSet(name) && c.Int(name) == 0 {
			return nil, fmt.Errorf("--%s 0 is out of range; it must be %s", name, zero[name])
		}
	}
	if c.IsSet("window") && c.Duration("window") == 0 {
		return nil, fmt.Errorf("--window 0s is out of range; it must be from 1ms to 24h0m0s")
	}
	for _, name := range []string{"grace", "timeout", "spread"} {
		if c.IsSet(name) && c.Duration(name) <= 0 {
			return nil, fmt.Errorf("--%s %v must be positive", name, c.Duration(name))
		}
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(loadGenGCPercent)
	}
	if path := c.String("cpuprofile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := serverbench.Run(c.Context, cfg)
	if rep == nil {
		return nil, err
	}
	return rep, err
}

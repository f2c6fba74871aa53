// Command peerbench measures Hourglass against the delay queues a user
// would pick instead (a Redis sorted set, a PostgreSQL table polled with
// SKIP LOCKED, beanstalkd, NATS JetStream message schedules, an LSM store
// keyed by delivery time as DDMQ Chronos and Meituan's delay queue), on this
// machine, in one run, with the same workloads, and writes
// docs/BENCHMARKS-PEERS.md with its plots. See --help.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/bench/internal/peers"
	"github.com/hourglassmq/hourglass/bench/internal/report"
	"github.com/hourglassmq/hourglass/bench/internal/workload"
)

const description = `Runs every workload on every system, interleaved, --reps times, each run on a
fresh server with its data in a new directory under --work-dir, and writes
--out/BENCHMARKS-PEERS.md (medians, each peer's ratio to Hourglass at the same
durability class), two PNG plots beside it, and every run's raw numbers as JSON
to --results.

Systems (each started by this program on 127.0.0.1:--port, stopped by PID):
  hourglass   --fsync always | --fsync interval   (built from ../cmd/hourglass)
  redis       appendfsync always | everysec       (redis-server from apt)
  postgresql  synchronous_commit on (default)     (PostgreSQL 15 from apt, run as the postgres user)
  beanstalkd  -f 0 | default -f 50, with a binlog (beanstalkd from apt)
  nats        JetStream message schedules, sync_interval always | default (bin/nats-server)
  pebble      a delay service over a Pebble LSM store keyed by delivery time, the
              approach of DDMQ Chronos and Meituan: Sync per batch | NoSync + 1 s WAL
              sync (built from ./cmd/pebbledelay; it speaks Hourglass's gRPC API, so
              the Hourglass driver drives it)
  hourglass-unary, hourglass-stream, hourglass-connect
              Hourglass (the same server and settings) over each of its protocols, as
              rows of their own beside hourglass (unary ScheduleBatch + Consume stream):
              unary: ScheduleBatch, long-poll Receive, AckBatch (unary gRPC, HTTP/2);
              stream: a client.Producer on the ScheduleStream, the Consume stream;
              connect: ScheduleBatch, Receive, AckBatch with connect-go over HTTP/1.1.
              Not in the default --systems; name them, e.g.
              --systems hourglass,hourglass-unary,hourglass-stream,hourglass-connect
Install what is missing first: bash peers.sh install

Workloads (counts are the issue's times --scale):
  W1  order timeouts: 200,000 messages of 256 B, delays uniform over 5 to 35 s,
      4 producers, 4 consumers: produce rate, lateness p50/p99/max, early, lost
  W2  hot second: 200,000 messages due within one second: time to drain
  W3  backlog: 2,000,000 messages due 1 to 30 days ahead: server memory and
      disk bytes per message
  W5  steady load: --w5-rates messages a second (2,000 and 20,000) for --w5-duration,
      due 1-20 s after each is produced, consumed and acked: the server's CPU seconds
      (utime+stime of its processes, /proc/PID/stat) per 100,000 messages and the
      disk's flush requests a second (/proc/diskstats; the machine's, so run it quiet).
  W4  crash: W1 with the server killed with SIGKILL once half is acknowledged,
      restarted on the same data: lost and duplicated messages

The machine has 2 cores: try --scale 0.01 --reps 1 --min-delay 2s --max-delay 6s first
(about 7 minutes). At the issue's counts (--scale 1, 3 repetitions) run it as three
invocations, --workloads W1,W2, then W4, then W3, each with --no-doc (about 50, 40 and
40 minutes here), and make the document from their JSON with the report command.`

func main() {
	app := &cli.App{
		Name:        "peerbench",
		Usage:       "measure Hourglass against Redis, PostgreSQL, beanstalkd, NATS and an LSM delay service on this machine",
		UsageText:   "go run ./cmd/peerbench [--scale F] [--reps N] [--workloads W1,W2,W3,W4] [--systems NAMES] [options]",
		Description: description,
		Flags: []cli.Flag{
			&cli.Float64Flag{Name: "scale", Value: 0.1, Usage: "fraction F (0 < F <= 1) of the issue's message counts"},
			&cli.Float64Flag{Name: "w2-scale", Usage: "multiple of W2's 200,000 messages, instead of --scale (at most 10: the issue's 2,000,000 due in one second)"},
			&cli.Float64Flag{Name: "w3-scale", Usage: "multiple of W3's 2,000,000 messages, instead of --scale (at most 50: 100,000,000)"},
			&cli.BoolFlag{Name: "random-body", Usage: "pad bodies with random bytes instead of zeros, so that Redis (RDB, LZF) and Pebble (Snappy) cannot compress the padding away"},
			&cli.IntFlag{Name: "reps", Value: 3, Usage: "interleaved repetitions N; tables give medians"},
			&cli.StringFlag{Name: "workloads", Value: "W1,W2,W3,W4", Usage: "workloads to run, comma-separated"},
			&cli.StringFlag{Name: "systems", Value: "hourglass,redis,postgresql,beanstalkd,nats,pebble", Usage: "systems to run, comma-separated (each in all its settings); also hourglass-unary, hourglass-stream, hourglass-connect"},
			&cli.IntFlag{Name: "body", Value: 256, Usage: "body size in bytes (at least 19)"},
			&cli.IntFlag{Name: "producers", Value: 4, Usage: "producers, each with its own connection"},
			&cli.IntFlag{Name: "consumers", Value: 4, Usage: "consumers, each with its own connection"},
			&cli.IntFlag{Name: "batch", Value: 100, Usage: "most messages per produce request (1 to 1000)"},
			&cli.DurationFlag{Name: "min-delay", Value: 5 * time.Second, Usage: "W1/W4 shortest delay"},
			&cli.DurationFlag{Name: "max-delay", Value: 35 * time.Second, Usage: "W1/W4 longest delay"},
			&cli.DurationFlag{Name: "run-timeout", Value: 3 * time.Minute, Usage: "bound on each run, from its first produce"},
			&cli.DurationFlag{Name: "grace", Value: time.Second, Usage: "W1/W2: consume this long after the last message arrived (late duplicates)"},
			&cli.DurationFlag{Name: "crash-grace", Value: 12 * time.Second, Usage: "W4: the same, longer than --redeliver"},
			&cli.DurationFlag{Name: "redeliver", Value: 10 * time.Second, Usage: "redelivery timeout of unacknowledged messages: Hourglass and pebbledelay lease, beanstalkd TTR, NATS AckWait"},
			&cli.IntFlag{Name: "consume-batch", Usage: "most messages per consumer call on Hourglass, pebbledelay, Redis, PostgreSQL and NATS alike (1 to 1000); 0 keeps each driver's own (Hourglass and pebbledelay: the Go client's default, a window of 100 credits growing to 1000 on the stream, 100 per Receive; Redis 1000, PostgreSQL 1000, NATS 100)"},
			&cli.DurationFlag{Name: "poll", Value: 10 * time.Millisecond, Usage: "Redis and PostgreSQL consumers: sleep after a poll that found nothing due"},
			&cli.DurationFlag{Name: "settle", Value: 5 * time.Second, Usage: "W3: wait after producing before reading memory and disk"},
			&cli.IntFlag{Name: "port", Value: 27100, Usage: "TCP port on 127.0.0.1 for the server under test"},
			&cli.StringFlag{Name: "out", Value: "../docs", Usage: "directory for BENCHMARKS-PEERS.md and its PNGs"},
			&cli.StringFlag{Name: "results", Value: "results", Usage: "directory for the raw JSON of every run"},
			&cli.StringFlag{Name: "work-dir", Value: os.TempDir(), Usage: "where each run's data directory is made (and removed)"},
			&cli.StringFlag{Name: "hourglass-bin", Value: "bin/hourglass", Usage: "hourglass binary; rebuilt from ../cmd/hourglass at start"},
			&cli.StringFlag{Name: "pebble-bin", Value: "bin/pebbledelay", Usage: "pebbledelay binary; rebuilt from ./cmd/pebbledelay at start"},
			&cli.StringFlag{Name: "nats-bin", Value: "bin/nats-server", Usage: "nats-server binary (bash peers.sh install builds it)"},
			&cli.StringFlag{Name: "pg-bin", Value: "/usr/lib/postgresql/15/bin", Usage: "PostgreSQL's bin directory"},
			&cli.StringFlag{Name: "note", Value: "", Usage: "what else ran on the machine during the run, for the document"},
			&cli.BoolFlag{Name: "no-doc", Usage: "print the runs only; write no document or plots (the JSON is still written)"},
			&cli.IntFlag{Name: "flow-keys", Usage: "Hourglass only: give each message the flow key k<number mod N> (0: none), to measure flow keys' cost"},
			&cli.BoolFlag{Name: "flow-fair", Usage: "Hourglass only: set the topic's flow_fair policy before producing"},
			&cli.BoolFlag{Name: "no-keys", Usage: "Hourglass only: send no idempotency key (by default each message has its number as its key), to measure what keys cost"},
			&cli.StringFlag{Name: "w5-rates", Value: "2000,20000", Usage: "W5: the steady rates to run at, messages a second, comma-separated"},
			&cli.DurationFlag{Name: "w5-duration", Value: 5 * time.Minute, Usage: "W5: how long each rate is produced"},
		},
		Action: run,
		Commands: []*cli.Command{{
			Name:      "report",
			Usage:     "write one document from the raw JSON of several invocations (a run split by workload)",
			ArgsUsage: "FILE.json [FILE.json ...]",
			Description: `A run at the issue's counts takes longer than one sitting; run it as several
invocations with the same settings, each with its own --workloads and --no-doc,
then make the document from their JSON files:

  go run ./cmd/peerbench --scale 1 --workloads W1,W2 --no-doc
  go run ./cmd/peerbench --scale 1 --workloads W4 --no-doc
  go run ./cmd/peerbench --scale 1 --workloads W3 --no-doc
  go run ./cmd/peerbench report results/peers-A.json results/peers-B.json results/peers-C.json

Each workload must come from one file only, and the files must agree on the
client settings the tables compare (--reps, --body, --producers, --consumers,
--batch, delays, --redeliver, --poll, --consume-batch, --run-timeout, --scale).`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "out", Value: "../docs", Usage: "directory for BENCHMARKS-PEERS.md and its PNGs"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() == 0 {
					return fmt.Errorf("report: name the results files, e.g. results/peers-20261202T142319Z.json")
				}
				var files []report.File
				for _, path := range c.Args().Slice() {
					f, err := report.ReadFile(path)
					if err != nil {
						return err
					}
					files = append(files, f)
				}
				meta, results, err := report.Merge(files)
				if err != nil {
					return err
				}
				cfg := peers.Config{PollInterval: meta.PollInterval, Redeliver: meta.Redeliver, ConsumeBatch: meta.ConsumeBatch}
				var systems []peers.System
				for _, s := range peers.Systems(cfg) {
					if slices.ContainsFunc(results, func(r workload.Result) bool { return r.System == s.Label() }) {
						systems = append(systems, s)
					}
				}
				return writeDoc(c.String("out"), meta, systems, results)
			},
		}},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	o := workload.Options{
		Scale: c.Float64("scale"), BodySize: c.Int("body"), Producers: c.Int("producers"), Consumers: c.Int("consumers"),
		Batch: c.Int("batch"), MinDelay: c.Duration("min-delay"), MaxDelay: c.Duration("max-delay"),
		RunTimeout: c.Duration("run-timeout"), Grace: c.Duration("grace"), CrashGrace: c.Duration("crash-grace"),
		Settle: c.Duration("settle"), WorkDir: c.String("work-dir"), Port: c.Int("port"),
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "  "+format+"\n", args...) },
	}
	o.W2Scale, o.W3Scale, o.RandomBody = o.Scale, o.Scale, c.Bool("random-body")
	if c.IsSet("w2-scale") {
		o.W2Scale = c.Float64("w2-scale")
	}
	if c.IsSet("w3-scale") {
		o.W3Scale = c.Float64("w3-scale")
	}
	switch {
	case !(o.W2Scale > 0 && o.W2Scale <= 10):
		return fmt.Errorf("--w2-scale %v: must be above 0 and at most 10 (2,000,000 messages)", o.W2Scale)
	case !(o.W3Scale > 0 && o.W3Scale <= 50):
		return fmt.Errorf("--w3-scale %v: must be above 0 and at most 50 (100,000,000 messages)", o.W3Scale)
	case !(o.Scale > 0 && o.Scale <= 1):
		return fmt.Errorf("--scale %v: must be above 0 and at most 1", o.Scale)
	case c.Int("reps") < 1:
		return fmt.Errorf("--reps %d: must be at least 1", c.Int("reps"))
	case o.Batch < 1 || o.Batch > 1000:
		return fmt.Errorf("--batch %d: must be 1 to 1000 (Hourglass's ScheduleBatch limit)", o.Batch)
	case o.BodySize < 19:
		return fmt.Errorf("--body %d: must be at least 19 bytes (the ID and due time it carries)", o.BodySize)
	case o.Producers < 1 || o.Consumers < 1:
		return fmt.Errorf("--producers and --consumers must be at least 1")
	case o.MinDelay < 0 || o.MaxDelay <= o.MinDelay:
		return fmt.Errorf("--min-delay %v, --max-delay %v: need 0 <= min < max", o.MinDelay, o.MaxDelay)
	case c.Int("consume-batch") < 0 || c.Int("consume-batch") > 1000:
		return fmt.Errorf("--consume-batch %d: must be 1 to 1000 (Hourglass's Receive limit), or 0 for each driver's own", c.Int("consume-batch"))
	case c.Duration("redeliver") < time.Second:
		return fmt.Errorf("--redeliver %v: must be at least 1s (beanstalkd's TTR is whole seconds)", c.Duration("redeliver"))
	}
	workloads := splitList(c.String("workloads"))
	for _, w := range workloads {
		if !slices.Contains([]string{"W1", "W2", "W3", "W4", "W5"}, w) {
			return fmt.Errorf("--workloads: unknown %q; allowed: W1, W2, W3, W4, W5", w)
		}
	}
	o.W5Duration = c.Duration("w5-duration")
	var w5Rates []int
	for _, f := range splitList(c.String("w5-rates")) {
		r, err := strconv.Atoi(f)
		if err != nil || r < 1 || r > 1_000_000 {
			return fmt.Errorf("--w5-rates: %q is not a rate from 1 to 1000000 messages a second", f)
		}
		w5Rates = append(w5Rates, r)
	}
	if o.W5Duration < time.Second {
		return fmt.Errorf("--w5-duration %v: at least 1s", o.W5Duration)
	}
	slices.Sort(workloads)
	bin := func(p string) string { a, _ := filepath.Abs(p); return a }
	cfg := peers.Config{HourglassBin: bin(c.String("hourglass-bin")), PebbleBin: bin(c.String("pebble-bin")), NatsBin: bin(c.String("nats-bin")), PgBin: c.String("pg-bin"),
		PollInterval: c.Duration("poll"), Redeliver: c.Duration("redeliver"), ConsumeBatch: c.Int("consume-batch"),
		FlowKeys: c.Int("flow-keys"), FlowFair: c.Bool("flow-fair"), NoKeys: c.Bool("no-keys")}
	if cfg.FlowKeys < 0 {
		return fmt.Errorf("--flow-keys %d: 0 (none) or more", cfg.FlowKeys)
	}
	var systems []peers.System
	names := splitList(strings.ToLower(c.String("systems")))
	for _, s := range peers.Systems(cfg) {
		if slices.Contains(names, strings.ToUpper(s.Name)) {
			systems = append(systems, s)
		}
	}
	if cfg.FlowKeys > 0 || cfg.FlowFair || cfg.NoKeys {
		for _, s := range systems {
			if !strings.HasPrefix(s.Name, "hourglass") {
				return fmt.Errorf("--flow-keys, --flow-fair and --no-keys are Hourglass's: run them with --systems hourglass (not %s)", s.Name)
			}
		}
	}
	if len(systems) == 0 {
		return fmt.Errorf("--systems %q: none known; allowed: hourglass, hourglass-unary, hourglass-stream, hourglass-connect, redis, postgresql, beanstalkd, nats, pebble", c.String("systems"))
	}
	if err := prerequisites(cfg, systems); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	meta := report.Meta{
		Command: "cd bench && go run ./cmd/peerbench " + shellJoin(os.Args[1:]),
		Start:   time.Now(), Scale: o.Scale, Reps: c.Int("reps"), Options: o,
		PollInterval: c.Duration("poll"), Redeliver: c.Duration("redeliver"), ConsumeBatch: c.Int("consume-batch"),
		LoadStart: loadavg(), Machine: machine(), Versions: versions(cfg),
	}
	var results []workload.Result
	for rep := 1; rep <= meta.Reps && ctx.Err() == nil; rep++ {
		rate := map[string]float64{}
		for _, w := range workloads {
			for i := range systems {
				if ctx.Err() != nil {
					break
				}
				sys := systems[(i+rep-1)%len(systems)] // each repetition starts with another system
				runs := []workload.Options{o}
				if w == "W5" {
					runs = runs[:0]
					for _, r := range w5Rates {
						ro := o
						ro.W5Rate = r
						runs = append(runs, ro)
					}
				}
				for _, ro := range runs {
					fmt.Fprintf(os.Stderr, "%s rep %d/%d %s %s\n", time.Now().Format("15:04:05"), rep, meta.Reps, w, sys.Label())
					r := workload.Run(ctx, w, sys, rep, ro, rate[sys.Label()])
					if w == "W1" && r.End == "complete" {
						rate[sys.Label()] = r.ProducePerSec
					}
					results = append(results, r)
					fmt.Fprintf(os.Stderr, "  %s\n", summary(r))
				}
			}
		}
	}
	meta.End, meta.LoadEnd = time.Now(), loadavg()
	if n := c.String("note"); n != "" {
		meta.Shared = n
	} else {
		meta.Shared = "Whether other work shared the machine was not stated (--note)."
	}
	if err := os.MkdirAll(c.String("results"), 0o755); err != nil {
		return err
	}
	raw := filepath.Join(c.String("results"), "peers-"+meta.Start.UTC().Format("20060102T150405Z")+".json")
	b, err := json.MarshalIndent(report.File{Meta: meta, Results: results}, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(raw, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "raw results: %s\n", raw)
	if c.Bool("no-doc") {
		return ctx.Err()
	}
	if err := writeDoc(c.String("out"), meta, systems, results); err != nil {
		return err
	}
	return ctx.Err()
}

// writeDoc writes out/BENCHMARKS-PEERS.md and its plots.
func writeDoc(out string, meta report.Meta, systems []peers.System, results []workload.Result) error {
	meta.CDFPlot, meta.BarPlot = "peers-w1-lateness-cdf.png", "peers-throughput.png"
	if err := report.LatenessCDF(filepath.Join(out, meta.CDFPlot), systems, results); err != nil {
		fmt.Fprintf(os.Stderr, "lateness plot: %v\n", err)
		meta.CDFPlot = ""
	}
	if err := report.Throughput(filepath.Join(out, meta.BarPlot), systems, results); err != nil {
		fmt.Fprintf(os.Stderr, "throughput plot: %v\n", err)
		meta.BarPlot = ""
	}
	f, err := os.Create(filepath.Join(out, "BENCHMARKS-PEERS.md"))
	if err != nil {
		return err
	}
	report.Write(f, meta, systems, results)
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", filepath.Join(out, "BENCHMARKS-PEERS.md"))
	return nil
}

// shellJoin quotes each argument that needs it for a POSIX shell.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:@%+", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, strings.ToUpper(f))
	}
	return out
}

func summary(r workload.Result) string {
	s := fmt.Sprintf("%s: acked %d/%d", r.End, r.Acked, r.Messages)
	if r.Workload != "W3" { // W3 consumes nothing
		s += fmt.Sprintf(" delivered %d, lost %d, dup %d, early %d", r.Delivered, r.Lost, r.Duplicates, r.Early)
	}
	switch r.Workload {
	case "W1", "W4":
		s += fmt.Sprintf(", produce %.0f/s, lateness p50 %v p99 %v max %v", r.ProducePerSec, r.LatenessP50.Round(time.Microsecond), r.LatenessP99.Round(time.Microsecond), r.LatenessMax.Round(time.Microsecond))
		if r.Workload == "W4" {
			s += fmt.Sprintf(", restart %.2fs", r.DowntimeSeconds)
		}
	case "W2":
		s += fmt.Sprintf(", drain %.2fs, late production %v", r.DrainSeconds, r.LateProduction)
	case "W5":
		s += fmt.Sprintf(", rate %d/s over %.0fs, server CPU %.2fs (%.3fs per 100,000), disk flushes %.0f/s", r.Rate, r.SteadySeconds,
			r.ServerCPUSeconds, r.CPUSecondsPer100k, r.FlushesPerSec)
	case "W3":
		s += fmt.Sprintf(", produce %.0f/s, RSS %d→%d MiB (anon %d→%d), PSS %d→%d MiB, disk %d→%d MiB", r.ProducePerSec,
			r.RSSBefore>>20, r.RSSAfter>>20, r.AnonBefore>>20, r.AnonAfter>>20, r.PSSBefore>>20, r.PSSAfter>>20, r.DiskBefore>>20, r.DiskAfter>>20)
	}
	return s
}

// prerequisites builds hourglass and pebbledelay and checks the other
// programs.
func prerequisites(cfg peers.Config, systems []peers.System) error {
	need := map[string]bool{}
	for _, s := range systems {
		need[s.Name] = true
		if strings.HasPrefix(s.Name, "hourglass-") { // the same binary over another protocol
			need["hourglass"] = true
		}
	}
	if need["hourglass"] {
		cmd := exec.Command("go", "build", "-o", cfg.HourglassBin, "./cmd/hourglass")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building hourglass (run from bench/): %v\n%s", err, out)
		}
	}
	if need["pebble"] {
		cmd := exec.Command("go", "build", "-o", cfg.PebbleBin, "./cmd/pebbledelay")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building pebbledelay (run from bench/): %v\n%s", err, out)
		}
	}
	check := func(name, path string) error {
		if _, err := exec.LookPath(path); err != nil {
			return fmt.Errorf("%s: %s not found; install it with: bash peers.sh install", name, path)
		}
		return nil
	}
	for name, path := range map[string]string{"redis": "redis-server", "beanstalkd": "beanstalkd", "nats": cfg.NatsBin, "postgresql": filepath.Join(cfg.PgBin, "postgres")} {
		if need[name] {
			if err := check(name, path); err != nil {
				return err
			}
		}
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	kernel, _ := exec.Command("uname", "-r").Output()
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			mem = f[1] + " kB"
		}
	}
	return fmt.Sprintf("%d cores, %s memory, Linux %s, %s", runtime.NumCPU(), mem, strings.TrimSpace(string(kernel)), runtime.Version())
}

func versions(cfg peers.Config) []string {
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return filepath.Base(name) + " ?"
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	rev, _ := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	return []string{
		"hourglass " + strings.TrimSpace(string(rev)),
		first("redis-server", "--version"),
		first(filepath.Join(cfg.PgBin, "postgres"), "--version"),
		first("beanstalkd", "-v"),
		first(cfg.NatsBin, "--version"),
		first(cfg.PebbleBin, "--version"),
	}
}

package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

// clientFlags are the flags every client command takes.
func clientFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "addr", Value: client.DefaultAddr, EnvVars: []string{"HOURGLASS_ADDR"},
			Usage: "`URL` of the server (http://HOST:PORT, or https:// for a server with --tls-cert)"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"HOURGLASS_TOKEN"},
			Usage: "bearer `TOKEN` of a server started with --auth-token; prefer HOURGLASS_TOKEN (it stays out of the process list)"},
	}, extra...)
}

func newClient(c *cli.Context) (*client.Client, error) {
	addr := c.String("addr")
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return nil, commandError(c, "--addr %q: want a URL starting with http:// or https://, such as %s", addr, client.DefaultAddr)
	}
	cl, err := client.New(addr, client.WithToken(c.String("token")))
	if err != nil {
		return nil, commandError(c, "--addr %q: %v", addr, err)
	}
	return cl, nil
}

const exitCodes = `
Exit status: 0 on success; 1 on any error (bad flags, server unreachable, a
request the server refused), with a message on stderr that says what was wrong.`

// commandError adds the help hint to a mistake on the command line.
func commandError(c *cli.Context, format string, args ...any) error {
	return fmt.Errorf("%s: %s (see '%s --help')", c.Command.Name, fmt.Sprintf(format, args...), c.Command.HelpName)
}

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "schedule messages on a running server and print their IDs",
		UsageText: "hourglass send --topic T (--delay D | --at RFC3339 | --level N | --now) [--body TEXT] [--count N]",
		Description: `Schedules --count messages (default 1) with the same --topic, --body and time,
and prints each message's ID (32 hex digits) on its own line, in order.

The time is exactly one of:
  --delay D      from the server's clock: 1500ms, 30s, 10m, 2h, 7d, 1y
  --at TIME      an absolute RFC 3339 time: 2030-01-02T09:00:00Z (past = now)
  --level N      a RocketMQ-style delay level of the server's --delay-levels
                 (by default 1=1s 2=5s 3=10s 4=30s 5=1m ... 18=2h)
  --now          due at once (the same as --delay 0)
A message that names no time is due at once, so send refuses one without
any of these: a forgotten flag must not mean "deliver now".

With --count above 1 the messages go through the client's batching producer
(ScheduleBatch, up to 100 per call).

  hourglass send --topic orders --delay 30s --body '{"order":42}'
` + exitCodes,
		Flags: clientFlags(
			&cli.StringFlag{Name: "topic", Usage: "`TOPIC` to deliver to: ASCII letters, digits, '.', '_' and '-', starting with a letter, digit or '_'"},
			&cli.StringFlag{Name: "delay", Usage: "deliver after this `DURATION` (ms, s, m, h, d, y)"},
			&cli.StringFlag{Name: "at", Usage: "deliver at this `TIME` (RFC 3339, such as 2030-01-02T09:00:00Z)"},
			&cli.IntFlag{Name: "level", Usage: "deliver after delay level `N` (1-based)"},
			&cli.BoolFlag{Name: "now", Usage: "deliver at once"},
			&cli.StringFlag{Name: "body", Usage: "message body `TEXT`"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "send `N` identical messages"},
		),
		OnUsageError: usageError,
		Action:       runSend,
	}
}

func runSend(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q; the body goes in --body", c.Args().Slice())
	}
	m := client.Message{Topic: c.String("topic"), Body: []byte(c.String("body"))}
	if m.Topic == "" {
		return commandError(c, "--topic is missing")
	}
	var set []string
	for _, f := range []string{"delay", "at", "level", "now"} {
		if c.IsSet(f) {
			set = append(set, "--"+f)
		}
	}
	if len(set) != 1 {
		return commandError(c, "give exactly one of --delay, --at, --level and --now (when to deliver), got %d (%s)", len(set), strings.Join(set, ", "))
	}
	switch {
	case c.IsSet("now"):
		if !c.Bool("now") {
			return commandError(c, "--now=false: give --delay, --at or --level instead")
		}
	case c.IsSet("delay"):
		d, err := units.ParseDuration(c.String("delay"))
		if err != nil || d < 0 {
			return commandError(c, "--delay %q: want a duration of 0 or more with a unit, such as 500ms, 30s, 10m, 2h or 7d", c.String("delay"))
		}
		m.Delay = d // 0 is now
	case c.IsSet("at"):
		at, err := time.Parse(time.RFC3339Nano, c.String("at"))
		if err != nil {
			return commandError(c, "--at %q: want an RFC 3339 time such as 2030-01-02T09:00:00Z or 2030-01-02T10:00:00+01:00", c.String("at"))
		}
		m.At = at
	default:
		if c.Int("level") < 1 {
			return commandError(c, "--level %d: levels start at 1", c.Int("level"))
		}
		m.Level = c.Int("level")
	}
	n := c.Int("count")
	if n < 1 {
		return commandError(c, "--count %d: at least 1", n)
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := c.Context
	if n == 1 {
		id, err := cl.Schedule(ctx, m)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, id)
		return nil
	}
	p := client.NewProducer(cl, client.ProducerOptions{})
	defer p.Close()
	// Send on one goroutine and print on this one, in order; quit stops
	// the sender when printing fails.
	results, quit := make(chan *client.Result, 1000), make(chan struct{})
	defer close(quit)
	go func() {
		defer close(results)
		for range n {
			select {
			case results <- p.Send(ctx, m):
			case <-quit:
				return
			}
		}
	}()
	for r := range results {
		id, err := r.Wait(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, id)
	}
	return ctx.Err()
}

func recvCommand() *cli.Command {
	return &cli.Command{
		Name:      "recv",
		Usage:     "receive due messages from a topic and print them as JSON lines",
		UsageText: "hourglass recv --topic T [--count N] [--timeout D] [--no-ack]",
		Description: `Long-polls --topic and prints each message as one JSON object per line:

  {"id":"...","topic":"orders","body":"hello","deliver_at":"2030-01-02T09:00:00.000000000Z",
   "received_at":"2030-01-02T09:00:00.001234567Z","attempt":0}

Times are RFC 3339 in UTC with nanoseconds (server clock). "body" holds the
body as text when it is valid UTF-8; otherwise "body" is left out and
"body_base64" holds it in standard base64. "attempt" is 0 for a first
delivery. "origin_id" (the producer's ID, for a retry) and "headers" are
added when they differ from id or are present.

Each message is acked after it is printed, unless --no-ack: then it is
delivered again when its --lease ends.

Stops after --count messages, or once --timeout has passed, or on SIGINT;
with neither --count nor --timeout it runs until interrupted.
` + exitCodes + `
Running out of --timeout before --count messages arrive is not an error.`,
		Flags: clientFlags(
			&cli.StringFlag{Name: "topic", Usage: "`TOPIC` to receive from (\"<topic>.dlq\" holds <topic>'s dead letters)"},
			&cli.IntFlag{Name: "count", Usage: "stop after `N` messages; 0 means no limit"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop after this `DURATION` (such as 10s); 0 means no limit"},
			&cli.BoolFlag{Name: "no-ack", Usage: "print messages without acking them"},
			&cli.DurationFlag{Name: "lease", Usage: "lease (`DURATION`) of each message, 1ms to 12h; default the server's --default-lease"},
		),
		OnUsageError: usageError,
		Action:       runRecv,
	}
}

// recvLine is one line `hourglass recv` prints.
type recvLine struct {
	ID         string            `json:"id"`
	Topic      string            `json:"topic"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	DeliverAt  string            `json:"deliver_at"`
	ReceivedAt string            `json:"received_at"`
	Attempt    int               `json:"attempt"`
	OriginID   string            `json:"origin_id,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
}

// rfc3339Nano is RFC 3339 with all nine digits, so lines sort and align.
const rfc3339Nano = "2006-01-02T15:04:05.000000000Z07:00"

func newRecvLine(d client.Delivery) recvLine {
	l := recvLine{
		ID: d.ID, Topic: d.Topic, Attempt: d.Attempt, Headers: d.Headers,
		DeliverAt: d.DeliverAt.UTC().Format(rfc3339Nano), ReceivedAt: d.ReceivedAt.UTC().Format(rfc3339Nano),
	}
	if d.OriginID != d.ID {
		l.OriginID = d.OriginID
	}
	if utf8.Valid(d.Body) {
		s := string(d.Body)
		l.Body = &s
	} else {
		l.BodyBase64 = base64.StdEncoding.EncodeToString(d.Body)
	}
	return l
}

func runRecv(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	topic := c.String("topic")
	if topic == "" {
		return commandError(c, "--topic is missing")
	}
	count, timeout := c.Int("count"), c.Duration("timeout")
	if count < 0 {
		return commandError(c, "--count %d: 0 (no limit) or more", count)
	}
	if timeout < 0 {
		return commandError(c, "--timeout %v: 0 (no limit) or more", timeout)
	}
	ctx := c.Context
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(c.App.Writer)
	for got := 0; count == 0 || got < count; {
		batch := 100
		if count > 0 {
			batch = min(count-got, 1000)
		}
		wait := 20 * time.Second
		dl, hasDeadline := ctx.Deadline()
		if hasDeadline {
			// The server's wait ends a little before --timeout, so that
			// its empty answer, not the call's deadline, ends the command.
			wait = min(wait, max(time.Until(dl)-50*time.Millisecond, 0))
		}
		ds, err := cl.Receive(ctx, topic, client.ReceiveOptions{MaxMessages: batch, Wait: wait, Lease: c.Duration("lease")})
		if err != nil {
			if ctx.Err() != nil || (hasDeadline && status.Code(err) == codes.DeadlineExceeded && time.Until(dl) < time.Second) {
				return nil // --timeout or SIGINT
			}
			return err
		}
		for _, d := range ds {
			if err := enc.Encode(newRecvLine(d)); err != nil {
				return err
			}
			got++
			if !c.Bool("no-ack") {
				// Ack even if the timeout has just passed: it was printed.
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := cl.Ack(actx, d)
				cancel()
				if err != nil {
					return fmt.Errorf("acking %s: %w", d.ID, err)
				}
			}
		}
		if len(ds) == 0 && ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel scheduled messages by ID",
		UsageText: "hourglass cancel ID...",
		Description: `Cancels each message and prints "ID answer" per ID, one line each, where the
answer is one of:
  cancelled          it will never be delivered
  already-delivered  it was delivered (or is being delivered), or cancelled before
  unknown            no such message is pending on this server
` + exitCodes + `
Every answer above is a success; a malformed ID (not 32 hex digits) is an
error, after the lines of the IDs before it.`,
		Flags:        clientFlags(),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return commandError(c, "give one or more message IDs (32 hex digits each, as send printed them)")
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			for _, id := range c.Args().Slice() {
				r, err := cl.Cancel(c.Context, id)
				if err != nil {
					return fmt.Errorf("cancel %s: %w", id, err)
				}
				fmt.Fprintln(c.App.Writer, id, r)
			}
			return nil
		},
	}
}

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print what a server holds: pending messages by hour ahead, totals, lateness",
		UsageText: "hourglass stats [--addr URL]",
		Description: `Prints the server's Stats: messages pending per hour ahead of the server's clock
(from its delivery buckets; "~" marks counts of buckets not in memory, which
include cancelled entries), the engine's and each topic's totals since the
server started, and the lateness percentiles of recent deliveries.
` + exitCodes,
		Flags:        clientFlags(),
		OnUsageError: usageError,
		Action:       runStats,
	}
}

func runStats(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Stats(c.Context)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	now := st.ServerTime.AsTime()
	fmt.Fprintf(w, "server time\t%s\n\n", now.UTC().Format(rfc3339Nano))

	type hour struct {
		pending int64
		approx  bool
	}
	hours := map[int64]*hour{}
	var total int64
	for _, b := range st.Pending {
		h := int64(0)
		if d := b.Start.AsTime().Sub(now); d > 0 {
			h = int64(d / time.Hour)
		}
		if hours[h] == nil {
			hours[h] = &hour{}
		}
		hours[h].pending += b.Pending
		hours[h].approx = hours[h].approx || b.Approximate
		total += b.Pending
	}
	keys := make([]int64, 0, len(hours))
	for h := range hours {
		keys = append(keys, h)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	fmt.Fprintln(w, "pending\thours ahead\tmessages")
	for _, h := range keys {
		approx := ""
		if hours[h].approx {
			approx = "~"
		}
		fmt.Fprintf(w, "\t%d-%d\t%s%d\n", h, h+1, approx, hours[h].pending)
	}
	fmt.Fprintf(w, "\ttotal\t%d\n\n", total)

	if e := st.Engine; e != nil {
		fmt.Fprintln(w, "engine\tscheduled\tcancelled\tfired\tdelivered\tretries\tinflight\tsegments\treput lag")
		fmt.Fprintf(w, "\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%dB\n\n", e.Scheduled, e.Cancelled, e.Fired, e.Delivered, e.Retries, e.Inflight, e.Segments, e.ReputLagBytes)
	}
	if len(st.Topics) > 0 {
		fmt.Fprintln(w, "topic\tscheduled\tdelivered\tacked\tnacked\tredelivered\texpired\tdead-lettered\tready\tleased")
		for _, t := range st.Topics {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Topic, t.Scheduled, t.Delivered, t.Acked, t.Nacked, t.Redelivered, t.Expired, t.DeadLettered, t.Ready, t.Leased)
		}
		fmt.Fprintln(w)
	}
	if l := st.Lateness; l != nil {
		fmt.Fprintf(w, "lateness\tp50 %.3fms\tp90 %.3fms\tp99 %.3fms\tmax %.3fms\t(last %d deliveries)\n", l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs, l.Count)
	}
	return w.Flush()
}

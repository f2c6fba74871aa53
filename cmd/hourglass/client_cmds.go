package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

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
	}, slices.Concat(clientTLSFlags, extra)...)
}

func newClient(c *cli.Context) (*client.Client, error) {
	addr := c.String("addr")
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return nil, commandError(c, "--addr %q: want a URL starting with http:// or https://, such as %s", addr, client.DefaultAddr)
	}
	tc, err := clientTLS(c)
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithToken(c.String("token"))}
	if tc != nil {
		opts = append(opts, client.WithTLS(tc))
	}
	cl, err := client.New(addr, opts...)
	if err != nil {
		return nil, commandError(c, "--addr %q: %v", addr, err)
	}
	return cl, nil
}

// withClient opens a client to the server of --addr, runs f with it and
// closes it.
func withClient(c *cli.Context, f func(*client.Client) error) error {
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	return f(cl)
}

// call makes the one call op of a command with a client to the server of
// --addr. An error of op is prefixed with the command's name and ref,
// what the command names ("schedule pause daily-report: ..."); with ref ""
// it is returned as it is.
func call[T any](c *cli.Context, ref string, op func(*client.Client, context.Context) (T, error)) (T, error) {
	var v T
	err := withClient(c, func(cl *client.Client) error {
		var err error
		v, err = op(cl, c.Context)
		if err != nil && ref != "" {
			return fmt.Errorf("%s %s: %w", commandName(c), ref, err)
		}
		return err
	})
	return v, err
}

// refAction is the Action of a command about one thing (a topic, a
// schedule): arg reads its name from the command line (and may ask for
// confirmation), op is the call about it, and show prints the answer.
func refAction[T any](arg func(*cli.Context) (string, error), op func(*client.Client, context.Context, string) (T, error),
	show func(c *cli.Context, ref string, answer T) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		ref, err := arg(c)
		if err != nil {
			return err
		}
		v, err := call(c, ref, func(cl *client.Client, ctx context.Context) (T, error) { return op(cl, ctx, ref) })
		if err != nil {
			return err
		}
		return show(c, ref, v)
	}
}

// noAnswer is op of refAction for a call that answers only an error.
func noAnswer(op func(*client.Client, context.Context, string) error) func(*client.Client, context.Context, string) (struct{}, error) {
	return func(cl *client.Client, ctx context.Context, ref string) (struct{}, error) {
		return struct{}{}, op(cl, ctx, ref)
	}
}

// printDone is show of refAction for a call that answers nothing: it
// prints "REF done".
func printDone(done string) func(*cli.Context, string, struct{}) error {
	return func(c *cli.Context, ref string, _ struct{}) error {
		_, err := fmt.Fprintln(c.App.Writer, ref, done)
		return err
	}
}

const exitCodes = `
Exit status: 0 on success; 1 on any error (bad flags, server unreachable, a
request the server refused), with a message on stderr that says what was wrong.`

// commandName is the command's name without the program's ("policy set").
func commandName(c *cli.Context) string {
	return strings.TrimPrefix(c.Command.HelpName, c.App.Name+" ")
}

// commandError adds the command's name ("policy set") and the help hint
// to a mistake on the command line.
func commandError(c *cli.Context, format string, args ...any) error {
	return fmt.Errorf("%s: %s (see '%s --help')", commandName(c), fmt.Sprintf(format, args...), c.Command.HelpName)
}

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:  "send",
		Usage: "schedule messages on a running server and print their IDs",
		UsageText: "hourglass send --topic T (--delay D | --at RFC3339 | --level N | --now | --calendar C (--working-days N [--at-time HH:MM] | --working-hours H))\n" +
			"               [--body TEXT | --body-file F|-] [--header K=V]... [--key K] [--flow-key K] [--ttl D | --expire-at TIME] [--count N]",
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

` + workingHelp + `

The body is --body TEXT, or the bytes of --body-file F as they are (any
bytes; "-" reads standard input to its end), or empty; not both. Each
--header KEY=VALUE adds a header (repeat it for more; the value may hold
'=' and ','; a key once).

--key K is the idempotency key: within the server's --idempotency-window
(10m by default) a second send of the same --topic and --key stores nothing
and prints the first message's ID, so a send that failed or timed out can be
run again safely.

With --count above 1 the messages go through the client's batching producer
(ScheduleBatch, up to 100 per call); --key names one message, so it takes
--count 1.

  hourglass send --topic orders --delay 30s --body '{"order":42}'
  hourglass send --topic orders --at 2030-01-02T09:00:00Z --key order-42 \
      --header content-type=application/json --body-file order.json
  gzip -c report.csv | hourglass send --topic reports --now --body-file -
  hourglass send --topic invoices --calendar berlin --working-days 3 --at-time 09:00 --body 'remind'
  hourglass send --topic tickets --calendar support --working-hours 4 --key ticket-7 --body 'escalate'
` + exitCodes,
		Flags: clientFlags(slices.Concat([]cli.Flag{
			topicFlag("to deliver to: ASCII letters, digits, '.', '_' and '-', starting with a letter, digit or '_'"),
			&cli.StringFlag{Name: "delay", Usage: "deliver after this `DURATION` (ms, s, m, h, d, y)"},
			&cli.StringFlag{Name: "at", Usage: "deliver at this `TIME` (RFC 3339, such as 2030-01-02T09:00:00Z)"},
			&cli.IntFlag{Name: "level", Usage: "deliver after delay level `N` (1-based)"},
			&cli.BoolFlag{Name: "now", Usage: "deliver at once"},
		}, workingFlags(), bodyFlags(""), []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "idempotency `KEY`, at most 200 bytes: a resend within the server's --idempotency-window prints the first ID"},
			&cli.StringFlag{Name: "flow-key", Usage: "flow `KEY` the topic's flow policy counts the message under (a tenant, an account), at most 200 bytes; not the idempotency key"},
			&cli.StringFlag{Name: "ttl", Usage: "expire `DURATION` after the delivery time: never delivered after (dead-lettered, reason expired)"},
			&cli.StringFlag{Name: "expire-at", Usage: "expire at this `TIME` (RFC 3339), after the delivery time"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "send `N` identical messages"},
		})...),
		OnUsageError: usageError,
		Action:       runSend,
	}
}

func runSend(c *cli.Context) error {
	topic, rest, err := topicAndArgs(c, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return commandError(c, "takes one topic, got %q after %q; the body goes in --body", rest, topic)
	}
	m := client.Message{Topic: topic, IdempotencyKey: c.String("key"), FlowKey: c.String("flow-key")}
	if c.IsSet("flow-key") && m.FlowKey == "" {
		return commandError(c, "--flow-key is empty: give a key, or leave --flow-key out")
	}
	if h, ok := c.Generic("header").(*headerFlag); ok && len(h.m) > 0 {
		m.Headers = h.m
	}
	switch {
	case c.IsSet("ttl") && c.IsSet("expire-at"):
		return commandError(c, "--ttl and --expire-at: give one of them (when the message expires)")
	case c.IsSet("ttl"):
		d, err := units.ParseDuration(c.String("ttl"))
		if err != nil || d <= 0 {
			return commandError(c, "--ttl %q: want a duration above 0 with a unit, such as 30s, 10m or 7d", c.String("ttl"))
		}
		m.TTL = d
	case c.IsSet("expire-at"):
		at, err := time.Parse(time.RFC3339Nano, c.String("expire-at"))
		if err != nil {
			return commandError(c, "--expire-at %q: want an RFC 3339 time such as 2030-01-02T09:00:00Z", c.String("expire-at"))
		}
		m.ExpireAt = at
	}
	if c.IsSet("key") && m.IdempotencyKey == "" {
		return commandError(c, "--key is empty: give a key, or leave --key out")
	}
	var set []string
	for _, f := range []string{"delay", "at", "level", "now", "working-days", "working-hours"} {
		if c.IsSet(f) {
			set = append(set, "--"+f)
		}
	}
	switch {
	case len(set) == 0:
		return commandError(c, "when to deliver is missing: give --delay D (such as 30s or 2h), --at TIME (RFC 3339, such as 2030-01-02T09:00:00Z), --level N, --now, or --calendar C with --working-days N or --working-hours H")
	case len(set) > 1:
		return commandError(c, "%s: give one of them (when to deliver)", strings.Join(set, " and "))
	}
	switch {
	case c.IsSet("working-days") || c.IsSet("working-hours"):
		w, err := workingOfFlags(c)
		if err != nil {
			return err
		}
		m.Working = w
	case noWorkingFlags(c) != nil:
		return noWorkingFlags(c)
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
	if n > 1 && m.IdempotencyKey != "" {
		return commandError(c, "--key with --count %d: a key names one message, and the %d would all get the first one's ID; send them one at a time, each with its own --key", n, n)
	}
	body, _, err := bodyOfFlags(c)
	if err != nil {
		return err
	}
	m.Body = body
	return withClient(c, func(cl *client.Client) error { return send(c, cl, m, n) })
}

// send schedules n copies of m and prints their IDs, in order.
func send(c *cli.Context, cl *client.Client, m client.Message, n int) error {
	ctx := c.Context
	if n == 1 {
		id, err := cl.Schedule(ctx, m)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, id)
		if m.Working != nil {
			printWorking(c, id)
		}
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

// bodyFlags are the flags of a message's body and headers: send's, and
// those of schedule create and update for each occurrence (whose).
func bodyFlags(whose string) []cli.Flag {
	of, to := "", ""
	if whose != "" {
		of, to = " of "+whose, " to "+whose
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "body", Usage: "message body `TEXT`" + of},
		&cli.StringFlag{Name: "body-file", Usage: "read the body from `FILE` (\"-\": standard input)"},
		&cli.GenericFlag{Name: "header", Value: &headerFlag{}, Usage: "add the header `KEY=VALUE`" + to + " (repeatable)"},
	}
}

// bodyOfFlags returns the body --body or --body-file gives, and whether
// one of them is given.
func bodyOfFlags(c *cli.Context) ([]byte, bool, error) {
	switch {
	case c.IsSet("body") && c.IsSet("body-file"):
		return nil, false, commandError(c, "--body and --body-file: give one of them")
	case c.IsSet("body-file"):
		b, err := readBodyFile(c)
		return b, err == nil, err
	}
	return []byte(c.String("body")), c.IsSet("body"), nil
}

// readBodyFile reads --body-file: a file, or "-" for the app's stdin.
func readBodyFile(c *cli.Context) ([]byte, error) {
	name := c.String("body-file")
	if name == "-" {
		b, err := io.ReadAll(c.App.Reader)
		if err != nil {
			return nil, fmt.Errorf("%s: --body-file -: reading standard input: %w", commandName(c), err)
		}
		return b, nil
	}
	if name == "" {
		return nil, commandError(c, "--body-file is empty: give a file, or - for standard input")
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%s: --body-file: %w", commandName(c), err) // names the file and why
	}
	return b, nil
}

// headerFlag is the value of send's repeatable --header KEY=VALUE. Unlike
// cli.StringSliceFlag it does not split values at commas.
type headerFlag struct{ m map[string]string }

func (h *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q has no '=': want KEY=VALUE, such as content-type=application/json", s)
	case k == "":
		return fmt.Errorf("%q has an empty key: want KEY=VALUE, such as content-type=application/json", s)
	}
	if _, dup := h.m[k]; dup {
		return fmt.Errorf("%q: header %q is given twice; a key takes one value", s, k)
	}
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[k] = v
	return nil
}

func (h *headerFlag) String() string {
	keys := make([]string, 0, len(h.m))
	for k := range h.m {
		keys = append(keys, k+"="+h.m[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func cancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "cancel scheduled messages by ID, or by topic and key",
		UsageText: "hourglass cancel (ID... | --topic T --key K)",
		Description: `Cancels each message and prints "REF answer" per message, one line each, where
REF is the ID or TOPIC/KEY given and the answer is one of:
  cancelled          it will never be delivered
  already-delivered  it was delivered (or is being delivered, or dead-lettered)
  already-cancelled  an earlier cancel cancelled it; it will never be delivered
  unknown            no such message is pending on this server

A message sent with 'send --key K' can be named by --topic and --key instead
of its ID, for as long as it lives (not only within the idempotency window):

  hourglass cancel 0000019bd6a1f2c00000000000001f40
  hourglass cancel --topic orders --key order-42      # "orders/order-42 cancelled"
` + exitCodes + `
Every answer above is a success; a malformed ID (not 32 hex digits) is an
error, after the lines of the IDs before it.`,
		Flags:        clientFlags(keyFlags()...),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			ts, err := targets(c, true)
			if err != nil {
				return err
			}
			return withClient(c, func(cl *client.Client) error {
				for _, t := range ts {
					if t.err != nil {
						return fmt.Errorf("cancel %s: %w", t.name, t.err)
					}
					r, err := cl.Cancel(c.Context, t.ref)
					if err != nil {
						return fmt.Errorf("cancel %s: %w", t.name, err)
					}
					fmt.Fprintln(c.App.Writer, t.name, r)
				}
				return nil
			})
		},
	}
}

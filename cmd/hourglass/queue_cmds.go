package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

// The queue's commands: recv receives due messages, ack and nack settle
// what a consumer received (`hourglass recv --no-ack`, or a program that
// crashed before settling).

func ackCommand() *cli.Command {
	return &cli.Command{
		Name:      "ack",
		Usage:     "complete received messages by ID: they are never delivered again",
		UsageText: "hourglass ack --topic T ID...",
		Description: `Acks each message of --topic that is leased now, that is received and not yet
acked, nacked or given back by its lease ending, and prints "ID acked" per ID.
Any holder of the ID may ack it: this is how to settle what
'hourglass recv --no-ack' printed, or what a consumer left behind.

  hourglass recv --topic orders --count 1 --no-ack    # prints {"id":"<ID>",...}
  hourglass ack <ID> --topic orders                   # "<ID> acked"

An ID that is not leased now (never received, already settled, or its lease
ended and it is due again) is an error, after the lines of the IDs before it.
` + exitCodes,
		Flags:        clientFlags(topicFlag("the messages were received from")),
		OnUsageError: usageError,
		Action:       func(c *cli.Context) error { return runSettle(c, "ack", 0) },
	}
}

func nackCommand() *cli.Command {
	return &cli.Command{
		Name:      "nack",
		Usage:     "give received messages back by ID, to be delivered again (after --delay), or dead-letter them",
		UsageText: "hourglass nack --topic T [--delay D] [--reason TEXT] [--dead-letter] ID...",
		Description: `Gives back each message of --topic that is leased now (received and not yet
settled) and prints "ID nacked" per ID. Its attempt count rises by one; after
the topic's max attempts ('hourglass policy show') it goes to the dead-letter
topic "<topic>.dlq" instead.

  --delay 0 (the default)  when the topic's retry backoff says (by default at
                           once), with the same ID
  --delay D                due again after D (500ms, 30s, 10m, 2h, 7d), as a
                           new message: a new ID, with origin_id the old one
  --reason TEXT            why (the error met), at most 1000 bytes: kept with
                           the message, and shown with it once dead-lettered
                           ('hourglass list --state dead-lettered')
  --dead-letter            to "<topic>.dlq" now, whatever attempts remain (a
                           message that can never be handled); prints
                           "ID dead-lettered"

  hourglass nack <ID> --topic orders --delay 1m       # "<ID> nacked"
  hourglass nack <ID> --topic orders --dead-letter --reason 'bad JSON'

An ID that is not leased now (never received, already settled, or its lease
ended and it is due again) is an error, after the lines of the IDs before it.
` + exitCodes,
		Flags: clientFlags(
			topicFlag("the messages were received from"),
			&cli.StringFlag{Name: "delay", Value: "0", Usage: "deliver again after this `DURATION` (ms, s, m, h, d, y), up to the server's --max-delay"},
			&cli.StringFlag{Name: "reason", Usage: "why it is given back: `TEXT` kept with the message (at most 1000 bytes)"},
			&cli.BoolFlag{Name: "dead-letter", Usage: "send it to \"<topic>.dlq\" now, whatever attempts remain"},
		),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			d, err := units.ParseDuration(c.String("delay"))
			if err != nil || d < 0 {
				return commandError(c, "--delay %q: want a duration of 0 or more with a unit, such as 500ms, 30s, 10m, 2h or 7d", c.String("delay"))
			}
			if c.Bool("dead-letter") && c.IsSet("delay") {
				return commandError(c, "--delay with --dead-letter: a dead letter is not delivered again; give one of them")
			}
			if n := len(c.String("reason")); n > 1000 {
				return commandError(c, "--reason is %d bytes: at most 1000", n)
			}
			return runSettle(c, "nack", d)
		},
	}
}

// runSettle acks (op "ack") or nacks with delay each ID of the command
// line, in order, and stops at the first that fails.
func runSettle(c *cli.Context, op string, delay time.Duration) error {
	topic, ids, err := topicAndArgs(c, isRef)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return commandError(c, "give one or more message IDs (32 hex digits each, as recv printed them in \"id\")")
	}
	return withClient(c, func(cl *client.Client) error {
		for _, arg := range ids {
			id, err := client.ParseID(arg)
			if err != nil {
				return fmt.Errorf("%s %s: %w", op, arg, err)
			}
			d := client.Delivery{ID: id, Topic: topic}
			done := op + "ed"
			switch {
			case op == "ack":
				err = cl.Ack(c.Context, d)
			case c.Bool("dead-letter"):
				err, done = cl.NackWith(c.Context, d, client.NackOptions{Reason: c.String("reason"), DeadLetter: true}), "dead-lettered"
			default:
				err = cl.NackWith(c.Context, d, client.NackOptions{Delay: delay, Reason: c.String("reason")})
			}
			if status.Code(err) == codes.FailedPrecondition {
				return fmt.Errorf("%s %s: not leased on topic %q now (never received, already acked or nacked, or its lease ended): %w", op, id, topic, err)
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", op, id, err)
			}
			fmt.Fprintln(c.App.Writer, id, done)
		}
		return nil
	})
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
delivered again when its --lease ends, and each line adds "receipt" (the
name of this lease: 'hourglass extend' takes it) and "lease_expires_at".
Settle such a message with 'hourglass ack', 'nack' or 'extend'. Leases do
not survive a restart of the server: a message leased and not acked is due
again as soon as the server is back, and delivered again.

A topic the server does not know (no message due, leased or sent to it
since it started, and no policy: a typo, perhaps) is told once on stderr,
with the nearest topic it knows; recv then waits for messages sent to it.

When the server is unreachable or restarting (UNAVAILABLE, a refused or
broken connection; at start or later), recv says so on stderr once, retries
after 100ms, doubling up to 5s, and says so again when the server is back;
--count and --timeout go on counting. What it prints is printed once as far
as the leases allow: a message printed whose ack did not reach the server
(it went away in between, or the lease ended) is delivered again, and this
recv then acks it without printing it twice; but once recv has exited, such
a message comes again to the next consumer. With --no-ack every redelivery
is printed.

Stops after --count messages, or once --timeout has passed, or on SIGINT
(Ctrl-C); with neither --count nor --timeout it runs until interrupted.
` + exitCodes + `
Running out of --timeout before --count messages arrive is not an error, and
an unreachable server is waited for, not an error.`,
		Flags: clientFlags(
			topicFlag("to receive from (\"<topic>.dlq\" holds <topic>'s dead letters)"),
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
	ID    string `json:"id"`
	Topic string `json:"topic"`
	bodyJSON
	DeliverAt  string            `json:"deliver_at"`
	ReceivedAt string            `json:"received_at"`
	Attempt    int               `json:"attempt"`
	OriginID   string            `json:"origin_id,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	// Receipt and LeaseExpiresAt: with --no-ack, the lease.
	Receipt        string `json:"receipt,omitempty"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
}

// rfc3339Nano is RFC 3339 with all nine digits, so lines sort and align.
const rfc3339Nano = "2006-01-02T15:04:05.000000000Z07:00"

func newRecvLine(d client.Delivery) recvLine {
	l := recvLine{
		ID: d.ID.String(), Topic: d.Topic, bodyJSON: newBodyJSON(d.Body), Attempt: d.Attempt, Headers: d.Headers,
		DeliverAt: d.DeliverAt.UTC().Format(rfc3339Nano), ReceivedAt: d.ReceivedAt.UTC().Format(rfc3339Nano),
	}
	if d.OriginID != d.ID {
		l.OriginID = d.OriginID.String()
	}
	return l
}

func runRecv(c *cli.Context) error {
	topic, err := oneTopic(c)
	if err != nil {
		return err
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
	return withClient(c, func(cl *client.Client) error {
		// A topic the server does not know may be a typo: say so once,
		// then wait for it as asked. The question is not part of the
		// wait: --timeout bounds the receiving, not the check.
		check, cancel := context.WithTimeout(c.Context, 5*time.Second)
		note, err := unknownTopic(check, cl, topic)
		cancel()
		if err == nil && note != "" {
			fmt.Fprintf(c.App.ErrWriter, "hourglass recv: %s; waiting for messages sent to it (Ctrl-C stops)\n", note)
		}
		r := &receiver{
			cl: cl, topic: topic, lease: c.Duration("lease"), ack: !c.Bool("no-ack"),
			enc: json.NewEncoder(c.App.Writer), outage: outage{w: c.App.ErrWriter, addr: c.String("addr")},
			unacked: map[client.ID]bool{},
		}
		return r.run(ctx, count)
	})
}

// receiver is one `hourglass recv`: it long-polls, prints and acks, and
// rides out outages of the server. One goroutine uses it.
type receiver struct {
	cl    *client.Client
	topic string
	lease time.Duration
	ack   bool
	enc   *json.Encoder
	outage
	// unacked holds the origin IDs of messages printed whose ack failed:
	// they come again, and are then acked without being printed.
	unacked map[client.ID]bool
}

// maxUnacked bounds receiver.unacked; past it a redelivery may be printed
// twice.
const maxUnacked = 100_000

// pollSlack is how long a Receive call may take beyond its server-side
// wait before recv gives up on the connection and retries.
const pollSlack = 15 * time.Second

func (r *receiver) run(ctx context.Context, count int) error {
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
		callCtx, cancel := context.WithTimeout(ctx, wait+pollSlack)
		ds, err := r.cl.Receive(callCtx, r.topic, client.ReceiveOptions{MaxMessages: batch, Wait: wait, Lease: r.lease})
		cancel()
		if err != nil {
			if ctx.Err() != nil || (hasDeadline && status.Code(err) == codes.DeadlineExceeded && time.Until(dl) < time.Second) {
				return nil // --timeout or SIGINT
			}
			if !retryable(err) {
				return err
			}
			if !r.down(ctx, err) {
				return nil // --timeout or SIGINT while waiting
			}
			continue
		}
		r.up()
		for _, d := range ds {
			origin := cmp.Or(d.OriginID, d.ID)
			if r.ack && r.unacked[origin] {
				// Printed before its ack failed: settle it quietly.
				if r.settle(ctx, d) == nil {
					delete(r.unacked, origin)
				}
				continue
			}
			line := newRecvLine(d)
			if !r.ack {
				line.Receipt, line.LeaseExpiresAt = d.Receipt, d.LeaseExpiresAt.UTC().Format(rfc3339Nano)
			}
			if err := r.enc.Encode(line); err != nil {
				return err
			}
			got++
			if !r.ack {
				continue
			}
			if err := r.settle(ctx, d); err != nil {
				if !retryable(err) && status.Code(err) != codes.FailedPrecondition {
					return fmt.Errorf("acking %s: %w", d.ID, err)
				}
				fmt.Fprintf(r.w, "hourglass recv: acking %s failed (%s); it will be delivered again, and this recv acks it then without printing it again\n", d.ID, errorText(err))
				if len(r.unacked) < maxUnacked {
					r.unacked[origin] = true
				}
			}
		}
		if len(ds) == 0 && ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// settle acks d, retrying through an outage (told as Receive's are) for
// as long as d's lease lasts (at most a minute), and even after ctx ends
// for the first try: it was printed.
func (r *receiver) settle(ctx context.Context, d client.Delivery) error {
	lease := d.LeaseExpiresAt.Sub(d.ReceivedAt) // both on the server's clock
	deadline := time.Now().Add(min(max(lease, time.Second), time.Minute))
	for {
		actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		err := r.cl.Ack(actx, d)
		cancel()
		if !retryable(err) {
			r.up() // the server answered
			return err
		}
		if ctx.Err() != nil || time.Until(deadline) <= 0 || !r.down(ctx, err) {
			return err
		}
	}
}

// retryable reports whether err is worth retrying after a while: the
// server is down, restarting, or over a limit (the codes docs/API.md tells
// clients to retry), or a call outlived pollSlack on a dead connection.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// outage tells stderr once when the server went away and once when it is
// back.
type outage struct {
	w     io.Writer
	addr  string
	since time.Time // zero: not in an outage
	wait  backoff
}

// down reports err (the first time of an outage) and waits the next
// backoff; false if ctx ended first.
func (o *outage) down(ctx context.Context, err error) bool {
	if o.since.IsZero() {
		o.since = time.Now()
		fmt.Fprintf(o.w, "hourglass recv: %s is unavailable (%s); retrying every %v to %v until it is back (Ctrl-C stops)\n",
			o.addr, errorText(err), backoffMin, backoffMax)
	}
	return sleepCtx(ctx, o.wait.next())
}

// up ends an outage, if there was one.
func (o *outage) up() {
	if o.since.IsZero() {
		return
	}
	fmt.Fprintf(o.w, "hourglass recv: %s is back after %v\n", o.addr, time.Since(o.since).Round(time.Millisecond))
	o.since, o.wait = time.Time{}, backoff{}
}

const backoffMin, backoffMax = 100 * time.Millisecond, 5 * time.Second

// backoff is a capped exponential backoff: 100ms, 200ms, ... 5s, each
// with up to 20% added at random so that many clients spread out.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, backoffMin), backoffMax)
	return b.d + rand.N(b.d/5+1)
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

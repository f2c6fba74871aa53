package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

// messageJSON is a stored message as get and list print it.
type messageJSON struct {
	ID         string            `json:"id"`
	Topic      string            `json:"topic"`
	DeliverAt  string            `json:"deliver_at"`
	Attempt    uint32            `json:"attempt"`
	OriginID   string            `json:"origin_id,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
}

func newMessageJSON(m client.Scheduled) messageJSON {
	j := messageJSON{ID: m.ID.String(), Topic: m.Topic, DeliverAt: m.DeliverAt.UTC().Format(rfc3339Nano),
		Attempt: m.Attempt, OriginID: m.OriginID.String(), Headers: m.Headers}
	if utf8.Valid(m.Body) {
		s := string(m.Body)
		j.Body = &s
	} else {
		j.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body)
	}
	return j
}

// getJSON is what get --json prints.
type getJSON struct {
	ID              string       `json:"id"`
	State           string       `json:"state"`
	Message         *messageJSON `json:"message,omitempty"`
	QueueAttempt    uint32       `json:"queue_attempt,omitempty"`
	LeaseUntil      string       `json:"lease_until,omitempty"`
	DeadLetterTopic string       `json:"dead_letter_topic,omitempty"`
}

func getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "look a message up by ID and print what became of it (reads only)",
		UsageText: "hourglass get ID [--addr URL] [--json]",
		Description: `Prints the message (topic, delivery time, attempt, origin, headers, body) and
its state, one of:
  pending        in its schedule segment: it will be delivered at its time
  delivering     handed to the sink, not confirmed yet
  delivered      the sink (a webhook or NATS) confirmed it
  due            in the built-in queue, waiting to be received
  leased         received from the built-in queue; its lease is running
  acked          acked in the built-in queue (or retried under a new ID after
                 a nack with a delay, or no longer held by the queue)
  cancelled      it will never be delivered
  dead-lettered  refused for good; "dead_letter_topic" names where it went
  not-found      no such message, or its schedule segment was deleted once
                 every message in it was done
Nothing is received, leased or changed: unlike 'recv --no-ack', get does not
raise the attempt count.

Example:
  hourglass get 0000019bd6a1f2c00000000000001f40 --json
` + exitCodes + `
A not-found message is a success (state not-found); a malformed ID is an error.`,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"}),
		OnUsageError: usageError,
		Action:       runGet,
	}
}

func runGet(c *cli.Context) error {
	if c.NArg() != 1 {
		return commandError(c, "give one message ID (32 hex digits, as send printed it), got %d arguments", c.NArg())
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	arg := c.Args().First()
	id, err := client.ParseID(arg)
	if err != nil {
		return fmt.Errorf("get %s: %w", arg, err)
	}
	f, err := cl.Get(c.Context, id)
	if err != nil {
		return fmt.Errorf("get %s: %w", arg, err)
	}
	j := getJSON{ID: arg, State: string(f.State), QueueAttempt: f.QueueAttempt, DeadLetterTopic: f.DeadLetterTopic}
	if f.State != client.StateNotFound {
		m := newMessageJSON(f.Message)
		j.Message = &m
	}
	if !f.LeaseUntil.IsZero() {
		j.LeaseUntil = f.LeaseUntil.UTC().Format(rfc3339Nano)
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(j)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "id:          %s\nstate:       %s\n", j.ID, j.State)
	if j.DeadLetterTopic != "" {
		fmt.Fprintf(w, "dead letter: %s\n", j.DeadLetterTopic)
	}
	if j.LeaseUntil != "" {
		fmt.Fprintf(w, "lease until: %s (queue attempt %d)\n", j.LeaseUntil, j.QueueAttempt)
	}
	if j.Message != nil {
		printMessage(w, j.Message)
	}
	return nil
}

func printMessage(w io.Writer, m *messageJSON) {
	fmt.Fprintf(w, "topic:       %s\ndeliver at:  %s\nattempt:     %d\n", m.Topic, m.DeliverAt, m.Attempt)
	if m.OriginID != "" {
		fmt.Fprintf(w, "origin:      %s\n", m.OriginID)
	}
	for k, v := range m.Headers {
		fmt.Fprintf(w, "header:      %s=%s\n", k, v)
	}
	if m.Body != nil {
		fmt.Fprintf(w, "body:        %q\n", *m.Body)
	} else {
		fmt.Fprintf(w, "body base64: %s\n", m.BodyBase64)
	}
}

func listCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list the pending messages of a topic by delivery time (reads only)",
		UsageText: "hourglass list --topic T [--from TIME] [--to TIME] [--limit N] [--page-size N] [--json]",
		Description: `Prints the messages of the topic that are pending (scheduled, not yet delivered
or cancelled), in delivery order, read from the schedule segments on disk: one
line each, "ID DELIVER_AT ATTEMPT BODY", or with --json one JSON object per line.
Nothing is received or changed.

--from (inclusive) and --to (exclusive) bound the delivery time; each is an
RFC 3339 time (2030-01-02T09:00:00Z) or a duration from now (90s, 2h, 3d).
The server is asked a page at a time (--page-size, 1 to 1000, default 100);
pages are stable while others schedule: a message scheduled during the listing
shows up only if it sorts after what was already printed.

Only pending messages are listed for now; due, leased and dead-lettered ones
are not (receive dead letters from "<topic>.dlq" with 'recv --no-ack').

Examples:
  hourglass list --topic orders --to 1h
  hourglass list --topic orders --from 2030-01-02T09:00:00Z --limit 20 --json
` + exitCodes,
		Flags: clientFlags(
			&cli.StringFlag{Name: "topic", Usage: "`TOPIC` whose pending messages to list"},
			&cli.StringFlag{Name: "from", Usage: "list messages due at or after `TIME` (RFC 3339, or a duration from now such as 10m)"},
			&cli.StringFlag{Name: "to", Usage: "list messages due before `TIME` (RFC 3339, or a duration from now such as 2h)"},
			&cli.IntFlag{Name: "limit", Usage: "print at most `N` messages; 0 means all"},
			&cli.IntFlag{Name: "page-size", Usage: "fetch `N` messages per request, 1 to 1000; 0 means the server's default (100)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		),
		OnUsageError: usageError,
		Action:       runList,
	}
}

// listTime parses --from or --to: RFC 3339, or a duration from now.
func listTime(c *cli.Context, name string, now time.Time) (time.Time, error) {
	s := c.String(name)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := units.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return time.Time{}, commandError(c, "--%s %q: want an RFC 3339 time (2030-01-02T09:00:00Z) or a duration from now (90s, 2h, 3d)", name, s)
	}
	return now.Add(d), nil
}

func runList(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	topic := c.String("topic")
	if topic == "" {
		return commandError(c, "--topic is required")
	}
	if c.Int("limit") < 0 {
		return commandError(c, "--limit %d: 0 (all) or more", c.Int("limit"))
	}
	now := time.Now()
	from, err := listTime(c, "from", now)
	if err != nil {
		return err
	}
	to, err := listTime(c, "to", now)
	if err != nil {
		return err
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(c.App.Writer)
	n, limit := 0, c.Int("limit")
	for m, err := range cl.List(c.Context, topic, client.ListOptions{From: from, To: to, PageSize: c.Int("page-size")}) {
		if err != nil {
			return fmt.Errorf("list %s: %w", topic, err)
		}
		j := newMessageJSON(m)
		if c.Bool("json") {
			if err := enc.Encode(j); err != nil {
				return err
			}
		} else {
			body := j.BodyBase64
			if j.Body != nil {
				body = fmt.Sprintf("%q", *j.Body)
			}
			fmt.Fprintln(c.App.Writer, j.ID, j.DeliverAt, j.Attempt, body)
		}
		if n++; limit > 0 && n >= limit {
			break
		}
	}
	return nil
}

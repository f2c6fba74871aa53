package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
)

// messageJSON is a stored message as get and list print it.
type messageJSON struct {
	ID        string            `json:"id"`
	Topic     string            `json:"topic"`
	DeliverAt string            `json:"deliver_at"`
	Attempt   uint32            `json:"attempt"`
	OriginID  string            `json:"origin_id,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	bodyJSON
	// LeaseUntil: a leased message's in list --state leased.
	LeaseUntil string          `json:"lease_until,omitempty"`
	DeadLetter *deadLetterJSON `json:"dead_letter,omitempty"`
	// DueAt: when a frozen pause of its topic makes it due after
	// deliver_at; Frozen: such a pause lasts (due_at as if resumed now).
	DueAt  string `json:"due_at,omitempty"`
	Frozen bool   `json:"frozen,omitempty"`
	// FrozenRemainingMs: a message frozen on its own ('freeze'), the
	// delay it keeps until 'thaw'.
	FrozenRemainingMs *int64 `json:"frozen_remaining_ms,omitempty"`
}

// deadLetterJSON says why a message of a dead-letter topic died.
type deadLetterJSON struct {
	OriginTopic string `json:"origin_topic"`
	Reason      string `json:"reason"`
	LastError   string `json:"last_error,omitempty"`
	Attempts    int    `json:"attempts"`
	At          string `json:"at,omitempty"`
}

func newMessageJSON(m client.Scheduled) messageJSON {
	j := messageJSON{ID: m.ID.String(), Topic: m.Topic, DeliverAt: m.DeliverAt.UTC().Format(rfc3339Nano),
		Attempt: m.Attempt, OriginID: m.OriginID.String(), Headers: m.Headers, bodyJSON: newBodyJSON(m.Body)}
	if !m.LeaseUntil.IsZero() {
		j.LeaseUntil = m.LeaseUntil.UTC().Format(rfc3339Nano)
	}
	if !m.DueAt.IsZero() {
		j.DueAt, j.Frozen = m.DueAt.UTC().Format(rfc3339Nano), m.Frozen
	}
	if _, frozen := m.Headers[message.FrozenHeader]; frozen {
		j.FrozenRemainingMs = new(m.FrozenRemaining.Milliseconds())
	}
	if dl := m.DeadLetter; dl != nil {
		j.DeadLetter = &deadLetterJSON{OriginTopic: dl.OriginTopic, Reason: dl.Reason, LastError: dl.LastError, Attempts: dl.Attempts}
		if !dl.At.IsZero() {
			j.DeadLetter.At = dl.At.UTC().Format(rfc3339Nano)
		}
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
	RescheduledTo   string       `json:"rescheduled_to,omitempty"`
}

func getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "look a message up by ID, or by topic and key, and print what became of it (reads only)",
		UsageText: "hourglass get (ID | --topic T --key K) [--addr URL] [--json]",
		Description: `Prints the message as it is now (topic, delivery time, attempt, origin,
headers, body) and its state. The ID a producer was given names its message for
its whole life: after a reschedule, a retry (a nack with a delay, or a topic's
backoff) or a redrive the message goes on under a new ID, printed as "id" (the
one asked for as "asked"; with --json, "rescheduled_to" is the new ID), with the
first as its origin. The state is one of:
  pending        in its schedule segment: it will be delivered at its time
  delivering     handed to the sink, not confirmed yet
  delivered      the sink (a webhook or NATS) confirmed it
  due            in the built-in queue, waiting to be received
  leased         received from the built-in queue; its lease is running
  acked          acked in the built-in queue (or no longer held by it)
  cancelled      it will never be delivered
  dead-lettered  refused for good; "dead_letter_topic" names where it went and
                 the message's dead_letter says why
  rescheduled    (cluster mode) it will never be delivered at this time;
                 "rescheduled_to" names the message that replaced it
  not-found      no such message, or its schedule segment was deleted once
                 every message in it was done
A message of a topic frozen by 'pause --freeze' shows "due at": its time with
the frozen pauses counted ("due_at" and "frozen" with --json). A message frozen
on its own by 'hourglass freeze' shows "frozen": the delay it keeps and when it
would be due if thawed now ("frozen_remaining_ms" too with --json).
Nothing is received, leased or changed: unlike 'recv --no-ack', get does not
raise the attempt count. A message sent with 'send --key K' can be named by
--topic and --key instead of its ID, for as long as it lives.

Examples:
  hourglass get 0000019bd6a1f2c00000000000001f40 --json
  hourglass get --topic orders --key order-42
` + exitCodes + `
A not-found message is a success (state not-found); a malformed ID is an error.`,
		Flags:        clientFlags(append(keyFlags(), &cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"})...),
		OnUsageError: usageError,
		Action:       runGet,
	}
}

func runGet(c *cli.Context) error {
	ts, err := targets(c, false)
	if err != nil {
		return err
	}
	t := ts[0]
	if t.err != nil {
		return fmt.Errorf("get %s: %w", t.name, t.err)
	}
	f, err := call(c, t.name, func(cl *client.Client, ctx context.Context) (client.Found, error) { return cl.Get(ctx, t.ref) })
	if err != nil {
		return err
	}
	j := getJSON{ID: t.name, State: string(f.State), QueueAttempt: f.QueueAttempt, DeadLetterTopic: f.DeadLetterTopic,
		RescheduledTo: f.RescheduledTo.String()}
	if f.State != client.StateNotFound {
		m := newMessageJSON(f.Message)
		j.Message = &m
		j.ID = m.ID
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
	if j.RescheduledTo != "" && j.RescheduledTo != t.name {
		fmt.Fprintf(w, "asked:       %s (it goes on under the id above: rescheduled, retried or redriven)\n", t.name)
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
	switch {
	case m.FrozenRemainingMs != nil:
		fmt.Fprintf(w, "frozen:      %s left, due at %s if thawed now ('hourglass thaw')\n", units.FormatDuration(time.Duration(*m.FrozenRemainingMs)*time.Millisecond), m.DueAt)
	case m.Frozen:
		fmt.Fprintf(w, "due at:      %s if resumed now (its topic is frozen)\n", m.DueAt)
	case m.DueAt != "":
		fmt.Fprintf(w, "due at:      %s (its topic's frozen pauses counted)\n", m.DueAt)
	}
	if m.OriginID != "" {
		fmt.Fprintf(w, "origin:      %s\n", m.OriginID)
	}
	if dl := m.DeadLetter; dl != nil {
		fmt.Fprintf(w, "died:        %s on %s after %d attempts at %s\n", dl.Reason, dl.OriginTopic, dl.Attempts, dl.At)
		if dl.LastError != "" {
			fmt.Fprintf(w, "last error:  %q\n", dl.LastError)
		}
	}
	for k, v := range m.Headers {
		fmt.Fprintf(w, "header:      %s=%s\n", k, v)
	}
	m.print(w)
}

func listCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list a topic's messages: pending by delivery time, or due, leased or dead-lettered (reads only)",
		UsageText: "hourglass list --topic T [--state pending|due|leased|dead-lettered] [--from TIME] [--to TIME] [--limit N] [--page-size N] [--json]",
		Description: `Prints the messages of the topic in one --state, one line each,
"ID DELIVER_AT ATTEMPT BODY", or with --json one JSON object per line.
Nothing is received, leased or changed.
  pending         (the default) scheduled, not yet delivered or cancelled, in
                  delivery order, read from the schedule segments on disk
  due             in the built-in queue, waiting to be received
  leased          received and not yet settled; the line adds
                  "lease-until=TIME" (--json: "lease_until")
  dead-lettered   the topic's dead letters (in "<topic>.dlq"); the line adds
                  why: "reason=R origin=TOPIC attempts=N error=TEXT" (--json:
                  "dead_letter": {reason, origin_topic, attempts, last_error, at})
ATTEMPT is the attempt a pending message was scheduled with, and the queue's
failed attempts of the others. The queue's states are listed in the order the
queue holds them.

--from (inclusive) and --to (exclusive) bound the delivery time of pending
messages; each is an RFC 3339 time (2030-01-02T09:00:00Z) or a duration from
now (90s, 2h, 3d). The server is asked a page at a time (--page-size, 1 to
1000, default 100); pages are stable while others schedule: a message scheduled
during the listing shows up only if it sorts after what was already printed.

Examples:
  hourglass list --topic orders --to 1h
  hourglass list --topic orders --from 2030-01-02T09:00:00Z --limit 20 --json
  hourglass list --topic orders --state dead-lettered     # then: hourglass redrive orders.dlq
` + exitCodes,
		Flags: clientFlags(
			topicFlag("whose messages to list"),
			&cli.StringFlag{Name: "state", Value: "pending", Usage: "list the messages in `STATE`: pending, due, leased or dead-lettered"},
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

// listStates are the states list --state takes.
var listStates = map[string]client.State{
	"pending": client.StatePending, "due": client.StateDue, "leased": client.StateLeased, "dead-lettered": client.StateDeadLettered,
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
	topic, err := oneTopic(c)
	if err != nil {
		return err
	}
	if c.Int("limit") < 0 {
		return commandError(c, "--limit %d: 0 (all) or more", c.Int("limit"))
	}
	state, ok := listStates[c.String("state")]
	if !ok {
		return commandError(c, "--state %q: want pending, due, leased or dead-lettered", c.String("state"))
	}
	if state != client.StatePending && (c.IsSet("from") || c.IsSet("to")) {
		return commandError(c, "--from and --to bound the delivery time of pending messages; --state %s lists the queue's in the order it holds them", state)
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
	return withClient(c, func(cl *client.Client) error {
		enc := json.NewEncoder(c.App.Writer)
		n, limit := 0, c.Int("limit")
		for m, err := range cl.List(c.Context, topic, client.ListOptions{State: state, From: from, To: to, PageSize: c.Int("page-size")}) {
			if err != nil {
				return fmt.Errorf("list %s: %w", topic, err)
			}
			j := newMessageJSON(m)
			if c.Bool("json") {
				if err := enc.Encode(j); err != nil {
					return err
				}
			} else {
				line := fmt.Sprint(j.ID, " ", j.DeliverAt, " ", j.Attempt, " ", j.text())
				if j.LeaseUntil != "" {
					line += " lease-until=" + j.LeaseUntil
				}
				if dl := j.DeadLetter; dl != nil {
					line += fmt.Sprintf(" reason=%s origin=%s attempts=%d error=%q", dl.Reason, dl.OriginTopic, dl.Attempts, dl.LastError)
				}
				fmt.Fprintln(c.App.Writer, line)
			}
			if n++; limit > 0 && n >= limit {
				break
			}
		}
		if n == 0 {
			// Nothing listed: say so if the topic is unknown, a typo
			// perhaps, rather than look like an empty queue.
			note, err := unknownTopic(c.Context, cl, topic)
			if err != nil || note == "" {
				return err
			}
			fmt.Fprintln(c.App.ErrWriter, "hourglass list:", note)
		}
		return nil
	})
}

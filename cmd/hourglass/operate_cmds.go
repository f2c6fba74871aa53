package main

// The commands that operate what is scheduled: reschedule and extend one
// message, redrive dead letters, purge a topic's messages, delete a
// topic. Policies and topics are in policy_cmds.go.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

// keyFlags name a message by its topic and idempotency key instead of
// an ID.
func keyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "topic", Usage: "with --key: name the message by its `TOPIC` and key instead of an ID"},
		&cli.StringFlag{Name: "key", Usage: "with --topic: the idempotency `KEY` the message was sent with (send --key)"},
	}
}

// target is one message the command line names: an ID argument or
// --topic and --key. err is set for an argument that is not an ID, so
// that a command can act on the ones before it first.
type target struct {
	name string
	ref  client.Ref
	err  error
}

// targets returns the messages the command line names: the IDs given as
// arguments (one at most unless many), or --topic and --key.
func targets(c *cli.Context, many bool) ([]target, error) {
	topic, key := c.String("topic"), c.String("key")
	want := "one message ID (32 hex digits, as send printed it)"
	if many {
		want = "one or more message IDs (32 hex digits each, as send printed them)"
	}
	switch {
	case c.NArg() > 0 && (c.IsSet("topic") || c.IsSet("key")):
		return nil, commandError(c, "give message IDs or --topic and --key, not both")
	case c.NArg() > 1 && !many:
		return nil, commandError(c, "give %s, got %d arguments", want, c.NArg())
	case c.NArg() > 0:
		var out []target
		for _, arg := range c.Args().Slice() {
			id, err := client.ParseID(arg)
			out = append(out, target{name: arg, ref: id, err: err})
		}
		return out, nil
	case topic == "" && key == "":
		return nil, commandError(c, "give %s, or --topic and --key", want)
	case topic == "" || key == "":
		return nil, commandError(c, "--topic %q and --key %q: give both to name a message by the key it was sent with", topic, key)
	}
	k := client.Key{Topic: topic, Key: key}
	return []target{{name: k.String(), ref: k}}, nil
}

func rescheduleCommand() *cli.Command {
	return &cli.Command{
		Name:      "reschedule",
		Usage:     "move pending messages to a new delivery time",
		UsageText: "hourglass reschedule (ID... | --topic T --key K) (--delay D | --at TIME | --now) [--json]",
		Description: `Moves each pending message to the new time, atomically: its old time never
fires, and it is delivered at the new one under a new ID (whose origin_id is
the first message's). Prints one line per message, "REF ANSWER", where REF is
the ID or TOPIC/KEY given and the answer is one of:
  rescheduled NEW_ID DELIVER_AT   moved: it is due at DELIVER_AT as NEW_ID
  already-delivered               too late: it was delivered or is being
                                  delivered (or was dead-lettered)
  already-cancelled               it was cancelled, or rescheduled before
                                  ('hourglass get' names the ID that replaced it)
  unknown                         no such message is pending on this server
Nothing changes for the last three.

The new time is exactly one of:
  --delay D      from the server's clock: 1500ms, 30s, 10m, 2h, 7d
  --at TIME      an absolute RFC 3339 time: 2030-01-02T09:00:00Z (past = now)
  --now          at once ("promote": deliver it now)

A message sent with 'send --key K' can be named by --topic and --key instead
of its ID, for as long as it lives.

  hourglass reschedule 0000019bd6a1f2c00000000000001f40 --delay 2h
  hourglass reschedule --topic orders --key order-42 --now
  hourglass reschedule --topic orders --key order-42 --at 2030-01-02T09:00:00Z --json

With --json each line is a JSON object instead:
  {"ref":"orders/order-42","result":"rescheduled","new_id":"...","deliver_at":"..."}
` + exitCodes + `
Every answer above is a success; a malformed ID is an error, after the lines
of the IDs before it.`,
		Flags: clientFlags(append(keyFlags(),
			&cli.StringFlag{Name: "delay", Usage: "deliver after this `DURATION` from now (ms, s, m, h, d, y)"},
			&cli.StringFlag{Name: "at", Usage: "deliver at this `TIME` (RFC 3339, such as 2030-01-02T09:00:00Z)"},
			&cli.BoolFlag{Name: "now", Usage: "deliver at once"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		)...),
		OnUsageError: usageError,
		Action:       runReschedule,
	}
}

// rescheduleJSON is one line of reschedule --json.
type rescheduleJSON struct {
	Ref       string `json:"ref"`
	Result    string `json:"result"`
	NewID     string `json:"new_id,omitempty"`
	DeliverAt string `json:"deliver_at,omitempty"`
	// RemainingMs: freeze's, the delay the frozen message keeps.
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
}

// replacement is the message a replacing command made: its new ID and,
// for one frozen (freeze), the delay it keeps (printed instead of its
// time).
type replacement struct {
	id     client.ID
	frozen bool
	left   time.Duration
}

// whenOf parses the new time of reschedule: exactly one of --delay, --at
// and --now.
func whenOf(c *cli.Context) (client.When, error) {
	var set []string
	for _, f := range []string{"delay", "at", "now"} {
		if c.IsSet(f) {
			set = append(set, "--"+f)
		}
	}
	switch {
	case len(set) == 0:
		return client.When{}, commandError(c, "the new time is missing: give --delay D (such as 30s or 2h), --at TIME (RFC 3339, such as 2030-01-02T09:00:00Z) or --now")
	case len(set) > 1:
		return client.When{}, commandError(c, "%s: give one of them (the new time)", strings.Join(set, " and "))
	}
	switch {
	case c.IsSet("now"):
		if !c.Bool("now") {
			return client.When{}, commandError(c, "--now=false: give --delay or --at instead")
		}
		return client.Now(), nil
	case c.IsSet("delay"):
		d, err := units.ParseDuration(c.String("delay"))
		if err != nil {
			return client.When{}, commandError(c, "--delay %q: want a duration of 0 or more with a unit, such as 500ms, 30s, 10m, 2h or 7d", c.String("delay"))
		}
		return client.In(d), nil
	}
	at, err := time.Parse(time.RFC3339Nano, c.String("at"))
	if err != nil {
		return client.When{}, commandError(c, "--at %q: want an RFC 3339 time such as 2030-01-02T09:00:00Z or 2030-01-02T10:00:00+01:00", c.String("at"))
	}
	return client.At(at), nil
}

func runReschedule(c *cli.Context) error {
	ts, err := targets(c, true)
	if err != nil {
		return err
	}
	when, err := whenOf(c)
	if err != nil {
		return err
	}
	return replaceEach(c, ts, "reschedule", "rescheduled", func(cl *client.Client, ref client.Ref) (replacement, error) {
		id, err := cl.Reschedule(c.Context, ref, when)
		return replacement{id: id}, err
	})
}

// replaceEach runs op (a reschedule, an edit, a freeze or a thaw: the
// message is replaced by one with a new ID) on each target and prints one
// line per target: "REF done NEW_ID DELIVER_AT" ("REF frozen NEW_ID
// REMAINING" for a freeze), or the target's state when op found it
// delivered, cancelled, unknown, already frozen or not frozen (a
// rescheduleJSON with --json). verb names the command in errors.
func replaceEach(c *cli.Context, ts []target, verb, done string, op func(*client.Client, client.Ref) (replacement, error)) error {
	return withClient(c, func(cl *client.Client) error {
		enc := json.NewEncoder(c.App.Writer)
		for _, t := range ts {
			if t.err != nil {
				return fmt.Errorf("%s %s: %w", verb, t.name, t.err)
			}
			r, err := op(cl, t.ref)
			j := rescheduleJSON{Ref: t.name, Result: done}
			when := ""
			switch {
			case errors.Is(err, client.ErrAlreadyFrozen):
				j.Result = "already-frozen"
			case errors.Is(err, client.ErrNotFrozen):
				j.Result = "not-frozen"
			case errors.Is(err, client.ErrAlreadyDelivered):
				j.Result = "already-delivered"
			case errors.Is(err, client.ErrAlreadyCancelled):
				j.Result = "already-cancelled"
			case errors.Is(err, client.ErrNotPending):
				j.Result = "unknown"
			case err != nil:
				return fmt.Errorf("%s %s: %w", verb, t.name, err)
			case r.frozen:
				j.NewID, j.RemainingMs = r.id.String(), new(r.left.Milliseconds())
				when = units.FormatDuration(r.left)
			default:
				j.NewID, j.DeliverAt = r.id.String(), r.id.Time().UTC().Format(rfc3339Nano)
				when = j.DeliverAt
			}
			if c.Bool("json") {
				if err := enc.Encode(j); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(c.App.Writer, strings.TrimSpace(strings.Join([]string{j.Ref, j.Result, j.NewID, when}, " ")))
		}
		return nil
	})
}

func extendCommand() *cli.Command {
	return &cli.Command{
		Name:      "extend",
		Usage:     "give received messages more time: their lease ends --lease from now",
		UsageText: "hourglass extend --topic T --lease D (ID|RECEIPT)... [--json]",
		Description: `Extends the lease of each message of --topic that is leased now (received and
not yet settled): it ends --lease from now instead (1ms to 12h), and the
message is not delivered again before then. Prints "REF lease-until TIME" per
message.

A message is named by its ID (any holder of the ID may extend its lease) or
by the receipt of one lease ("ID.SERIAL", which 'recv --no-ack' prints in
"receipt"): a receipt acts only while that lease holds, not on a later
delivery of the same message.

  hourglass recv --topic reports --count 1 --no-ack   # {"id":...,"receipt":"<R>",...}
  hourglass extend <R> --topic reports --lease 10m    # "<R> lease-until 2030-..."

With --json each line is {"ref":"...","lease_until":"..."} instead. A message
that is not leased now is an error, after the lines of those before it.
` + exitCodes,
		Flags: clientFlags(
			topicFlag("the messages were received from"),
			&cli.StringFlag{Name: "lease", Usage: "the new lease, from now: a `DURATION` from 1ms to 12h (such as 30s, 10m)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		),
		OnUsageError: usageError,
		Action:       runExtend,
	}
}

func runExtend(c *cli.Context) error {
	topic, refs, err := topicAndArgs(c, isRef)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		return commandError(c, "give one or more message IDs or receipts (as recv printed them in \"id\" or \"receipt\")")
	}
	if !c.IsSet("lease") {
		return commandError(c, "--lease is missing: give the new lease, from now, such as 30s or 10m")
	}
	lease, err := units.ParseDuration(c.String("lease"))
	if err != nil || lease < time.Millisecond || lease > 12*time.Hour {
		return commandError(c, "--lease %q: want a duration from 1ms to 12h, such as 30s or 10m", c.String("lease"))
	}
	return withClient(c, func(cl *client.Client) error {
		enc := json.NewEncoder(c.App.Writer)
		for _, arg := range refs {
			d := client.Delivery{Topic: topic}
			if strings.Contains(arg, ".") {
				d.Receipt = arg
			} else if d.ID, err = client.ParseID(arg); err != nil {
				return fmt.Errorf("extend %s: %w (or give a receipt, ID.SERIAL)", arg, err)
			}
			until, err := cl.Extend(c.Context, d, lease)
			if status.Code(err) == codes.FailedPrecondition {
				return fmt.Errorf("extend %s: not leased on topic %q now (never received, already settled, or its lease ended): %w", arg, topic, err)
			}
			if err != nil {
				return fmt.Errorf("extend %s: %w", arg, err)
			}
			u := until.UTC().Format(rfc3339Nano)
			if c.Bool("json") {
				if err := enc.Encode(struct {
					Ref        string `json:"ref"`
					LeaseUntil string `json:"lease_until"`
				}{arg, u}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(c.App.Writer, arg, "lease-until", u)
		}
		return nil
	})
}

// defaultRedriveRate is the server's rate of a Redrive that names none.
const defaultRedriveRate = 1000

func redriveCommand() *cli.Command {
	return &cli.Command{
		Name:      "redrive",
		Usage:     "move dead letters back to their topic, as new first attempts",
		UsageText: "hourglass redrive DLQ_TOPIC [--to T] [--reason R] [--id ID]... [--rate N] [--max N] [--json]",
		Description: `Moves the dead letters waiting in DLQ_TOPIC ("<topic>.dlq") back to the topic
each died on (or to --to), as new first attempts (attempt 0) that keep their
origin_id, and removes them from DLQ_TOPIC. Look at them first with
'hourglass list --topic <topic> --state dead-lettered'.

  --reason R   only those that died of R: max-attempts (nacked or expired past
               the topic's max attempts), nacked (a consumer dead-lettered it),
               or sink (the sink refused it for good)
  --id ID      only this message (its ID in DLQ_TOPIC); repeat for more
  --rate N     at most N messages per second, 1 to 100000 (default 1000)
  --max N      at most N messages; 0 (the default) means all that wait now

The server is asked about a second's worth (N at --rate N) at a time, and a
line on stderr tells the progress after each. A redrive cut short (Ctrl-C, a
lost connection, a server crash) is finished by running it again: a message
moved before is not moved twice. At the end it prints
"DLQ_TOPIC: N redriven, M skipped" (skipped: left by --reason or --id), and
"more remain" when --max stopped it. With --json it prints one object instead:
  {"dead_letter_topic":"orders.dlq","redriven":12,"skipped":3,"more":false}

  hourglass redrive orders.dlq --reason max-attempts --rate 100
  hourglass redrive orders.dlq --to orders-retry --max 1000
` + exitCodes,
		Flags: clientFlags(
			topicFlag("of the dead letters, \"<topic>.dlq\""),
			&cli.StringFlag{Name: "to", Usage: "send them to `TOPIC` instead of the topic each died on"},
			&cli.StringFlag{Name: "reason", Usage: "only dead letters of this `REASON`: max-attempts, nacked or sink"},
			&cli.StringSliceFlag{Name: "id", Usage: "only the dead letter of this `ID` (repeatable)"},
			&cli.IntFlag{Name: "rate", Usage: "move at most `N` messages per second, 1 to 100000; 0 means the server's default (1000)"},
			&cli.IntFlag{Name: "max", Usage: "move at most `N` messages; 0 means all that wait now"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object at the end instead of the text"},
		),
		OnUsageError: usageError,
		Action:       runRedrive,
	}
}

// redriveJSON is what redrive --json prints.
type redriveJSON struct {
	DeadLetterTopic string `json:"dead_letter_topic"`
	Redriven        int64  `json:"redriven"`
	Skipped         int64  `json:"skipped"`
	More            bool   `json:"more"`
}

// deadLetterReasons are the reasons a dead letter has.
var deadLetterReasons = []string{"max-attempts", "nacked", "sink"}

func runRedrive(c *cli.Context) error {
	dlq, err := oneTopic(c)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(dlq, ".dlq") {
		return commandError(c, "%q is not a dead-letter topic: they end in .dlq (the dead letters of %s are in %s.dlq)", dlq, dlq, dlq)
	}
	o := client.RedriveOptions{To: c.String("to"), Reason: c.String("reason"), Rate: c.Int("rate")}
	if o.Reason != "" && !slices.Contains(deadLetterReasons, o.Reason) {
		return commandError(c, "--reason %q: want one of %s", o.Reason, strings.Join(deadLetterReasons, ", "))
	}
	if o.Rate < 0 || o.Rate > 100000 {
		return commandError(c, "--rate %d: from 1 to 100000 messages per second; 0 means %d", o.Rate, defaultRedriveRate)
	}
	limit := c.Int("max")
	if limit < 0 || limit > 1000000 {
		return commandError(c, "--max %d: from 0 (all that wait now) to 1000000", limit)
	}
	for _, s := range c.StringSlice("id") {
		id, err := client.ParseID(s)
		if err != nil {
			return commandError(c, "--id %q: %v", s, err)
		}
		o.IDs = append(o.IDs, id)
	}
	return withClient(c, func(cl *client.Client) error {
		// About a second's worth per call: progress shows that often, and a
		// call cut short loses little.
		chunk := min(max(o.Rate, 10), 10000)
		if o.Rate == 0 {
			chunk = defaultRedriveRate
		}
		out := redriveJSON{DeadLetterTopic: dlq}
		for {
			o.Max = chunk
			if limit > 0 {
				o.Max = min(chunk, limit-int(out.Redriven))
			}
			res, err := cl.Redrive(c.Context, dlq, o)
			if err != nil {
				if out.Redriven > 0 {
					return fmt.Errorf("redrive %s: %w (after %d redriven; run it again to go on: no message is moved twice)", dlq, err, out.Redriven)
				}
				return fmt.Errorf("redrive %s: %w", dlq, err)
			}
			out.Redriven += res.Redriven
			out.Skipped, out.More = res.Skipped, res.More
			if !res.More || (limit > 0 && out.Redriven >= int64(limit)) {
				break
			}
			fmt.Fprintf(c.App.ErrWriter, "hourglass redrive: %s: %d redriven so far, going on\n", dlq, out.Redriven)
		}
		if c.Bool("json") {
			return json.NewEncoder(c.App.Writer).Encode(out)
		}
		more := ""
		if out.More {
			more = fmt.Sprintf(", more remain (--max %d reached; run it again for more)", limit)
		}
		fmt.Fprintf(c.App.Writer, "%s: %d redriven, %d skipped%s\n", dlq, out.Redriven, out.Skipped, more)
		return nil
	})
}

// purgeStates are the states purge --state takes.
var purgeStates = map[string]client.State{
	"pending": client.StatePending, "due": client.StateDue, "dead-lettered": client.StateDeadLettered,
}

func purgeCommand() *cli.Command {
	return &cli.Command{
		Name:      "purge",
		Usage:     "remove a topic's messages in one state (asks first)",
		UsageText: "hourglass purge TOPIC --state pending|due|dead-lettered [--yes] [--json]",
		Description: `Removes the messages of TOPIC in one state, for good, and prints how many:
  --state pending         cancels the messages not yet due: they are never
                          delivered
  --state due             removes the due messages waiting in the queue
  --state dead-lettered   removes TOPIC's dead letters (those in TOPIC.dlq)
Leased messages (received, not yet settled) are left to their consumers.

It asks for confirmation on standard input first (y or yes goes ahead;
anything else, or no answer, purges nothing and exits 1); --yes skips the
question, for scripts.

  hourglass purge orders --state dead-lettered         # asks, then "purged 3 dead-lettered messages of orders"
  hourglass purge orders --state pending --yes --json  # {"topic":"orders","state":"pending","purged":120}
` + exitCodes,
		Flags: clientFlags(
			topicFlag("whose messages to remove"),
			&cli.StringFlag{Name: "state", Usage: "which messages: `STATE` pending, due or dead-lettered"},
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"},
		),
		OnUsageError: usageError,
		Action:       runPurge,
	}
}

func runPurge(c *cli.Context) error {
	topic, err := oneTopic(c)
	if err != nil {
		return err
	}
	name := c.String("state")
	state, ok := purgeStates[name]
	if !ok {
		return commandError(c, "--state %q: want pending, due or dead-lettered", name)
	}
	what := map[string]string{
		"pending":       fmt.Sprintf("cancel every pending message of topic %q (none of them will be delivered)", topic),
		"due":           fmt.Sprintf("remove every due message waiting in topic %q", topic),
		"dead-lettered": fmt.Sprintf("remove every dead letter of topic %q (in %s.dlq)", topic, topic),
	}[name]
	if err := confirm(c, what); err != nil {
		return err
	}
	n, err := call(c, topic, func(cl *client.Client, ctx context.Context) (int64, error) { return cl.Purge(ctx, topic, state) })
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(struct {
			Topic  string `json:"topic"`
			State  string `json:"state"`
			Purged int64  `json:"purged"`
		}{topic, name, n})
	}
	fmt.Fprintf(c.App.Writer, "purged %d %s messages of %s\n", n, name, topic)
	return nil
}

// confirm asks on stderr whether to do what, and reads the answer from
// stdin, unless --yes; an error means no.
func confirm(c *cli.Context, what string) error {
	if c.Bool("yes") {
		return nil
	}
	fmt.Fprintf(c.App.ErrWriter, "This will %s; it cannot be undone. Go ahead? [y/N] ", what)
	answer, err := bufio.NewReader(c.App.Reader).ReadString('\n')
	answer = strings.TrimSpace(answer)
	if f, ok := c.App.Reader.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(c.App.ErrWriter, answer) // a terminal echoes it; a pipe does not
	}
	switch strings.ToLower(answer) {
	case "y", "yes":
		return nil
	}
	if err != nil && answer == "" {
		return fmt.Errorf("%s: no answer on standard input: nothing was changed (give --yes to run it without asking)", commandName(c))
	}
	return fmt.Errorf("%s: not confirmed (answered %q, not y): nothing was changed", commandName(c), answer)
}

func deleteTopicCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete-topic",
		Usage:     "delete a topic: its pending and queued messages, its files and its policy (asks first)",
		UsageText: "hourglass delete-topic TOPIC [--yes] [--json]",
		Description: `Deletes TOPIC: cancels its pending messages, removes its messages from the
queue (leased ones too: their acks then fail), its queue files and its
policy, and prints how many messages it cancelled and removed. Its dead
letters are a topic of their own, TOPIC.dlq: delete that too with
'hourglass delete-topic TOPIC.dlq'. Messages sent to TOPIC later make it anew.

It asks for confirmation on standard input first (y or yes goes ahead;
anything else, or no answer, deletes nothing and exits 1); --yes skips the
question, for scripts.

  hourglass delete-topic orders-test     # asks, then "deleted orders-test: 3 pending cancelled, 10 removed from the queue"
  hourglass delete-topic orders-test --yes --json   # {"topic":"orders-test","cancelled":3,"removed":10}
` + exitCodes,
		Flags: clientFlags(
			topicFlag("to delete"),
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"},
		),
		OnUsageError: usageError,
		Action: refAction(func(c *cli.Context) (string, error) {
			topic, err := oneTopic(c)
			if err == nil {
				err = confirm(c, fmt.Sprintf("delete topic %q: cancel its pending messages and remove its queued ones, its files and its policy", topic))
			}
			return topic, err
		}, (*client.Client).DeleteTopic, func(c *cli.Context, topic string, d client.Deleted) error {
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(struct {
					Topic     string `json:"topic"`
					Cancelled int64  `json:"cancelled"`
					Removed   int64  `json:"removed"`
				}{topic, d.Cancelled, d.Removed})
			}
			fmt.Fprintf(c.App.Writer, "deleted %s: %d pending cancelled, %d removed from the queue\n", topic, d.Cancelled, d.Removed)
			return nil
		}),
	}
}

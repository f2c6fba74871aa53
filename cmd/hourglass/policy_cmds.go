package main

// The commands of topics and their delivery policies: topics, policy
// show, policy set, pause and resume.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

// policyJSON is a policy as --json prints it: the API's field names;
// an unset field is left out.
type policyJSON struct {
	MaxAttempts     *int         `json:"max_attempts,omitempty"`
	Backoff         *backoffJSON `json:"backoff,omitempty"`
	Paused          *bool        `json:"paused,omitempty"`
	MaxDispatchRate *float64     `json:"max_dispatch_rate,omitempty"`
	LeaseMs         *int64       `json:"lease_ms,omitempty"`
	FlowConcurrency *int         `json:"flow_concurrency,omitempty"`
	FlowRate        *float64     `json:"flow_rate,omitempty"`
	FlowBurst       *int         `json:"flow_burst,omitempty"`
	FlowOrdered     *bool        `json:"flow_ordered,omitempty"`
	FlowFair        *bool        `json:"flow_fair,omitempty"`
	Freeze          *bool        `json:"freeze,omitempty"`
	ExpiryDrop      *bool        `json:"expiry_drop,omitempty"`
	ExpiryUnacked   *bool        `json:"expiry_unacked,omitempty"`
}

type backoffJSON struct {
	InitialMs  int64   `json:"initial_ms"`
	MaxMs      int64   `json:"max_ms"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

func newPolicyJSON(p client.Policy) policyJSON {
	j := policyJSON{MaxAttempts: p.MaxAttempts, Paused: p.Paused, MaxDispatchRate: p.MaxDispatchRate,
		FlowConcurrency: p.FlowConcurrency, FlowRate: p.FlowRate, FlowBurst: p.FlowBurst, FlowOrdered: p.FlowOrdered, FlowFair: p.FlowFair, Freeze: p.Freeze,
		ExpiryDrop: p.ExpiryDrop, ExpiryUnacked: p.ExpiryUnacked}
	if p.Lease != nil {
		j.LeaseMs = new(p.Lease.Milliseconds())
	}
	if b := p.Backoff; b != nil {
		j.Backoff = &backoffJSON{InitialMs: b.Initial.Milliseconds(), MaxMs: b.Max.Milliseconds(), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	return j
}

// policiesJSON is what policy show, policy set, pause and resume print
// with --json.
type policiesJSON struct {
	Topic     string     `json:"topic"`
	Policy    policyJSON `json:"policy"`
	Effective policyJSON `json:"effective"`
	// Freezes are the frozen pauses that may still shift a message.
	Freezes []freezeJSON `json:"freezes,omitempty"`
}

// freezeJSON is a frozen pause: RFC 3339 times, ended_at left out while
// it lasts.
type freezeJSON struct {
	BeganAt string `json:"began_at"`
	EndedAt string `json:"ended_at,omitempty"`
}

// policyField is a field of a policy as the command line names it (and
// --default takes it).
type policyField struct {
	name  string
	field client.PolicyField
	show  func(client.Policy) string // "" when unset
}

// policyFields are the fields of a policy in the order they are printed.
var policyFields = []policyField{
	{"max-attempts", client.FieldMaxAttempts, func(p client.Policy) string {
		if p.MaxAttempts == nil {
			return ""
		}
		return strconv.Itoa(*p.MaxAttempts)
	}},
	{"backoff", client.FieldBackoff, func(p client.Policy) string {
		if p.Backoff == nil {
			return ""
		}
		return formatBackoff(*p.Backoff)
	}},
	{"paused", client.FieldPaused, func(p client.Policy) string {
		switch {
		case p.Paused == nil:
			return ""
		case *p.Paused:
			return "yes"
		}
		return "no"
	}},
	{"rate", client.FieldMaxDispatchRate, func(p client.Policy) string {
		switch {
		case p.MaxDispatchRate == nil:
			return ""
		case *p.MaxDispatchRate == 0:
			return "unlimited"
		}
		return strconv.FormatFloat(*p.MaxDispatchRate, 'g', -1, 64) + "/s"
	}},
	{"lease", client.FieldLease, func(p client.Policy) string {
		if p.Lease == nil {
			return ""
		}
		return units.FormatDuration(*p.Lease)
	}},
	{"flow-concurrency", client.FieldFlowConcurrency, func(p client.Policy) string { return showLimit(p.FlowConcurrency) }},
	{"flow-rate", client.FieldFlowRate, func(p client.Policy) string {
		switch {
		case p.FlowRate == nil:
			return ""
		case *p.FlowRate == 0:
			return "unlimited"
		}
		return strconv.FormatFloat(*p.FlowRate, 'g', -1, 64) + "/s"
	}},
	{"flow-burst", client.FieldFlowBurst, func(p client.Policy) string {
		switch {
		case p.FlowBurst == nil:
			return ""
		case *p.FlowBurst == 0:
			return "a second of flow-rate"
		}
		return strconv.Itoa(*p.FlowBurst)
	}},
	{"flow-ordered", client.FieldFlowOrdered, func(p client.Policy) string { return yesNoSet(p.FlowOrdered) }},
	{"flow-fair", client.FieldFlowFair, func(p client.Policy) string { return yesNoSet(p.FlowFair) }},
	{"expiry-drop", client.FieldExpiryDrop, func(p client.Policy) string { return yesNoSet(p.ExpiryDrop) }},
	{"expiry-unacked", client.FieldExpiryUnacked, func(p client.Policy) string { return yesNoSet(p.ExpiryUnacked) }},
}

// showLimit prints a bound: "" when unset, "unlimited" for 0.
func showLimit(n *int) string {
	switch {
	case n == nil:
		return ""
	case *n == 0:
		return "unlimited"
	}
	return strconv.Itoa(*n)
}

// yesNoSet prints a flag: "" when unset.
func yesNoSet(b *bool) string {
	switch {
	case b == nil:
		return ""
	case *b:
		return "yes"
	}
	return "no"
}

// formatBackoff prints b as --backoff reads it, or "none".
func formatBackoff(b client.Backoff) string {
	if b.Initial <= 0 {
		return "none"
	}
	return fmt.Sprintf("%s:%s:%g:%g", units.FormatDuration(b.Initial), units.FormatDuration(b.Max), max(b.Multiplier, 1), b.Jitter)
}

// parseBackoff reads INITIAL[:MAX[:MULTIPLIER[:JITTER]]].
func parseBackoff(s string) (client.Backoff, error) {
	bad := func(why string) (client.Backoff, error) {
		return client.Backoff{}, fmt.Errorf("--backoff %q: %s; want INITIAL[:MAX[:MULTIPLIER[:JITTER]]], such as 1s, 1s:5m:2 or 1s:5m:2:0.1", s, why)
	}
	parts := strings.Split(s, ":")
	if len(parts) > 4 {
		return bad(fmt.Sprintf("%d parts", len(parts)))
	}
	b := client.Backoff{Multiplier: 1}
	var err error
	if b.Initial, err = units.ParseDuration(parts[0]); err != nil || b.Initial < time.Millisecond {
		return bad("INITIAL is a duration of 1ms or more (to retry at once, give --default backoff)")
	}
	if len(parts) > 1 {
		if b.Max, err = units.ParseDuration(parts[1]); err != nil || (b.Max != 0 && b.Max < b.Initial) {
			return bad("MAX is a duration not below INITIAL, or 0 for no cap")
		}
	}
	if len(parts) > 2 {
		if b.Multiplier, err = strconv.ParseFloat(parts[2], 64); err != nil || b.Multiplier < 1 || b.Multiplier > 10 {
			return bad("MULTIPLIER is a number from 1 (a fixed delay) to 10")
		}
	}
	if len(parts) > 3 {
		if b.Jitter, err = strconv.ParseFloat(parts[3], 64); err != nil || b.Jitter < 0 || b.Jitter > 1 {
			return bad("JITTER is a number from 0 to 1 (the share of each delay taken off at random)")
		}
	}
	return b, nil
}

// summary is a policy's set fields on one line, or "defaults".
func summary(p client.Policy) string {
	var parts []string
	for _, f := range policyFields {
		if v := f.show(p); v != "" {
			parts = append(parts, f.name+" "+v)
		}
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// printPolicies prints what the topic set and what applies, field by
// field, or with --json one object.
func printPolicies(c *cli.Context, topic string, p client.Policies) error {
	if c.Bool("json") {
		out := policiesJSON{Topic: topic, Policy: newPolicyJSON(p.Set), Effective: newPolicyJSON(p.Effective)}
		for _, f := range p.Freezes {
			fj := freezeJSON{BeganAt: f.BeganAt.UTC().Format(time.RFC3339Nano)}
			if !f.EndedAt.IsZero() {
				fj.EndedAt = f.EndedAt.UTC().Format(time.RFC3339Nano)
			}
			out.Freezes = append(out.Freezes, fj)
		}
		return json.NewEncoder(c.App.Writer).Encode(out)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 3, ' ', 0)
	fmt.Fprintf(w, "%s\tset\teffective\n", topic)
	for _, f := range policyFields {
		set := f.show(p.Set)
		if set == "" {
			set = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.name, set, f.show(p.Effective))
	}
	fmt.Fprintf(w, "frozen\t%s\t%s\n", yesNoSet(p.Set.Freeze), yesNoSet(p.Effective.Freeze))
	for _, f := range p.Freezes {
		end := "lasting"
		if !f.EndedAt.IsZero() {
			end = f.EndedAt.UTC().Format(time.RFC3339Nano) + " (" + units.FormatDuration(f.EndedAt.Sub(f.BeganAt)) + ")"
		}
		fmt.Fprintf(w, "frozen pause\t%s\t%s\n", f.BeganAt.UTC().Format(time.RFC3339Nano), end)
	}
	return w.Flush()
}

// jsonFlag is --json of the policy commands.
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print one JSON object (the policy set and the effective one) instead of the table"}
}

const policyHelp = `The fields of a policy, as --default names them:
  max-attempts   deliveries before a message goes to "<topic>.dlq", 1 to 1000
                 (default: the server's --max-attempts)
  backoff        the delay before a retry after a nack without a delay or an
                 expired lease: INITIAL:MAX:MULTIPLIER:JITTER, that is INITIAL
                 times MULTIPLIER^(retry-1), at most MAX (0: no cap), less up
                 to JITTER of it at random (default: none, at once)
  paused         a paused topic hands out nothing: pending messages keep their
                 times, due ones wait, leases run on, acks work (default: no)
  rate           at most this many messages handed out per second, with a
                 burst of one second's worth (default: unlimited)
  lease          the lease of a receive that asks for none, 1ms to 12h
                 (default: the server's --default-lease)
Per flow key (send --flow-key; a message without one is not bound):
  flow-concurrency  at most N messages of one key leased at once, the others
                 wait, due (default: unlimited)
  flow-rate      at most N messages of one key handed out per second
                 (default: unlimited)
  flow-burst     how many of flow-rate a key may take at once (default: one
                 second's worth)
  flow-ordered   one message of a key at a time, in the order they came due;
                 the next once it is acked or dead-lettered (default: no)
  flow-fair      serve the keys with due messages in turn, one message each,
                 so a key with a large backlog does not hold up the others
                 (default: no)
Past a message's expiry (send --ttl or --expire-at), never handed out:
  expiry-drop    drop it instead of dead-lettering it with reason expired
                 (default: no)
  expiry-unacked it expires unless acked by then, not only unless received:
                 a lease ending after it ends it, an ack after it is refused
                 (default: no; an ack after it succeeds)
A field the topic did not set takes the server's default; "effective" is what
applies. Policies are durable: they hold across restarts and crashes.`

func topicsCommand() *cli.Command {
	return &cli.Command{
		Name:      "topics",
		Usage:     "list the topics with their due, leased and dead-lettered counts and policies",
		UsageText: "hourglass topics [--json]",
		Description: `Prints one row per topic the server knows (topics of the queue, and topics with
a policy), sorted by name:
  topic          the topic
  due            messages due and waiting to be received
  leased         messages received and not yet settled
  dead letters   messages waiting in "<topic>.dlq"
  oldest due     how long the oldest due message has waited ("-": none)
  policy         the policy fields the topic set ('hourglass policy show TOPIC'
                 has them all), or "defaults"
Under a flow policy a line follows the topic's: how many due messages their
flow key holds back (its concurrency, rate or order), in how many keys, and
the largest backlogs by key (at most 20) as KEY=DUE/LEASED[:HELD-BY].
Pending messages (not yet due) are not counted per topic: 'hourglass list
--topic T' pages through them, and 'hourglass stats' counts them by hour.

With --json it prints one JSON object per topic and line instead:
  {"topic":"orders","due":3,"leased":1,"dead_lettered":2,"oldest_due_age_seconds":1.5,
   "policy":{"max_attempts":5,"paused":true}}
and under a flow policy "flow_held", "flow_keys_held" and "flow_backlogs"
([{"flow_key":"acct-1","due":40,"leased":3,"held_by":"concurrency"}]).
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object per topic instead of the table"}),
		OnUsageError: usageError,
		Action:       runTopics,
	}
}

// topicsJSON is one line of topics --json.
type topicsJSON struct {
	Topic               string     `json:"topic"`
	Due                 int64      `json:"due"`
	Leased              int64      `json:"leased"`
	DeadLettered        int64      `json:"dead_lettered"`
	OldestDueAgeSeconds float64    `json:"oldest_due_age_seconds"`
	Policy              policyJSON `json:"policy"`
	FlowHeld            int64      `json:"flow_held,omitempty"`
	FlowKeysHeld        int64      `json:"flow_keys_held,omitempty"`
	FlowBacklogs        []flowJSON `json:"flow_backlogs,omitempty"`
}

// flowJSON is one key of topics --json's flow_backlogs.
type flowJSON struct {
	FlowKey string `json:"flow_key"`
	Due     int64  `json:"due"`
	Leased  int64  `json:"leased"`
	HeldBy  string `json:"held_by,omitempty"`
}

func runTopics(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	topics, err := call(c, "", (*client.Client).Topics)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, t := range topics {
			j := topicsJSON{Topic: t.Topic, Due: t.Due, Leased: t.Leased, DeadLettered: t.DeadLettered,
				OldestDueAgeSeconds: t.OldestDueAge.Seconds(), Policy: newPolicyJSON(t.Policy), FlowHeld: t.FlowHeld, FlowKeysHeld: t.FlowKeysHeld}
			for _, b := range t.FlowBacklogs {
				j.FlowBacklogs = append(j.FlowBacklogs, flowJSON{FlowKey: b.Key, Due: b.Due, Leased: b.Leased, HeldBy: b.HeldBy})
			}
			if err := enc.Encode(j); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "topic\tdue\tleased\tdead letters\toldest due\tpolicy")
	for _, t := range topics {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\n", t.Topic, t.Due, t.Leased, t.DeadLettered, age(t.OldestDueAge), summary(t.Policy))
		if len(t.FlowBacklogs) > 0 {
			fmt.Fprintf(w, "  flow keys\t%d held\tin %d keys\t\t\t%s\n", t.FlowHeld, t.FlowKeysHeld, flowSummary(t.FlowBacklogs))
		}
	}
	return w.Flush()
}

// age prints how long something waited, to the second past a second.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return units.FormatDuration(d.Round(time.Second))
}

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:      "policy",
		Usage:     "show or change how a topic delivers: max attempts, backoff, pause, rate, lease",
		UsageText: "hourglass policy show TOPIC [--json]\nhourglass policy set TOPIC [--max-attempts N] [--backoff SPEC] [--rate N] [--lease D] [--default FIELD]...",
		Description: policyHelp + `

  hourglass policy show orders
  hourglass policy set orders --max-attempts 5 --backoff 1s:5m:2:0.1
  hourglass policy set orders --default backoff --default max-attempts`,
		Subcommands: []*cli.Command{policyShowCommand(), policySetCommand()},
	}
}

func policyShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print a topic's policy: what it set, and what applies",
		UsageText: "hourglass policy show TOPIC [--json]",
		Description: `Prints each field of TOPIC's policy: what the topic set ("-": nothing, the
server's default applies) and what applies ("effective").

` + policyHelp + `

With --json it prints one object instead, with the API's field names:
  {"topic":"orders","policy":{"max_attempts":5},
   "effective":{"max_attempts":5,"backoff":{"initial_ms":0,"max_ms":0,"multiplier":1,"jitter":0},
                "paused":false,"max_dispatch_rate":0,"lease_ms":30000}}
` + exitCodes,
		Flags:        clientFlags(topicFlag("whose policy to print"), jsonFlag()),
		OnUsageError: usageError,
		Action:       refAction(oneTopic, (*client.Client).GetPolicy, printPolicies),
	}
}

func policySetCommand() *cli.Command {
	return &cli.Command{
		Name:      "set",
		Usage:     "change fields of a topic's policy; the others keep their values",
		UsageText: "hourglass policy set TOPIC [--max-attempts N] [--backoff INITIAL[:MAX[:MULTIPLIER[:JITTER]]]] [--rate N] [--lease D] [--flow-concurrency N] [--flow-rate N] [--flow-burst N] [--flow-ordered] [--flow-fair] [--expiry-drop] [--expiry-unacked] [--default FIELD]... [--json]",
		Description: `Changes the fields of TOPIC's policy that the flags name, durably, at once
(consumers need not restart); the other fields keep their values. --default
FIELD sets a field back to the server's default (repeat it for more fields).
Prints the policy that now holds, as 'policy show' does.

` + policyHelp + `

--backoff is INITIAL[:MAX[:MULTIPLIER[:JITTER]]]: 1s is a fixed 1s; 1s:5m:2 is
1s, 2s, 4s ... at most 5m; 1s:5m:2:0.1 takes up to a tenth off each at random.
MULTIPLIER defaults to 1, MAX and JITTER to 0. Pausing has its own commands,
'hourglass pause' and 'hourglass resume'.

  hourglass policy set orders --max-attempts 5 --backoff 1s:5m:2:0.1
  hourglass policy set orders --rate 50 --lease 2m
  hourglass policy set orders --default rate --default lease
  hourglass policy set orders --flow-concurrency 3 --flow-fair
  hourglass policy set payments --flow-ordered --flow-rate 50 --flow-burst 10
  hourglass policy set quotes --expiry-drop --expiry-unacked
` + exitCodes,
		Flags: clientFlags(
			topicFlag("whose policy to change"),
			&cli.IntFlag{Name: "max-attempts", Usage: "deliveries before a message is dead-lettered, `N` from 1 to 1000"},
			&cli.StringFlag{Name: "backoff", Usage: "retry delay `SPEC` INITIAL[:MAX[:MULTIPLIER[:JITTER]]], such as 1s:5m:2:0.1"},
			&cli.Float64Flag{Name: "rate", Usage: "hand out at most `N` messages per second; 0 means no limit"},
			&cli.StringFlag{Name: "lease", Usage: "lease (`DURATION`, 1ms to 12h) of a receive that asks for none"},
			&cli.IntFlag{Name: "flow-concurrency", Usage: "at most `N` messages of one flow key leased at once, 1 to 10000; 0 means no bound"},
			&cli.Float64Flag{Name: "flow-rate", Usage: "at most `N` messages of one flow key handed out per second; 0 means no bound"},
			&cli.IntFlag{Name: "flow-burst", Usage: "the bucket of --flow-rate, `N` messages; 0 means one second's worth"},
			&cli.BoolFlag{Name: "flow-ordered", Usage: "one message of a flow key at a time, in due order (--flow-ordered=false to stop)"},
			&cli.BoolFlag{Name: "flow-fair", Usage: "serve the flow keys with due messages in turn (--flow-fair=false to stop)"},
			&cli.BoolFlag{Name: "expiry-drop", Usage: "drop a message past its expiry instead of dead-lettering it (--expiry-drop=false to stop)"},
			&cli.BoolFlag{Name: "expiry-unacked", Usage: "expire a message not acked by its expiry, not only one not received by then; an ack after it is refused (--expiry-unacked=false to stop)"},
			&cli.StringSliceFlag{Name: "default", Usage: "set `FIELD` back to the server's default: max-attempts, backoff, paused, rate, lease, a flow-* or expiry-* field (repeatable)"},
			jsonFlag(),
		),
		OnUsageError: usageError,
		Action:       runPolicySet,
	}
}

// policyOfFlags reads the fields policy set changes, and the ones it sets
// back to their defaults.
func policyOfFlags(c *cli.Context) (client.Policy, []client.PolicyField, error) {
	var p client.Policy
	var set []string
	if c.IsSet("max-attempts") {
		n := c.Int("max-attempts")
		if n < 1 || n > 1000 {
			return p, nil, commandError(c, "--max-attempts %d: from 1 to 1000 (--default max-attempts goes back to the server's)", n)
		}
		p.MaxAttempts, set = &n, append(set, "max-attempts")
	}
	if c.IsSet("backoff") {
		b, err := parseBackoff(c.String("backoff"))
		if err != nil {
			return p, nil, commandError(c, "%v", err)
		}
		p.Backoff, set = &b, append(set, "backoff")
	}
	if c.IsSet("rate") {
		r := c.Float64("rate")
		if r < 0 {
			return p, nil, commandError(c, "--rate %g: 0 (no limit) or more messages per second", r)
		}
		p.MaxDispatchRate, set = &r, append(set, "rate")
	}
	if c.IsSet("lease") {
		d, err := units.ParseDuration(c.String("lease"))
		if err != nil || d < time.Millisecond || d > 12*time.Hour {
			return p, nil, commandError(c, "--lease %q: want a duration from 1ms to 12h, such as 30s or 10m", c.String("lease"))
		}
		p.Lease, set = &d, append(set, "lease")
	}
	if c.IsSet("flow-concurrency") {
		n := c.Int("flow-concurrency")
		if n < 0 || n > 10000 {
			return p, nil, commandError(c, "--flow-concurrency %d: from 1 to 10000, or 0 for no bound", n)
		}
		p.FlowConcurrency, set = &n, append(set, "flow-concurrency")
	}
	if c.IsSet("flow-rate") {
		r := c.Float64("flow-rate")
		if r < 0 {
			return p, nil, commandError(c, "--flow-rate %g: 0 (no bound) or more messages per second", r)
		}
		p.FlowRate, set = &r, append(set, "flow-rate")
	}
	if c.IsSet("flow-burst") {
		n := c.Int("flow-burst")
		if n < 0 || n > 1000000 {
			return p, nil, commandError(c, "--flow-burst %d: from 1 to 1000000, or 0 for one second of --flow-rate", n)
		}
		p.FlowBurst, set = &n, append(set, "flow-burst")
	}
	if c.IsSet("flow-ordered") {
		b := c.Bool("flow-ordered")
		p.FlowOrdered, set = &b, append(set, "flow-ordered")
	}
	if c.IsSet("flow-fair") {
		b := c.Bool("flow-fair")
		p.FlowFair, set = &b, append(set, "flow-fair")
	}
	if c.IsSet("expiry-drop") {
		b := c.Bool("expiry-drop")
		p.ExpiryDrop, set = &b, append(set, "expiry-drop")
	}
	if c.IsSet("expiry-unacked") {
		b := c.Bool("expiry-unacked")
		p.ExpiryUnacked, set = &b, append(set, "expiry-unacked")
	}
	var defaults []client.PolicyField
	for _, name := range c.StringSlice("default") {
		i := slices.IndexFunc(policyFields, func(f policyField) bool { return f.name == name || string(f.field) == name })
		if i < 0 {
			return p, nil, commandError(c, "--default %q: not a policy field; give max-attempts, backoff, paused, rate, lease, flow-concurrency, flow-rate, flow-burst, flow-ordered, flow-fair, expiry-drop or expiry-unacked", name)
		}
		if slices.Contains(set, policyFields[i].name) {
			return p, nil, commandError(c, "--%s and --default %s: set the field or set it back to its default, not both", policyFields[i].name, name)
		}
		defaults = append(defaults, policyFields[i].field)
	}
	if len(set) == 0 && len(defaults) == 0 {
		return p, nil, commandError(c, "nothing to change: give --max-attempts, --backoff, --rate, --lease, a --flow-* or --expiry-* flag or --default FIELD")
	}
	return p, defaults, nil
}

func runPolicySet(c *cli.Context) error {
	topic, err := oneTopic(c)
	if err != nil {
		return err
	}
	p, defaults, err := policyOfFlags(c)
	if err != nil {
		return err
	}
	res, err := call(c, topic, func(cl *client.Client, ctx context.Context) (client.Policies, error) {
		return cl.SetPolicy(ctx, topic, p, defaults...)
	})
	if err != nil {
		return err
	}
	return printPolicies(c, topic, res)
}

// flowSummary prints a topic's largest backlogs by flow key as
// KEY=DUE/LEASED[:HELD-BY], largest first.
func flowSummary(bs []client.FlowBacklog) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%q=%d/%d", b.Key, b.Due, b.Leased)
		if b.HeldBy != "" {
			parts[i] += ":" + b.HeldBy
		}
	}
	return strings.Join(parts, " ")
}

package e2e

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// difference is one way cluster mode answers otherwise than one node: a
// row of docs/CLUSTER.md's table, which TestClusterDifferencesDoc
// generates from conformDifferences.
type difference struct {
	key      string // what a case passes to tg.differs
	rpcs     string // the RPCs and fields it concerns
	single   string // one node's behaviour
	cluster  string // cluster mode's
	why      string // why JetStream does not serve one node's, and what to use instead
	untested string // if not empty: why no case of the suite checks it
}

// conformDifferences is the one list of what differs; a case checks each
// row unless its untested field says why not.
var conformDifferences = []difference{
	{key: "order", rpcs: "`Receive` of messages due one after another",
		single: "in `deliver_at` order", cluster: "in that order within a partition (one `ScheduleBatch` is one partition); across partitions as each owner delivers them, none early",
		why: "each partition's owner delivers on its own, and single Schedules go round robin over the partitions; put messages that must stay in order in one `ScheduleBatch`"},
	{key: "list-due", rpcs: "`List` of `DUE` and `DEAD_LETTERED`",
		single: "every message waiting to be handed out", cluster: "those not handed out yet (as `Topics` counts `due`), oldest first",
		why: "a message nacked or past its lease waits inside the consumer, which tells how many, not which (`Topics` counts it as `leased`)"},
	{key: "list-leased", rpcs: "`List` of `LEASED`",
		single: "the leased messages", cluster: "`FailedPrecondition`",
		why: "a JetStream consumer tells how many deliveries wait for an ack, not which; `Topics` counts them (`leased`)"},
	{key: "get-queue-state", rpcs: "`Get` of a delivered message",
		single: "`DUE`, `LEASED`, `ACKED` or `DEAD_LETTERED`, from the queue", cluster: "`DELIVERED`",
		why: "the consumer's state of one delivery is not readable by message; use `Topics` for the counts"},
	{key: "by-id", rpcs: "`Ack`, `Nack`, `Extend` by `id`",
		single: "yes", cluster: "`FailedPrecondition` asking for the receipt",
		why: "JetStream settles a delivery by its ack subject (stream sequence, delivery count), which the receipt holds and the ID does not; no node knows an ID's current delivery without an index kept in step with every delivery, Redrive and dead letter; send the receipt, as the Go client's `Worker` does"},
	{key: "backoff-expired", rpcs: "`SetPolicy` `backoff`, when a lease ends",
		single: "the message waits the backoff", cluster: "handed out again when the lease ends (a Nack without a delay waits the backoff, as on one node)",
		why: "JetStream redelivers when `AckWait` ends; its `BackOff` would stretch each delivery's lease instead; Nack failures rather than letting leases run out"},
	{key: "policy-rate", rpcs: "`SetPolicy` `max_dispatch_rate`",
		single: "messages handed out per second", cluster: "`InvalidArgument`",
		why: "JetStream's consumer `RateLimit` is bits per second and for push consumers only; a topic is a pull consumer every node fetches from, and a rate across nodes would need one place counting every hand-out; bound the handlers (`Worker` `Concurrency`, `Consume` credits) or pace them in a `Worker` middleware"},
	{key: "policy-flow", rpcs: "`SetPolicy` `flow_*`",
		single: "per flow key: concurrency, rate, order, fair turns", cluster: "`FailedPrecondition` naming the field; the key is delivered as the header `hourglass-flow-key` only",
		why: "JetStream bounds a consumer's messages in flight, not a key's, and no node sees what the others hold (\"Managing the queue\"); group by the header, or run one node"},
	{key: "policy-expiry", rpcs: "`SetPolicy` `expiry_drop`, `expiry_unacked`",
		single: "an expired message dropped; expired unless acked by its expiry", cluster: "`FailedPrecondition` naming the field; an expired message is dead-lettered when a Receive reaches it",
		why: "a JetStream delivery keeps no expiry to act on when its lease ends or an Ack comes; dead letters of reason `expired` can be acked away, or run one node"},
	{key: "lease", rpcs: "`Receive` `lease_ms`, `Extend` `lease_ms`",
		single: "any lease up to the maximum", cluster: "`Receive`: 0 or the topic's; `Extend`: the topic's (`FailedPrecondition`, `InvalidArgument`)",
		why: "the lease is the consumer's `AckWait`, one per topic; set it with `SetPolicy` `lease_ms`"},
	{key: "lease-start", rpcs: "`lease_expires_at` of a received message",
		single: "`received_at` + lease", cluster: "`received_at` − 20 ms + lease",
		why: "`AckWait` starts when JetStream sends; the margin keeps a receipt from acting after JetStream can redeliver"},
	{key: "ack-twice", rpcs: "`Ack` of a message already acked",
		single: "`FailedPrecondition`", cluster: "OK",
		why: "JetStream's acks are idempotent"},
	{key: "nack-delay", rpcs: "`Nack` with `delay_ms`",
		single: "a retry under a new ID (`origin_id` the first)", cluster: "the same ID, held back, `attempt` + 1",
		why: "JetStream holds the delivery back; nothing is scheduled again"},
	{key: "nack-release", rpcs: "`Nack` with `release`",
		single: "the attempt is not counted", cluster: "counted",
		why: "JetStream counts every delivery"},
	{key: "redrive", rpcs: "`Redrive`",
		single: "a new message per dead letter (`origin_id` the first)", cluster: "the same ID, `attempt` 0; deduplicated for 2 min",
		why: "the dead letter is published again with its ID"},
	{key: "purge-due", rpcs: "`Purge` of `DUE`",
		single: "the messages waiting", cluster: "the topic's subject: waiting, leased and delayed, for every reader of the stream",
		why: "JetStream purges a subject, not a consumer's view of it"},
	{key: "oldest-due", rpcs: "`Topics` `oldest_due_age_seconds`",
		single: "the oldest waiting message's age", cluster: "0",
		why: "a consumer does not tell when its next message was stored without reading it"},
	{key: "edit", rpcs: "`Edit`",
		single: "replaces body or headers", cluster: "`FailedPrecondition`",
		why: "JetStream has no atomic replace of a stored message; `Cancel` and `Schedule` again"},
	{key: "freeze-message", rpcs: "`FreezeMessage`, `ThawMessage`",
		single: "holds one message with its remaining delay until thawed", cluster: "`FailedPrecondition`",
		why: "JetStream has no atomic replace of a stored message; `Cancel`, and `Schedule` again later"},
	{key: "calendars", rpcs: "`CreateCalendar`, `UpdateCalendar`, `DeleteCalendar`, `GetCalendar`, `ListCalendars`",
		single: "working-time calendars for recurring schedules", cluster: "`Unimplemented`",
		why: "not built yet: a calendar would live in the intake streams as the schedules do; run calendars on one node"},
	{key: "audit", rpcs: "`ListAudit`",
		single: "the changes made through the server", cluster: "the changes made through the node asked (a call it forwarded is in the owner's trail too, as that node's)",
		why: "each node appends to the trail in its own data directory; read every node's (`hourglass audit --addr`) and merge by `at`"},
	{key: "stats", rpcs: "`Stats`",
		single: "the server", cluster: "this node's partitions",
		why: "each node runs its own engines", untested: "the counts are each node's own; other cases' messages run through the same nodes at once"},
	{key: "receive-ends", rpcs: "a `Receive` or `Consume` that ends while waiting",
		single: "nothing leased", cluster: "what was fetched is Nak'd: again at once, `attempt` + 1",
		why: "a pull cannot be taken back", untested: "a race between the fetch and the caller leaving; cluster/jsqueue TestAbandonedPullGivesBack"},
	{key: "max-attempts-expired", rpcs: "a lease ending at max attempts",
		single: "dead-lettered when the lease ends", cluster: "when a `Receive` next fetches it",
		why: "JetStream's `MaxDeliver` reports only in an advisory", untested: "the dead letter's moment; cluster/jsqueue TestDeadLetters"},
	{key: "ack-pending", rpcs: "messages leased or delayed at once per topic",
		single: "unbounded", cluster: "100,000 (`MaxAckPending`)",
		why: "JetStream's bound on a consumer's unacked deliveries", untested: "needs 100,000 leases"},
	{key: "acked-kept", rpcs: "acked messages",
		single: "deleted", cluster: "stay in the delivery stream (its limits apply)",
		why: "the stream is shared by every consumer", untested: "not visible through the API"},
	{key: "policy-spread", rpcs: "`SetPolicy` seen by another node",
		single: "at once", cluster: "within 2 s (pause: at once)",
		why: "each node reads a consumer's config again when its copy is 2 s old", untested: "a timing; cluster/jsqueue TestPolicy"},
}

var update = flag.Bool("update", false, "rewrite the generated table of docs/CLUSTER.md")

const (
	diffBegin = "<!-- differences: generated from e2e/conform_differences_test.go; go test ./e2e -run TestClusterDifferencesDoc -update -->\n"
	diffEnd   = "<!-- end of differences -->\n"
)

// differencesTable renders conformDifferences as docs/CLUSTER.md shows it.
func differencesTable() string {
	var b strings.Builder
	b.WriteString("| RPC | one node | cluster mode | why, and what to use |\n| --- | --- | --- | --- |\n")
	for _, d := range conformDifferences {
		b.WriteString("| " + d.rpcs + " | " + d.single + " | " + d.cluster + " | " + d.why + " |\n")
	}
	return b.String()
}

// TestClusterDifferencesDoc checks that docs/CLUSTER.md's table of
// differences is conformDifferences (-update writes it).
func TestClusterDifferencesDoc(t *testing.T) {
	const path = "../docs/CLUSTER.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, diffBegin), strings.Index(doc, diffEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated table between %q and %q", path, diffBegin, diffEnd)
	}
	want := differencesTable()
	if got := doc[i+len(diffBegin) : j]; got != want {
		if !*update {
			t.Fatalf("%s: the table of differences is not conformDifferences; run go test ./e2e -run TestClusterDifferencesDoc -update\ngot:\n%s\nwant:\n%s", path, got, want)
		}
		doc = doc[:i+len(diffBegin)] + want + doc[j:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keys := map[string]bool{}
	for _, d := range conformDifferences {
		if keys[d.key] || d.key == "" || d.why == "" {
			t.Errorf("difference %q: empty, or twice, or without a reason", d.key)
		}
		keys[d.key] = true
	}
}

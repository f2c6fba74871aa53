package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
)

// parseServeArgs runs serve's flags over args and returns what parseServe
// made of them.
func parseServeArgs(t *testing.T, args ...string) *serveConfig {
	t.Helper()
	var got *serveConfig
	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) error {
		var err error
		got, err = parseServe(c)
		return err
	}
	app := &cli.App{Name: "hourglass", Commands: []*cli.Command{cmd}, ErrWriter: &bytes.Buffer{}, Writer: &bytes.Buffer{}}
	if err := app.RunContext(context.Background(), append([]string{"hourglass", "serve", "--data-dir", t.TempDir()}, args...)); err != nil {
		t.Fatalf("serve %q: %v", args, err)
	}
	return got
}

// TestServeFlagsBindConfig: serve's flags set hourglass.Config's fields
// with the Config's own meaning, zero included, and its defaults are
// DefaultConfig's.
func TestServeFlagsBindConfig(t *testing.T) {
	d := hourglass.DefaultConfig()
	n := parseServeArgs(t).node
	if n.HandoffLead != d.HandoffLead || n.IdempotencyWindow != d.IdempotencyWindow || n.SegmentDuration != d.SegmentDuration ||
		n.MaxAttempts != d.MaxAttempts || n.MaxTopics != d.MaxTopics || n.DefaultLease != d.DefaultLease || n.MaxBody != d.MaxBody ||
		n.MaxDelay != d.MaxDelay || n.Fsync != d.Fsync || n.Sink != d.Sink || n.MaxStreams != d.MaxStreams || n.IdleTimeout != d.IdleTimeout {
		t.Errorf("serve without flags: %+v\nwant DefaultConfig's values: %+v", n, d)
	}
	n = parseServeArgs(t, "--handoff-lead", "0", "--idempotency-window", "0", "--max-topics", "-1").node
	if n.HandoffLead != 0 || n.IdempotencyWindow != 0 || n.MaxTopics != -1 {
		t.Errorf("--handoff-lead 0 --idempotency-window 0 --max-topics -1: Config has %v, %v, %d; want 0, 0, -1 (Config's zero is the flag's)",
			n.HandoffLead, n.IdempotencyWindow, n.MaxTopics)
	}
	n = parseServeArgs(t, "--handoff-lead", "5ms", "--idempotency-window", "90s").node
	if n.HandoffLead != 5*time.Millisecond || n.IdempotencyWindow != 90*time.Second {
		t.Errorf("--handoff-lead 5ms --idempotency-window 90s: Config has %v, %v", n.HandoffLead, n.IdempotencyWindow)
	}
	n = parseServeArgs(t, "--sink", "webhook", "--webhook", "*=http://127.0.0.1:1/hook").node
	if n.HandoffLead != 0 || n.Sink != hourglass.SinkWebhook || len(n.Webhooks) != 1 {
		t.Errorf("--sink webhook: HandoffLead %v, Sink %q, %d routes; want 0 (the queue's lead does not apply), webhook, 1", n.HandoffLead, n.Sink, len(n.Webhooks))
	}
	c := parseServeArgs(t, "--cluster", "nats://127.0.0.1:1", "--compact-margin", "-1", "--partitions", "4")
	if cl := c.node.Cluster; cl == nil || cl.URL != "nats://127.0.0.1:1" || cl.CompactMargin != -1 || cl.Partitions != 4 || c.node.Sink != hourglass.SinkNATS {
		t.Errorf("--cluster: Config %+v, Cluster %+v", c.node, c.node.Cluster)
	}
}

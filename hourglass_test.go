package hourglass

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/sink/webhook"
)

// TestConfigErrors: a wrong Config is refused by Open with an error that
// names the field and what is allowed, before anything is opened.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	route, err := webhook.ParseRoute("*=http://127.0.0.1:1/hook")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_data_dir", Config{}, "DataDir is empty"},
		{"segment_not_whole_seconds", Config{DataDir: dir, SegmentDuration: 1500 * time.Millisecond}, "whole seconds from 1s to 24h"},
		{"preload_too_long", Config{DataDir: dir, SegmentDuration: time.Minute, PreloadLead: time.Minute}, "shorter than SegmentDuration"},
		{"body_too_large", Config{DataDir: dir, MaxBody: 1 << 30}, "MaxBody 1073741824: from 1 to"},
		{"level_beyond_max_delay", Config{DataDir: dir, MaxDelay: time.Hour, DelayLevels: []time.Duration{2 * time.Hour}}, "at most MaxDelay 1h"},
		{"unknown_sink", Config{DataDir: dir, Sink: "kafka"}, `Sink "kafka": want queue, webhook or nats`},
		{"webhook_without_routes", Config{DataDir: dir, Sink: SinkWebhook}, "at least one route"},
		{"routes_without_webhook", Config{DataDir: dir, Webhooks: []webhook.Route{route}}, "need Sink webhook or nats"},
		{"handoff_with_webhook", Config{DataDir: dir, Sink: SinkWebhook, Webhooks: []webhook.Route{route}, HandoffLead: time.Millisecond}, "HandoffLead works only with Sink queue"},
		{"handoff_too_long", Config{DataDir: dir, HandoffLead: 2 * time.Second}, "HandoffLead 2s: from 0 (none) to 1s"},
		{"handoff_negative", Config{DataDir: dir, HandoffLead: -time.Millisecond}, "HandoffLead -1ms: from 0 (none) to 1s"},
		{"idempotency_negative", Config{DataDir: dir, IdempotencyWindow: -time.Second}, "IdempotencyWindow -1s: 0 (keys off) or more"},
		{"lease_too_long", Config{DataDir: dir, DefaultLease: 24 * time.Hour}, "DefaultLease 24h0m0s: from 1ms to"},
		{"max_topics_negative", Config{DataDir: dir, MaxTopics: -5}, "MaxTopics -5: at least 1, or -1 for no limit"},
		{"topic_idle_negative", Config{DataDir: dir, TopicIdleTimeout: -time.Second}, "TopicIdleTimeout -1s: must be positive"},
		{"cluster_without_node_id", Config{DataDir: dir, Cluster: &ClusterConfig{URL: "nats://127.0.0.1:1"}}, "Cluster needs URL, NodeID and Advertise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestConfigZero: a zero means zero where zero is a value (no hand-over
// lead, keys off), as on serve's command line, and the default where it
// would not be valid; DefaultConfig holds every default and passes as it
// is.
func TestConfigZero(t *testing.T) {
	c := Config{DataDir: "d"}
	if err := c.normalize(); err != nil {
		t.Fatal(err)
	}
	if c.HandoffLead != 0 || c.IdempotencyWindow != 0 {
		t.Errorf("zero HandoffLead, IdempotencyWindow normalized to %v, %v; want 0, 0 (none, keys off)", c.HandoffLead, c.IdempotencyWindow)
	}
	if c.SegmentDuration != DefaultSegmentDuration || c.MaxAttempts != DefaultMaxAttempts || c.MaxTopics != DefaultMaxTopics {
		t.Errorf("zero SegmentDuration, MaxAttempts, MaxTopics normalized to %v, %d, %d; want their defaults", c.SegmentDuration, c.MaxAttempts, c.MaxTopics)
	}
	d := DefaultConfig()
	d.DataDir = "d"
	want := d
	if err := d.normalize(); err != nil {
		t.Fatal(err)
	}
	if d.HandoffLead != DefaultHandoffLead || d.IdempotencyWindow != DefaultIdempotencyWindow || d.MaxBody != want.MaxBody ||
		d.Sink != SinkQueue || d.MaxStreams != want.MaxStreams || d.TopicIdleTimeout != DefaultTopicIdleTimeout {
		t.Errorf("DefaultConfig changed by normalize: %+v, want %+v", d, want)
	}
	w := DefaultConfig()
	w.DataDir, w.Sink, w.Webhooks = "d", SinkWebhook, []webhook.Route{{Pattern: "*", URL: "http://127.0.0.1:1/"}}
	if err := w.normalize(); err == nil || !strings.Contains(err.Error(), "set it to 0") {
		t.Errorf("DefaultConfig with a webhook sink and the queue's lead: %v; want an error saying to set HandoffLead to 0", err)
	}
}

// TestOpenLocksDataDir: a second node on the same directory is refused
// while the first runs, and takes it once the first is closed.
func TestOpenLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	first, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Open: %v, want in use", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	select {
	case <-second.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after 30s")
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
}

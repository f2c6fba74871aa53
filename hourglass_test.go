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
		{"handoff_too_long", Config{DataDir: dir, HandoffLead: 2 * time.Second}, "HandoffLead 2s: from 0 to 1s"},
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

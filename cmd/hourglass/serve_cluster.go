package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/server"
	"github.com/hourglassmq/hourglass/sink/natsjs"
)

// clusterOnly are the flags that mean something only with --cluster.
var clusterOnly = []string{"node-id", "advertise", "partitions", "lease-ttl", "replicas", "compact-margin", "compact-interval"}

// parseCluster checks the --cluster flags into cfg.
func parseCluster(c *cli.Context, cfg *serveConfig) error {
	cfg.cluster = c.String("cluster")
	if cfg.cluster == "" {
		for _, f := range clusterOnly {
			if c.IsSet(f) {
				return fmt.Errorf("--%s needs --cluster nats://HOST:PORT", f)
			}
		}
		return nil
	}
	if c.IsSet("sink") && cfg.sink != "nats" {
		return fmt.Errorf("--sink %s cannot run with --cluster: in cluster mode due messages go to the replicated JetStream delivery stream (--nats-stream), "+
			"which consumers read, so that any node can deliver any partition; leave --sink out", cfg.sink)
	}
	if len(cfg.webhooks) > 0 {
		return errors.New("--webhook cannot run with --cluster: due messages go to the JetStream delivery stream")
	}
	cfg.sink = "nats"
	if cfg.natsURL == "" {
		cfg.natsURL = cfg.cluster
	}
	cfg.nodeID, cfg.advertise = c.String("node-id"), c.String("advertise")
	cfg.partitions, cfg.replicas, cfg.leaseTTL = c.Int("partitions"), c.Int("replicas"), c.Duration("lease-ttl")
	if c.IsSet("partitions") && (cfg.partitions < 1 || cfg.partitions > cluster.MaxPartitions) {
		return fmt.Errorf("--partitions %d: from 1 to %d", cfg.partitions, cluster.MaxPartitions)
	}
	if cfg.replicas < 1 || cfg.replicas > 5 {
		return fmt.Errorf("--replicas %d: from 1 to 5 (JetStream's limit), at most the NATS cluster's size", cfg.replicas)
	}
	if cfg.leaseTTL < cluster.MinLeaseTTL {
		return fmt.Errorf("--lease-ttl %v: at least %v", cfg.leaseTTL, cluster.MinLeaseTTL)
	}
	cfg.compactMargin, cfg.compactInterval = c.Int("compact-margin"), c.Duration("compact-interval")
	if cfg.compactMargin == 0 {
		return errors.New("--compact-margin 0: give at least 1 (the least number of consumed messages beyond 2 × pending that starts a compaction), or a negative number to turn compaction off")
	}
	if cfg.compactInterval <= 0 {
		return fmt.Errorf("--compact-interval %v: give a positive duration such as %v", cfg.compactInterval, cluster.DefaultCompactInterval)
	}
	return nil
}

// runCluster is serve --cluster: the API over a cluster node.
func runCluster(c *cli.Context, cfg *serveConfig) error {
	log := cfg.logger
	// Listen first: the node's default ID and advertise URL name the port.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if cfg.nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "hourglass"
		}
		cfg.nodeID = fmt.Sprintf("%s:%d", host, addr.Port)
	}
	if cfg.advertise == "" {
		host := addr.IP.String()
		if addr.IP.IsUnspecified() {
			if host, err = os.Hostname(); err != nil {
				ln.Close()
				return fmt.Errorf("--advertise: listening on every interface and the host name is unknown (%v): give --advertise http://HOST:PORT", err)
			}
		}
		cfg.advertise = "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
		if cfg.tlsCert != "" {
			cfg.advertise = "https://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
		}
	}
	metrics := server.NewMetrics()
	ns, err := natsjs.Open(c.Context, natsjs.Options{URL: cfg.natsURL, Prefix: cfg.natsPfx, Stream: cfg.natsStream, Replicas: cfg.replicas, Logger: log})
	if err != nil {
		ln.Close()
		return fmt.Errorf("--cluster: the delivery stream: %w", err)
	}
	start := time.Now()
	node, err := cluster.Open(c.Context, cluster.Options{
		URL: cfg.cluster, NodeID: cfg.nodeID, Advertise: cfg.advertise, Partitions: cfg.partitions,
		LeaseTTL: cfg.leaseTTL, Replicas: cfg.replicas, DataDir: filepath.Join(cfg.dataDir, "cluster"),
		MaxDelay: cfg.maxDelay, SegmentDuration: cfg.segDur, Sink: ns, AuthToken: cfg.token,
		Observer: metrics, Logger: log, CompactMargin: cfg.compactMargin, CompactInterval: cfg.compactInterval,
	})
	if err != nil {
		ns.Close()
		ln.Close()
		return fmt.Errorf("--cluster %s: %w", cfg.cluster, err)
	}
	closeAll := func() error {
		err := node.Close()
		if serr := ns.Close(); err == nil {
			err = serr
		}
		return err
	}
	srv, err := server.New(server.Options{
		Cluster: node, Metrics: metrics, SegmentDuration: cfg.segDur,
		MaxBody: cfg.maxBody, MaxDelay: cfg.maxDelay, DelayLevels: cfg.levels, AuthToken: cfg.token, Logger: log, Pprof: cfg.pprof,
		ExternalSink: "nats",
	})
	if err != nil {
		closeAll()
		ln.Close()
		return err
	}
	return serveAPI(c, cfg, ln, srv, closeAll, func() {
		select {
		case <-node.Ready():
			log.Info("ready: joined the cluster", "after", time.Since(start).Round(time.Millisecond), "partitions_owned", node.Owned())
		case <-c.Context.Done():
		}
	}, "cluster", cfg.cluster, "node_id", cfg.nodeID, "advertise", cfg.advertise, "partitions", node.Partitions(),
		"lease_ttl", cfg.leaseTTL, "replicas", cfg.replicas, "delivery_stream", cfg.natsStream,
		"compact_margin", cfg.compactMargin, "compact_interval", cfg.compactInterval)
}

package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/cluster"
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

// clusterConfig is the cluster part of the command line, with the node's
// ID and advertise URL made from ln when not given.
func clusterConfig(cfg *serveConfig, ln net.Listener) (*hourglass.ClusterConfig, error) {
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
			var err error
			if host, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("--advertise: listening on every interface and the host name is unknown (%v): give --advertise http://HOST:PORT", err)
			}
		}
		scheme := "http://"
		if cfg.tlsCert != "" {
			scheme = "https://"
		}
		cfg.advertise = scheme + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	}
	return &hourglass.ClusterConfig{
		URL: cfg.cluster, NodeID: cfg.nodeID, Advertise: cfg.advertise, Partitions: cfg.partitions,
		LeaseTTL: cfg.leaseTTL, Replicas: cfg.replicas, CompactMargin: cfg.compactMargin, CompactInterval: cfg.compactInterval,
	}, nil
}

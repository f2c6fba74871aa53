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

// parseCluster checks the --cluster flags into n.Cluster (nil without
// --cluster).
func parseCluster(c *cli.Context, n *hourglass.Config) error {
	url := c.String("cluster")
	if url == "" {
		for _, f := range clusterOnly {
			if c.IsSet(f) {
				return fmt.Errorf("--%s needs --cluster nats://HOST:PORT", f)
			}
		}
		return nil
	}
	if c.IsSet("sink") && n.Sink != hourglass.SinkNATS {
		return fmt.Errorf("--sink %s cannot run with --cluster: in cluster mode due messages go to the replicated JetStream delivery stream (--nats-stream), "+
			"which consumers read, so that any node can deliver any partition; leave --sink out", n.Sink)
	}
	if len(n.Webhooks) > 0 {
		return errors.New("--webhook cannot run with --cluster: due messages go to the JetStream delivery stream")
	}
	n.Sink = hourglass.SinkNATS
	if n.NATSURL == "" {
		n.NATSURL = url
	}
	cl := &hourglass.ClusterConfig{URL: url, NodeID: c.String("node-id"), Advertise: c.String("advertise"),
		Partitions: c.Int("partitions"), Replicas: c.Int("replicas"), LeaseTTL: c.Duration("lease-ttl"),
		CompactMargin: c.Int("compact-margin"), CompactInterval: c.Duration("compact-interval")}
	if c.IsSet("partitions") && (cl.Partitions < 1 || cl.Partitions > cluster.MaxPartitions) {
		return fmt.Errorf("--partitions %d: from 1 to %d", cl.Partitions, cluster.MaxPartitions)
	}
	if cl.Replicas < 1 || cl.Replicas > 5 {
		return fmt.Errorf("--replicas %d: from 1 to 5 (JetStream's limit), at most the NATS cluster's size", cl.Replicas)
	}
	if cl.LeaseTTL < cluster.MinLeaseTTL {
		return fmt.Errorf("--lease-ttl %v: at least %v", cl.LeaseTTL, cluster.MinLeaseTTL)
	}
	if cl.CompactMargin == 0 {
		return errors.New("--compact-margin 0: give at least 1 (the least number of consumed messages beyond 2 × pending that starts a compaction), or a negative number to turn compaction off")
	}
	if cl.CompactInterval <= 0 {
		return fmt.Errorf("--compact-interval %v: give a positive duration such as %v", cl.CompactInterval, cluster.DefaultCompactInterval)
	}
	n.Cluster = cl
	return nil
}

// defaultNodeID fills in the node's ID and advertise URL from ln when the
// command line gave none.
func defaultNodeID(cl *hourglass.ClusterConfig, tls bool, ln net.Listener) error {
	addr := ln.Addr().(*net.TCPAddr)
	if cl.NodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "hourglass"
		}
		cl.NodeID = fmt.Sprintf("%s:%d", host, addr.Port)
	}
	if cl.Advertise == "" {
		host := addr.IP.String()
		if addr.IP.IsUnspecified() {
			var err error
			if host, err = os.Hostname(); err != nil {
				return fmt.Errorf("--advertise: listening on every interface and the host name is unknown (%v): give --advertise http://HOST:PORT", err)
			}
		}
		scheme := "http://"
		if tls {
			scheme = "https://"
		}
		cl.Advertise = scheme + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	}
	return nil
}

package crashtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// What the hourglass nodes did after a NATS kill, read from their logs
// (serve's text format): the Hourglass part of the time a partition
// delivered nothing, beside the NATS elections.

// NodeStages counts what the hourglass nodes' logs record from a NATS kill
// to the next kill (or the end), each at its ms after the kill.
type NodeStages struct {
	// LeasesLost: a node stopped a partition whose lease it could not
	// renew (HG_OWNERS without a leader for longer than the lease).
	LeasesLost []float64 `json:"leases_lost,omitempty"`
	// Started: a node took a partition and loaded its done stream.
	Started []float64 `json:"started,omitempty"`
	// StartsFailed: a partition stopped on an error (a start that found
	// no answer from JetStream), to be taken again.
	StartsFailed []float64 `json:"starts_failed,omitempty"`
	// ReadersRemade: a partition's intake reader was made again.
	ReadersRemade []float64 `json:"readers_remade,omitempty"`
}

// The serve log messages NodeStages counts (package cluster's).
var nodeStageMsgs = map[string]func(*NodeStages, float64){
	"cluster: lease lost; stopping partition":      func(s *NodeStages, t float64) { s.LeasesLost = append(s.LeasesLost, t) },
	"cluster: partition taken":                     func(s *NodeStages, t float64) { s.Started = append(s.Started, t) },
	"cluster: partition stopped":                   func(s *NodeStages, t float64) { s.StartsFailed = append(s.StartsFailed, t) },
	"cluster: reading the intake stream; resuming": func(s *NodeStages, t float64) { s.ReadersRemade = append(s.ReadersRemade, t) },
}

// scanNodeStages adds to st what one node's log (text format) records
// from from until until (never if zero), in ms after from.
func scanNodeStages(r io.Reader, from, until time.Time, st *NodeStages) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ts, rest, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || len(ts) == len(line) {
			continue
		}
		_, msg, ok := strings.Cut(rest, `msg="`)
		if !ok {
			continue
		}
		msg, _, _ = strings.Cut(msg, `"`)
		add := nodeStageMsgs[msg]
		if add == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(from) || (!until.IsZero() && !t.Before(until)) {
			continue
		}
		add(st, ms(t.Sub(from)))
	}
	return sc.Err()
}

// scanNodeLogs fills the Nodes stages of every NATS kill from the
// hourglass nodes' logs.
func (cr *clusterRunner) scanNodeLogs() {
	for i := range cr.cs.Kills {
		k := &cr.cs.Kills[i]
		if !strings.HasPrefix(k.Target, "nats ") {
			continue
		}
		var until time.Time
		if i+1 < len(cr.cs.Kills) {
			until = cr.cs.Kills[i+1].At
		}
		st := &NodeStages{}
		for _, n := range cr.nodes {
			f, err := os.Open(n.logPath)
			if err != nil {
				continue
			}
			if err := scanNodeStages(f, k.At, until, st); err != nil {
				cr.progress("reading %s: %v", n.logPath, err)
			}
			f.Close()
		}
		for _, s := range [][]float64{st.LeasesLost, st.Started, st.StartsFailed, st.ReadersRemade} {
			slices.Sort(s)
		}
		k.Nodes = st
	}
}

// stagesLine is the report's line of a kill's node stages.
func (s *NodeStages) stagesLine() string {
	part := func(name string, ts []float64) string {
		switch len(ts) {
		case 0:
			return name + " 0"
		case 1:
			return fmt.Sprintf("%s 1 (%.0f ms)", name, ts[0])
		}
		return fmt.Sprintf("%s %d (%.0f-%.0f ms)", name, len(ts), ts[0], ts[len(ts)-1])
	}
	return strings.Join([]string{part("leases lost", s.LeasesLost), part("partitions started", s.Started),
		part("starts failed", s.StartsFailed), part("intake readers remade", s.ReadersRemade)}, "; ")
}

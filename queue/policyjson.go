package queue

import (
	"encoding/json"
	"fmt"
	"time"
)

// policyJSON is how a Policy is stored (the value of a policy control
// record, docs/FORMAT.md): durations in milliseconds, zero fields left
// out. The field names are part of the on-disk format.
type policyJSON struct {
	MaxAttempts       int     `json:"max_attempts,omitempty"`
	BackoffInitialMs  int64   `json:"backoff_initial_ms,omitempty"`
	BackoffMaxMs      int64   `json:"backoff_max_ms,omitempty"`
	BackoffMultiplier float64 `json:"backoff_multiplier,omitempty"`
	BackoffJitter     float64 `json:"backoff_jitter,omitempty"`
	Paused            bool    `json:"paused,omitempty"`
	Rate              float64 `json:"max_dispatch_rate,omitempty"`
	LeaseMs           int64   `json:"lease_ms,omitempty"`
	FlowConcurrency   int     `json:"flow_concurrency,omitempty"`
	FlowRate          float64 `json:"flow_rate,omitempty"`
	FlowBurst         int     `json:"flow_burst,omitempty"`
	FlowOrdered       bool    `json:"flow_ordered,omitempty"`
	FlowFair          bool    `json:"flow_fair,omitempty"`
	ExpiryDrop        bool    `json:"expiry_drop,omitempty"`
	ExpiryUnacked     bool    `json:"expiry_unacked,omitempty"`
	// Freezes: [at_ms, until_ms (0: lasting), seq] each, oldest first.
	Freezes [][3]int64 `json:"freezes,omitempty"`
}

// EncodePolicy returns p as it is stored; the zero Policy is empty.
func EncodePolicy(p Policy) []byte {
	if p == (Policy{}) {
		return nil
	}
	var fz [][3]int64
	for _, f := range p.Freezes.List() {
		fz = append(fz, [3]int64{f.At, f.Until, int64(f.Seq)})
	}
	b, _ := json.Marshal(policyJSON{
		Freezes:     fz,
		MaxAttempts: p.MaxAttempts, Paused: p.Paused, Rate: p.Rate, LeaseMs: p.Lease.Milliseconds(),
		BackoffInitialMs: p.Backoff.Initial.Milliseconds(), BackoffMaxMs: p.Backoff.Max.Milliseconds(),
		BackoffMultiplier: p.Backoff.Multiplier, BackoffJitter: p.Backoff.Jitter,
		FlowConcurrency: p.Flow.Concurrency, FlowRate: p.Flow.Rate, FlowBurst: p.Flow.Burst, FlowOrdered: p.Flow.Ordered, FlowFair: p.Flow.Fair,
		ExpiryDrop: p.Expiry.Drop, ExpiryUnacked: p.Expiry.Unacked,
	})
	return b
}

// DecodePolicy decodes what EncodePolicy returned (empty: the zero Policy).
func DecodePolicy(b []byte) (Policy, error) {
	if len(b) == 0 {
		return Policy{}, nil
	}
	var j policyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Policy{}, fmt.Errorf("queue: stored policy %q: %w", b, err)
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	var fz []Freeze
	for _, f := range j.Freezes {
		fz = append(fz, Freeze{At: f[0], Until: f[1], Seq: uint64(f[2])})
	}
	return Policy{
		Freezes:     NewFreezes(fz),
		MaxAttempts: j.MaxAttempts, Paused: j.Paused, Rate: j.Rate, Lease: ms(j.LeaseMs),
		Backoff: Backoff{Initial: ms(j.BackoffInitialMs), Max: ms(j.BackoffMaxMs), Multiplier: j.BackoffMultiplier, Jitter: j.BackoffJitter},
		Flow:    Flow{Concurrency: j.FlowConcurrency, Rate: j.FlowRate, Burst: j.FlowBurst, Ordered: j.FlowOrdered, Fair: j.FlowFair},
		Expiry:  Expiry{Drop: j.ExpiryDrop, Unacked: j.ExpiryUnacked},
	}, nil
}

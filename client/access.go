package client

import (
	"context"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Identity is the credential a client's calls are made with.
type Identity struct {
	// Name is the credential's name ("admin" for the server's
	// --auth-token, "anonymous" on a server without credentials).
	Name string
	// Role is its role, or "" when it lists its verbs.
	Role string
	// Verbs and Topics are what it may do, and on which topic patterns.
	Verbs, Topics []string
	// Method is "token", "certificate" or "none".
	Method string
}

// WhoAmI returns the credential the server sees the client's calls as.
func (c *Client) WhoAmI(ctx context.Context) (Identity, error) {
	res, err := c.svc.WhoAmI(ctx, &hourglassv1.WhoAmIRequest{})
	if err != nil {
		return Identity{}, wrap("WhoAmI", err)
	}
	return Identity{Name: res.Name, Role: res.Role, Verbs: res.Verbs, Topics: res.Topics, Method: res.Method}, nil
}

// AuditEntry is one change an operator made, and its result.
type AuditEntry struct {
	Seq                 uint64
	At                  time.Time
	Who, Action, Target string
	Request, Response   string // JSON, bodies left out
	Result, Error, Peer string // Result: "OK" or a status code's name
}

// AuditPage is one page of the audit trail, newest first.
type AuditPage struct {
	Entries []AuditEntry
	// Next is the before of the next (older) page; 0 when none is left.
	Next uint64
}

// Audit returns up to limit entries of the audit trail older than
// before (0: from the newest), newest first; limit 0 means 100.
func (c *Client) Audit(ctx context.Context, before uint64, limit int) (AuditPage, error) {
	res, err := c.svc.ListAudit(ctx, &hourglassv1.ListAuditRequest{BeforeSeq: before, Limit: int32(limit)})
	if err != nil {
		return AuditPage{}, wrap("ListAudit", err)
	}
	p := AuditPage{Next: res.NextBeforeSeq}
	for _, e := range res.Entries {
		p.Entries = append(p.Entries, AuditEntry{Seq: e.Seq, At: e.At.AsTime(), Who: e.Who, Action: e.Action, Target: e.Target,
			Request: e.Request, Response: e.Response, Result: e.Result, Error: e.Error, Peer: e.Peer})
	}
	return p, nil
}

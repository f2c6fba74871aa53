package server

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/audit"
)

// Denied calls recorded in the audit trail: at most deniedRate a second,
// in bursts of deniedBurst. Those beyond are counted, and the next one
// recorded says how many were left out, so that a flood of refused calls
// neither fills the disk nor pushes the operators' changes out of the
// trail (which is bounded by --audit-max-size and --audit-max-age too).
const (
	deniedRate  = 10
	deniedBurst = 100
)

// deniedLog is the bound on denied calls in the trail.
type deniedLog struct {
	lim     *rate.Limiter
	now     func() time.Time // the limiter's clock; tests set it
	skipped atomic.Int64     // denied calls not recorded since the last one that was
}

func newDeniedLog() *deniedLog {
	return &deniedLog{lim: rate.NewLimiter(deniedRate, deniedBurst), now: time.Now}
}

// checkAccess is authorize that records a PermissionDenied in the audit
// trail: who, which RPC, which topics, why.
func (s *Server) checkAccess(ctx context.Context, c *caller, procedure, peer string, m proto.Message, stream bool) error {
	err := authorize(c, procedure, m, stream)
	if err != nil && status.Code(err) == codes.PermissionDenied {
		s.auditDenied(ctx, c, procedure, peer, m, err)
	}
	return err
}

func (s *Server) auditDenied(ctx context.Context, c *caller, procedure, peer string, m proto.Message, err error) {
	if s.opts.Audit == nil {
		return
	}
	if !s.denied.lim.AllowN(s.denied.now(), 1) {
		s.denied.skipped.Add(1)
		return
	}
	who := "anonymous"
	if c != nil {
		who = c.cred.Name
	}
	target := ""
	if r, ok := rules[procedure]; ok && m != nil {
		if ts, named := r.topics(m); named {
			target = strings.Join(ts, ",")
		}
	}
	if n := s.denied.skipped.Swap(0); n > 0 {
		err = status.Errorf(codes.PermissionDenied, "%s (%d denied calls before this one were not recorded: more than %d a second)",
			status.Convert(err).Message(), n, deniedRate)
	}
	s.record(ctx, audit.Entry{Who: who, Action: procedure[strings.LastIndexByte(procedure, '/')+1:], Target: target,
		Request: bodiless(m), Peer: peer}, err)
}

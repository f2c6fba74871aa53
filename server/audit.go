package server

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/audit"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// auditCall records an audited RPC's call in the trail once it is
// answered (rules say which RPCs are operator changes).
func (s *Server) auditCall(ctx context.Context, procedure, peer string, req, res any, err error) {
	r, ok := rules[procedure]
	if !ok || !r.audited || s.opts.Audit == nil {
		return
	}
	who := "anonymous"
	if c := callerOf(ctx); c != nil {
		who = c.cred.Name
	}
	m, _ := req.(proto.Message)
	target := ""
	if m != nil {
		if ts, named := r.topics(m); named {
			target = strings.Join(ts, ",")
		} else {
			target = firstString(m.ProtoReflect(), "id", "name", "schedule")
		}
	}
	var resp proto.Message
	if err == nil {
		resp, _ = res.(proto.Message)
	}
	s.record(ctx, audit.Entry{Who: who, Action: procedure[strings.LastIndexByte(procedure, '/')+1:], Target: target,
		Request: bodiless(m), Response: bodiless(resp), Peer: peer}, err)
}

// auditChange records a change made outside an RPC (a credentials
// reload on SIGHUP).
func (s *Server) auditChange(ctx context.Context, who, action, target string, err error) {
	if s.opts.Audit == nil {
		return
	}
	s.record(ctx, audit.Entry{Who: who, Action: action, Target: target}, err)
}

func (s *Server) record(ctx context.Context, e audit.Entry, err error) {
	e.Result = "OK"
	if err != nil {
		e.Result = strings.ToUpper(connect.Code(status.Code(err)).String())
		if ce := new(connect.Error); errors.As(err, &ce) {
			e.Result = strings.ToUpper(ce.Code().String())
		}
		e.Error = s.paths.text(status.Convert(err).Message())
	}
	if _, aerr := s.opts.Audit.Append(e); aerr != nil {
		// The change is made: its caller hears of it. The operator hears
		// that the trail misses it.
		s.log.ErrorContext(ctx, "audit: a change is not in the audit trail", "who", e.Who, "action", e.Action, "target", e.Target, "err", aerr)
	}
}

// firstString returns the first of the named fields m sets: a string, or
// a message's "name".
func firstString(m protoreflect.Message, names ...string) string {
	for _, n := range names {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(n))
		if fd == nil || !m.Has(fd) {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			return m.Get(fd).String()
		case protoreflect.MessageKind:
			if v := firstString(m.Get(fd).Message(), "name"); v != "" {
				return v
			}
		}
	}
	return ""
}

// bodiless is m as JSON without its bytes fields (message bodies).
func bodiless(m proto.Message) string {
	if m == nil {
		return ""
	}
	m = proto.Clone(m)
	clearBytes(m.ProtoReflect())
	b, err := protojson.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

func clearBytes(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.BytesKind && !fd.IsList():
			m.Clear(fd)
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			clearBytes(v.Message())
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := range l.Len() {
				clearBytes(l.Get(i).Message())
			}
		}
		return true
	})
}

// ListAudit answers a page of the audit trail, newest first.
func (a api) ListAudit(ctx context.Context, r *hourglassv1.ListAuditRequest) (*hourglassv1.ListAuditResponse, error) {
	if a.opts.Audit == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server keeps no audit trail (an embedded node without server.Options.Audit)")
	}
	limit := int(r.GetLimit())
	if limit < 0 || limit > 1000 {
		return nil, invalid("limit %d: from 1 to 1000, or 0 for 100", limit)
	}
	if limit == 0 {
		limit = 100
	}
	entries, more, err := a.opts.Audit.List(r.GetBeforeSeq(), limit)
	if err != nil {
		return nil, status.Error(codes.DataLoss, a.paths.text(err.Error()))
	}
	res := &hourglassv1.ListAuditResponse{}
	for _, e := range entries {
		res.Entries = append(res.Entries, &hourglassv1.AuditEntry{Seq: e.Seq, At: timestamppb.New(e.At), Who: e.Who, Action: e.Action,
			Target: e.Target, Request: e.Request, Response: e.Response, Result: e.Result, Error: e.Error, Peer: e.Peer})
	}
	if more && len(entries) > 0 {
		res.NextBeforeSeq = entries[len(entries)-1].Seq
	}
	return res, nil
}

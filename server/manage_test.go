package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/message"
)

// manageAPI is Get and List over one protocol.
type manageAPI struct {
	schedule func(context.Context, *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error)
	cancel   func(context.Context, *hourglassv1.CancelRequest) (*hourglassv1.CancelResponse, error)
	get      func(context.Context, *hourglassv1.GetRequest) (*hourglassv1.GetResponse, error)
	list     func(context.Context, *hourglassv1.ListRequest) (*hourglassv1.ListResponse, error)
}

func manageProtocols(t *testing.T, s *served) []struct {
	name string
	api  manageAPI
} {
	g := s.grpcClient(t)
	viaC := func(c hourglassv1connect.HourglassServiceClient) manageAPI {
		return manageAPI{viaConnect(c.Schedule), viaConnect(c.Cancel), viaConnect(c.Get), viaConnect(c.List)}
	}
	return []struct {
		name string
		api  manageAPI
	}{
		{"grpc", manageAPI{viaGRPC(g.Schedule), viaGRPC(g.Cancel), viaGRPC(g.Get), viaGRPC(g.List)}},
		{"connect", viaC(s.connectClient(t))},
		{"connect-json", viaC(s.connectClient(t, connect.WithProtoJSON()))},
		{"grpc-web", viaC(s.connectClient(t, connect.WithGRPCWeb()))},
	}
}

// TestGetListEveryProtocol schedules, cancels, looks up and lists over
// every protocol, and checks the bad input each refuses.
func TestGetListEveryProtocol(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	ctx := testCtx(t)
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, p := range manageProtocols(t, s) {
		t.Run(p.name, func(t *testing.T) {
			a := p.api
			topic := "gl-" + p.name
			var ids []string
			for i := range 7 {
				res, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprint(i)),
					When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(base.Add(time.Duration(6-i) * time.Second))}})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.Id)
			}
			g, err := a.get(ctx, &hourglassv1.GetRequest{Id: ids[2]})
			if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || string(g.Message.Body) != "2" || g.Message.Topic != topic {
				t.Fatalf("Get = %v, %v; want pending body 2", g, err)
			}
			if _, err := a.cancel(ctx, &hourglassv1.CancelRequest{Id: ids[3]}); err != nil {
				t.Fatal(err)
			}
			if g, err := a.get(ctx, &hourglassv1.GetRequest{Id: ids[3]}); err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
				t.Errorf("Get after Cancel = %v, %v; want cancelled", g, err)
			}
			// Pages of 2 in delivery order: bodies 6, 5, 4, (3 cancelled), 2, 1, 0.
			var got []string
			token := ""
			for range 10 {
				res, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, PageSize: 2, PageToken: token})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range res.Messages {
					got = append(got, string(m.Body))
				}
				if token = res.NextPageToken; token == "" {
					break
				}
			}
			if want := "6 5 4 2 1 0"; strings.Join(got, " ") != want {
				t.Errorf("List pages = %q, want %q", got, want)
			}
			res, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, From: timestamppb.New(base.Add(2 * time.Second)), To: timestamppb.New(base.Add(5 * time.Second))})
			if err != nil || len(res.Messages) != 2 || string(res.Messages[0].Body) != "4" || string(res.Messages[1].Body) != "2" || res.NextPageToken != "" {
				t.Errorf("List [2s, 5s) = %v, %v; want bodies 4 and 2, no next page", res, err)
			}

			for _, tc := range []struct {
				name string
				call func() error
				msg  string
			}{
				{"get_bad_id", func() error { _, err := a.get(ctx, &hourglassv1.GetRequest{Id: "zz"}); return err }, "id"},
				{"list_from_after_to", func() error {
					_, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, From: timestamppb.New(base), To: timestamppb.New(base.Add(-time.Second))})
					return err
				}, "from must not be after to"},
				{"list_page_size", func() error {
					_, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, PageSize: 1001})
					return err
				}, "from 1 to 1000"},
				{"list_state", func() error {
					_, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_CANCELLED})
					return err
				}, "List lists PENDING (the default), DUE, LEASED or DEAD_LETTERED"},
				{"list_token", func() error {
					_, err := a.list(ctx, &hourglassv1.ListRequest{Topic: topic, PageToken: "x"})
					return err
				}, "page_token"},
				{"list_no_topic", func() error { _, err := a.list(ctx, &hourglassv1.ListRequest{}); return err }, "topic"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					err := tc.call()
					if st, _ := status.FromError(err); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.msg) {
						t.Errorf("got %v (%v), want InvalidArgument saying %q", err, st, tc.msg)
					}
				})
			}
		})
	}
}

// TestManageCluster: on a cluster node Get, Reschedule and Cancel, by ID
// and by topic and key, reach the node (the forwarded mark with them),
// with the node's answers; List passes the node's page tokens through
// (a bad one: the node's InvalidArgument), and Purge of pending messages
// cancels what the node lists.
func TestManageCluster(t *testing.T) {
	fc := newFakeCluster(true, nil)
	s := serveTest(t, Options{Cluster: fc, ExternalSink: "nats"}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	keyed, moved := fakeKeyed.String(), message.ID{DeliverAt: 1 << 41, Seq: 8}.String()

	g, err := c.Get(ctx, &hourglassv1.GetRequest{Id: keyed})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || g.Message.GetId() != keyed || string(g.Message.GetBody()) != "b" {
		t.Errorf("Get by id = %v, %v; want pending with its message", g, err)
	}
	g, err = c.Get(ctx, &hourglassv1.GetRequest{Id: moved})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || g.RescheduledTo != keyed || g.Message.GetId() != keyed {
		t.Errorf("Get of a rescheduled one = %v, %v; want its replacement %s, pending, as on one node", g, err, keyed)
	}
	g, err = c.Get(ctx, &hourglassv1.GetRequest{Topic: "t", Key: "k"})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || g.Message.GetId() != keyed {
		t.Errorf("Get by key = %v, %v", g, err)
	}
	g, err = c.Get(ctx, &hourglassv1.GetRequest{Topic: "t", Key: "other"})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND {
		t.Errorf("Get of an unknown key = %v, %v; want not found", g, err)
	}
	r, err := c.Reschedule(ctx, &hourglassv1.RescheduleRequest{Topic: "t", Key: "k", When: &hourglassv1.RescheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.UnixMilli(1 << 42))}})
	if err != nil || r.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED || r.Id != (message.ID{DeliverAt: 1 << 42, Seq: 9}).String() {
		t.Errorf("Reschedule by key = %v, %v", r, err)
	}
	r, err = c.Reschedule(ctx, &hourglassv1.RescheduleRequest{Id: moved, When: &hourglassv1.RescheduleRequest_Now{Now: true}})
	if err != nil || r.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_UNKNOWN {
		t.Errorf("Reschedule by id = %v, %v; want unknown", r, err)
	}
	// A forwarded request carries the mark to the node.
	fwd := metadata.AppendToOutgoingContext(ctx, ForwardedHeader, "a")
	if _, err := c.Cancel(fwd, &hourglassv1.CancelRequest{Topic: "t", Key: "k"}); err != nil {
		t.Errorf("forwarded Cancel by key: %v", err)
	}
	l, err := c.List(ctx, &hourglassv1.ListRequest{Topic: "t", PageSize: 5})
	if err != nil || len(l.Messages) != 1 || l.Messages[0].Id != keyed || l.NextPageToken != "next" {
		t.Errorf("List = %v, %v; want the keyed message and the node's token", l, err)
	}
	l, err = c.List(fwd, &hourglassv1.ListRequest{Topic: "t", PageToken: "next"})
	if err != nil || len(l.Messages) != 0 || l.NextPageToken != "" {
		t.Errorf("List of the next page = %v, %v; want nothing more", l, err)
	}
	_, err = c.List(ctx, &hourglassv1.ListRequest{Topic: "t", PageToken: "bad"})
	wantStatus(t, "List with a bad token", err, codes.InvalidArgument, "page_token")
	_, err = c.List(ctx, &hourglassv1.ListRequest{Topic: "t", PageSize: 1001})
	wantStatus(t, "List of 1001", err, codes.InvalidArgument, "page_size")
	p, err := c.Purge(ctx, &hourglassv1.PurgeRequest{Topic: "t", State: hourglassv1.MessageState_MESSAGE_STATE_PENDING})
	if err != nil || p.Purged != 1 {
		t.Errorf("Purge of pending = %v, %v; want 1 purged", p, err)
	}

	fc.mmu.Lock()
	defer fc.mmu.Unlock()
	want := []string{
		"Get " + keyed + " false", "Get " + moved + " false", "Get " + keyed + " false", "Lookup t k false", "Get " + keyed + " false", "Lookup t other false",
		"Lookup t k false", fmt.Sprintf("Reschedule %s %d false", keyed, int64(1<<42)),
		"Reschedule " + moved, // the time is the node's now
		"Lookup t k true", "Cancel " + keyed + " true",
		`List t 5 "" false`, `List t 100 "next" true`, `List t 100 "bad" false`,
		`List t 1000 "" false`, "Cancel " + keyed + " false", `List t 1000 "next" false`,
	}
	if len(fc.manage) != len(want) {
		t.Fatalf("the node saw %q; want %q", fc.manage, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(fc.manage[i], w) {
			t.Errorf("call %d reached the node as %q; want %q", i, fc.manage[i], w)
		}
	}
}

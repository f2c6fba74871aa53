package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
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

// TestGetListCluster: a cluster node answers Unimplemented, saying so.
func TestGetListCluster(t *testing.T) {
	s := serveTest(t, Options{Cluster: newFakeCluster(true, nil)}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	_, err := c.Get(ctx, &hourglassv1.GetRequest{Id: "0000019bd6a1f2c00000000000001f40"})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "cluster mode") {
		t.Errorf("Get on a cluster = %v, want Unimplemented saying cluster mode", err)
	}
	_, err = c.List(ctx, &hourglassv1.ListRequest{Topic: "t"})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "cluster mode") {
		t.Errorf("List on a cluster = %v, want Unimplemented saying cluster mode", err)
	}
}

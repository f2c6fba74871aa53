package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// accessCall is one RPC as the role matrix makes it: the verb the test
// expects it to need (written here, not read from the server's table),
// and a call on topic whose error tells denied from allowed.
type accessCall struct {
	rpc  string
	verb access.Verb // "" any credential
	call func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error
}

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

var accessCalls = []accessCall{
	{"Schedule", access.Produce, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(3_600_000)}))
		return err
	}},
	{"ScheduleBatch", access.Produce, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ScheduleBatch(ctx, req(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{Topic: topic, When: delayMs(3_600_000)}}}))
		return err
	}},
	{"ScheduleStream", access.Produce, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		st := c.ScheduleStream(ctx)
		defer st.CloseResponse()
		if err := st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(3_600_000)}}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		st.CloseRequest()
		_, err := st.Receive()
		return err
	}},
	{"Cancel", access.Cancel, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Cancel(ctx, req(&hourglassv1.CancelRequest{Topic: topic, Key: "k"}))
		return err
	}},
	{"Receive", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Receive(ctx, req(&hourglassv1.ReceiveRequest{Topic: topic}))
		return err
	}},
	{"ReceiveStream", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		st, err := c.ReceiveStream(ctx, req(&hourglassv1.ReceiveStreamRequest{Topic: topic + ".due"}))
		if err != nil {
			return err
		}
		defer st.Close()
		if !st.Receive() { // a message is due there (seeded): allowed answers at once
			return st.Err()
		}
		return nil
	}},
	{"Consume", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		st := c.Consume(ctx)
		defer st.CloseResponse()
		if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{Topic: topic + ".due2", Credits: 1}}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err := st.Receive()
		return err
	}},
	{"Ack", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Ack(ctx, req(&hourglassv1.AckRequest{Topic: topic, Receipt: "x"}))
		return err
	}},
	{"AckBatch", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.AckBatch(ctx, req(&hourglassv1.AckBatchRequest{Topic: topic, Receipts: []string{"x"}}))
		return err
	}},
	{"Nack", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Nack(ctx, req(&hourglassv1.NackRequest{Topic: topic, Receipt: "x"}))
		return err
	}},
	{"Extend", access.Consume, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Extend(ctx, req(&hourglassv1.ExtendRequest{Topic: topic, Receipt: "x", LeaseMs: 1000}))
		return err
	}},
	{"Stats", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Stats(ctx, req(&hourglassv1.StatsRequest{}))
		return err
	}},
	{"Time", "", func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Time(ctx, req(&hourglassv1.TimeRequest{}))
		return err
	}},
	{"Get", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Get(ctx, req(&hourglassv1.GetRequest{Topic: topic, Key: "k"}))
		return err
	}},
	{"List", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.List(ctx, req(&hourglassv1.ListRequest{Topic: topic}))
		return err
	}},
	{"Reschedule", access.Cancel, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Reschedule(ctx, req(&hourglassv1.RescheduleRequest{Topic: topic, Key: "k", When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 1000}}))
		return err
	}},
	{"Edit", access.Cancel, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Edit(ctx, req(&hourglassv1.EditRequest{Topic: topic, Key: "k", Body: []byte("edited")}))
		return err
	}},
	{"FreezeMessage", access.Cancel, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.FreezeMessage(ctx, req(&hourglassv1.FreezeMessageRequest{Topic: topic, Key: "k"}))
		return err
	}},
	{"ThawMessage", access.Cancel, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ThawMessage(ctx, req(&hourglassv1.ThawMessageRequest{Topic: topic, Key: "k"}))
		return err
	}},
	{"Redrive", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Redrive(ctx, req(&hourglassv1.RedriveRequest{DeadLetterTopic: topic + ".dlq"}))
		return err
	}},
	{"Purge", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Purge(ctx, req(&hourglassv1.PurgeRequest{Topic: topic + ".none", State: hourglassv1.MessageState_MESSAGE_STATE_DUE}))
		return err
	}},
	{"DeleteTopic", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.DeleteTopic(ctx, req(&hourglassv1.DeleteTopicRequest{Topic: topic + ".none"}))
		return err
	}},
	{"Topics", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.Topics(ctx, req(&hourglassv1.TopicsRequest{}))
		return err
	}},
	{"GetPolicy", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.GetPolicy(ctx, req(&hourglassv1.GetPolicyRequest{Topic: topic}))
		return err
	}},
	{"SetPolicy", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		n := int32(3)
		_, err := c.SetPolicy(ctx, req(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{MaxAttempts: &n}}))
		return err
	}},
	{"CreateSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.CreateSchedule(ctx, req(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: topic, Topic: topic, Spec: "@every 1h"}}))
		return err
	}},
	{"UpdateSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.UpdateSchedule(ctx, req(&hourglassv1.UpdateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: topic, Topic: topic, Spec: "@every 2h"}}))
		return err
	}},
	{"PauseSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.PauseSchedule(ctx, req(&hourglassv1.PauseScheduleRequest{Name: topic}))
		return err
	}},
	{"ResumeSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ResumeSchedule(ctx, req(&hourglassv1.ResumeScheduleRequest{Name: topic}))
		return err
	}},
	{"GetSchedule", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.GetSchedule(ctx, req(&hourglassv1.GetScheduleRequest{Name: topic}))
		return err
	}},
	{"ListSchedules", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ListSchedules(ctx, req(&hourglassv1.ListSchedulesRequest{}))
		return err
	}},
	{"DeleteSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.DeleteSchedule(ctx, req(&hourglassv1.DeleteScheduleRequest{Name: topic}))
		return err
	}},
	{"BackfillSchedule", access.Schedule, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		now := time.Now()
		_, err := c.BackfillSchedule(ctx, req(&hourglassv1.BackfillScheduleRequest{Name: topic, From: timestamppb.New(now.Add(-time.Hour)), To: timestamppb.New(now)}))
		return err
	}},
	{"CreateCalendar", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.CreateCalendar(ctx, req(&hourglassv1.CreateCalendarRequest{Calendar: accessCalendar(topic)}))
		return err
	}},
	{"UpdateCalendar", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.UpdateCalendar(ctx, req(&hourglassv1.UpdateCalendarRequest{Calendar: accessCalendar(topic)}))
		return err
	}},
	{"GetCalendar", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.GetCalendar(ctx, req(&hourglassv1.GetCalendarRequest{Name: topic}))
		return err
	}},
	{"ListCalendars", access.Read, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ListCalendars(ctx, req(&hourglassv1.ListCalendarsRequest{}))
		return err
	}},
	{"DeleteCalendar", access.Manage, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.DeleteCalendar(ctx, req(&hourglassv1.DeleteCalendarRequest{Name: topic}))
		return err
	}},
	{"WhoAmI", "", func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.WhoAmI(ctx, req(&hourglassv1.WhoAmIRequest{}))
		return err
	}},
	{"ListAudit", access.Audit, func(ctx context.Context, c hourglassv1connect.HourglassServiceClient, topic string) error {
		_, err := c.ListAudit(ctx, req(&hourglassv1.ListAuditRequest{}))
		return err
	}},
}

// accessCalendar is a calendar named name: Monday to Friday, 09:00-17:00.
func accessCalendar(name string) *hourglassv1.Calendar {
	cal := &hourglassv1.Calendar{Name: name}
	for d := hourglassv1.Weekday_WEEKDAY_MONDAY; d <= hourglassv1.Weekday_WEEKDAY_FRIDAY; d++ {
		cal.Hours = append(cal.Hours, &hourglassv1.WorkingHours{Day: d, Start: "09:00", End: "17:00"})
	}
	return cal
}

// roleVerbs are the roles as docs/API.md ("Auth") states them.
var roleVerbs = map[string][]access.Verb{
	"admin":    {access.Produce, access.Consume, access.Cancel, access.Read, access.Manage, access.Schedule, access.Audit},
	"producer": {access.Produce, access.Cancel, access.Read},
	"consumer": {access.Consume, access.Read},
	"viewer":   {access.Read, access.Audit},
}

// writeCredentials writes a credentials file of one token per role
// ("<role>-token"), each on every topic, and extra entries.
func writeCredentials(t *testing.T, path string, extra string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("credentials:\n")
	for _, role := range []string{"admin", "producer", "consumer", "viewer"} {
		fmt.Fprintf(&b, "  - {name: %s, token_sha256: %q, role: %s, topics: [\"*\"]}\n", role+"-cred", access.Digest(role+"-token"), role)
	}
	b.WriteString(extra)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// protocolClients are a client per protocol with token, over h2c (the
// bidirectional streams need HTTP/2 on every protocol).
func protocolClients(p *proc, token string) map[string]hourglassv1connect.HourglassServiceClient {
	// A connection per protocol: the server hands a connection whose first
	// request is gRPC to grpc-go, which serves gRPC only.
	h2c := func() *http.Client {
		var h2 http.Protocols
		h2.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: &http.Transport{Protocols: &h2}}
	}
	auth := connect.WithInterceptors(bearerAuth(token))
	return map[string]hourglassv1connect.HourglassServiceClient{
		"grpc":     hourglassv1connect.NewHourglassServiceClient(h2c(), p.url, connect.WithGRPC(), auth),
		"connect":  hourglassv1connect.NewHourglassServiceClient(h2c(), p.url, auth),
		"grpc_web": hourglassv1connect.NewHourglassServiceClient(h2c(), p.url, connect.WithGRPCWeb(), auth),
	}
}

// bearerAuth adds "Authorization: Bearer token" to every call.
type bearerAuth string

func (b bearerAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		r.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, r)
	}
}

func (b bearerAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearerAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// TestAccessRoles: each role × each RPC over gRPC, Connect and gRPC-Web,
// unary and streams, through the binary: allowed (any answer but
// PermissionDenied) when the role has the RPC's verb, else
// PermissionDenied naming the verb.
func TestAccessRoles(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	writeCredentials(t, creds, "")
	p := start(t, t.TempDir(), nil, "--credentials", creds, "--auth-token", "sesame")
	ctx := ctxT(t)
	admin := protocolClients(p, "sesame")["connect"]
	for role := range roleVerbs {
		for proto := range protocolClients(p, "") {
			topic := "acc-" + role + "-" + strings.ReplaceAll(proto, "_", "-")
			// ReceiveStream and Consume find a due message at once.
			for _, tp := range []string{topic + ".due", topic + ".due2"} {
				if _, err := admin.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: tp})); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for role, verbs := range roleVerbs {
		for proto, c := range protocolClients(p, role+"-token") {
			t.Run(role+"/"+proto, func(t *testing.T) {
				topic := "acc-" + role + "-" + strings.ReplaceAll(proto, "_", "-")
				for _, ac := range accessCalls {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := ac.call(cctx, c, topic)
					cancel()
					allowed := ac.verb == "" || slices.Contains(verbs, ac.verb)
					denied := connect.CodeOf(err) == connect.CodePermissionDenied
					switch {
					case allowed && denied:
						t.Errorf("%s: %v; %s may %s", ac.rpc, err, role, ac.verb)
					case !allowed && !denied:
						t.Errorf("%s: %v; want PermissionDenied (%s may not %s)", ac.rpc, err, role, ac.verb)
					case denied && !strings.Contains(err.Error(), "may not "+string(ac.verb)):
						t.Errorf("%s: %v; want the verb %s named", ac.rpc, err, ac.verb)
					case connect.CodeOf(err) == connect.CodeUnauthenticated || connect.CodeOf(err) == connect.CodeDeadlineExceeded:
						t.Errorf("%s: %v", ac.rpc, err)
					}
				}
			})
		}
	}
	// Every RPC of the schema is in the matrix.
	methods := hourglassv1.File_hourglass_v1_hourglass_proto.Services().ByName("HourglassService").Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		if !slices.ContainsFunc(accessCalls, func(a accessCall) bool { return a.rpc == name }) {
			t.Errorf("%s is not in the matrix", name)
		}
	}
}

// TestAccessScoped: a credential's topic patterns, a wrong token, the
// metrics endpoint and a reload on SIGHUP.
func TestAccessScoped(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	scoped := "  - {name: orders-producer, token_sha256: \"" + access.Digest("orders-token") + "\", role: producer, topics: [\"orders\", \"orders.*\"]}\n" +
		"  - {name: producer-only, token_sha256: \"" + access.Digest("produce-token") + "\", verbs: [produce], topics: [\"*\"]}\n"
	writeCredentials(t, creds, scoped)
	p := start(t, t.TempDir(), nil, "--credentials", creds)
	ctx := ctxT(t)
	for proto, c := range protocolClients(p, "orders-token") {
		t.Run(proto, func(t *testing.T) {
			if _, err := c.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: "orders.eu", When: delayMs(60_000)})); err != nil {
				t.Errorf("Schedule to orders.eu: %v", err)
			}
			_, err := c.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: "payments", When: delayMs(60_000)}))
			if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `credential "orders-producer" may not produce on topic "payments": its topics are orders, orders.*`) {
				t.Errorf("Schedule to payments: %v; want PermissionDenied naming the verb, the topic and the patterns", err)
			}
			_, err = c.Cancel(ctx, req(&hourglassv1.CancelRequest{Id: "000001a248329f5c0000000000000000", Topic: "orders"}))
			if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "may not cancel on every topic") {
				t.Errorf("Cancel by id: %v; want PermissionDenied (an id may be any topic's)", err)
			}
			st := c.ScheduleStream(ctx)
			st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: "orders", When: delayMs(60_000)}}})
			st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: "payments", When: delayMs(60_000)}}})
			st.CloseRequest()
			var last error
			for last == nil {
				_, last = st.Receive()
			}
			st.CloseResponse()
			if connect.CodeOf(last) != connect.CodePermissionDenied || !strings.Contains(last.Error(), `topic "payments"`) {
				t.Errorf("ScheduleStream's second message: %v; want PermissionDenied naming payments", last)
			}
			_, err = protocolClients(p, "nobody")[proto].Time(ctx, req(&hourglassv1.TimeRequest{}))
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "wrong bearer token") {
				t.Errorf("a wrong token: %v; want Unauthenticated", err)
			}
			res, err := c.WhoAmI(ctx, req(&hourglassv1.WhoAmIRequest{}))
			if err != nil || res.Msg.Name != "orders-producer" || res.Msg.Role != "producer" || res.Msg.Method != "token" ||
				!slices.Equal(res.Msg.Verbs, []string{"produce", "cancel", "read"}) {
				t.Errorf("WhoAmI: %v %v", res, err)
			}
		})
	}
	metrics := func(token string) int {
		r, _ := http.NewRequest("GET", p.url+"/metrics", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := metrics("viewer-token"); got != 200 {
		t.Errorf("/metrics as viewer: %d", got)
	}
	if got := metrics("produce-token"); got != 403 {
		t.Errorf("/metrics as a credential without read: %d, want 403", got)
	}
	if got := metrics(""); got != 401 {
		t.Errorf("/metrics without a credential: %d, want 401", got)
	}

	// SIGHUP: a bad file keeps the credentials; a good one replaces them.
	if err := os.WriteFile(creds, []byte("credentials: [{name: x}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "credentials not reloaded")
	if _, err := protocolClients(p, "viewer-token")["connect"].Time(ctx, req(&hourglassv1.TimeRequest{})); err != nil {
		t.Errorf("after a bad reload, the viewer: %v", err)
	}
	os.WriteFile(creds, []byte("credentials:\n  - {name: new, token_sha256: \""+access.Digest("new-token")+"\", role: viewer, topics: [\"*\"]}\n"), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "credentials reloaded")
	if _, err := protocolClients(p, "new-token")["grpc"].Time(ctx, req(&hourglassv1.TimeRequest{})); err != nil {
		t.Errorf("the reloaded credential: %v", err)
	}
	if _, err := protocolClients(p, "viewer-token")["grpc"].Time(ctx, req(&hourglassv1.TimeRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a credential the reload removed: %v; want Unauthenticated", err)
	}
}

// waitLog waits until the server's log holds s.
func waitLog(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.log(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log has no %q after 20s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// reservedHeaders are headers the server gives a meaning to (and a made-up
// one of the same prefix, in another letter case): each is refused from a
// client.
var reservedHeaders = []string{
	"hourglass-idempotency-key", "hourglass-idempotency-at", "hourglass-flow-key", "hourglass-schedule", "hourglass-occurrence",
	"hourglass-dead-letter-origin", "hourglass-dead-letter-reason", "hourglass-dead-letter-error",
	"hourglass-dead-lettered-at", "hourglass-last-error", "hourglass-cluster-id", "hourglass-replaces",
	"hourglass-traceparent", "hourglass-tracestate",
	"Hourglass-Something-New",
}

// wantReserved checks that err refuses the header key as reserved.
func wantReserved(t *testing.T, what string, code codes.Code, msg, key string) {
	t.Helper()
	if code != codes.InvalidArgument || !strings.Contains(msg, key) || !strings.Contains(msg, `prefix "hourglass-" is reserved`) {
		t.Errorf("%s with the header %s: %v %q; want InvalidArgument naming the header and the reserved prefix", what, key, code, msg)
	}
}

// connectErr is err's code and message; OK and "" for nil.
func connectErr(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	return codes.Code(connect.CodeOf(err)), err.Error()
}

// TestReservedHeaders: a client cannot set a header the server gives a
// meaning to, on any protocol or call that takes headers; the report's
// attack (a Schedule carrying a spoofed idempotency key and time, then a
// restart) leaves the real keyed Schedule stored under an ID of its own.
func TestReservedHeaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	ctx := ctxT(t)
	msg := func(topic, key string) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(3_600_000),
			Headers: []*hourglassv1.Header{{Key: "ok", Value: "1"}, {Key: key, Value: "99999999999999"}}}
	}
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2}}
	protocols := map[string]hourglassv1connect.HourglassServiceClient{
		"connect_json":   hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url, connect.WithProtoJSON()),
		"connect_binary": p.client,
		"grpc_web":       hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url, connect.WithGRPCWeb()),
		"grpc":           hourglassv1connect.NewHourglassServiceClient(h2c, p.url, connect.WithGRPC()),
	}
	for name, c := range protocols {
		t.Run(name, func(t *testing.T) {
			for _, key := range reservedHeaders {
				_, err := c.Schedule(ctx, connect.NewRequest(msg("spoof-"+name, key)))
				code, text := connectErr(err)
				wantReserved(t, name+" Schedule", code, text, key)
				_, err = c.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
					{Topic: "spoof-" + name}, msg("spoof-"+name, key)}}))
				code, text = connectErr(err)
				wantReserved(t, name+" ScheduleBatch", code, text, key)
				if err != nil && !strings.Contains(text, "messages[1]") {
					t.Errorf("%s ScheduleBatch: %v; want the message named", name, err)
				}
				_, err = c.CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
					Name: "s-" + name, Topic: "spoof-" + name, Spec: "@every 1h", Headers: msg("", key).Headers}}))
				code, text = connectErr(err)
				wantReserved(t, name+" CreateSchedule", code, text, key)
			}
		})
	}
	t.Run("grpc_schedule_stream", func(t *testing.T) {
		st := protocols["grpc"].ScheduleStream(ctx)
		for _, key := range reservedHeaders {
			if err := st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: msg("spoof-stream", key)}}); err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Batch{Batch: &hourglassv1.ScheduleBatchRequest{
				Messages: []*hourglassv1.ScheduleRequest{msg("spoof-stream", key)}}}}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				res, err := st.Receive()
				if err != nil {
					t.Fatal(err)
				}
				e := res.GetError()
				if e == nil {
					t.Fatalf("ScheduleStream with the header %s: %v; want an error", key, res)
				}
				wantReserved(t, "ScheduleStream", codes.Code(e.Code), e.Message, key)
			}
		}
		st.CloseRequest()
		st.CloseResponse()
	})
	t.Run("go_client", func(t *testing.T) {
		c := newClient(t, p)
		_, err := c.Schedule(ctx, client.Message{Topic: "spoof-go", Delay: time.Hour, Headers: map[string]string{"hourglass-idempotency-key": "order-42"}})
		wantReserved(t, "client.Schedule", status.Code(err), status.Convert(err).Message(), "hourglass-idempotency-key")
		prod := client.NewProducer(c, client.ProducerOptions{})
		defer prod.Close()
		_, err = prod.Send(ctx, client.Message{Topic: "spoof-go", Delay: time.Hour, Headers: map[string]string{"hourglass-schedule": "x"}}).Wait(ctx)
		wantReserved(t, "Producer.Send", status.Code(err), status.Convert(err).Message(), "hourglass-schedule")
	})

	// The report's attack, over Connect-JSON as it was sent.
	spoof := `{"topic":"spoof","delayMs":"3600000","headers":[{"key":"hourglass-idempotency-key","value":"order-42"},{"key":"hourglass-idempotency-at","value":"99999999999999"}]}`
	resp, err := http.Post(p.url+hourglassv1connect.HourglassServiceScheduleProcedure, "application/json", strings.NewReader(spoof))
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 400 || out.Code != "invalid_argument" || !strings.Contains(out.Message, "hourglass-idempotency-key") {
		t.Errorf("the spoofed Schedule: %d %+v; want 400 invalid_argument naming the header", resp.StatusCode, out)
	}
	p.stop(syscall.SIGTERM)
	p = start(t, dir, nil)
	real := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "spoof", When: delayMs(60_000), IdempotencyKey: "order-42", Body: []byte("real")})
	got, err := p.client.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{Id: real}))
	if err != nil || got.Msg.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || string(got.Msg.Message.GetBody()) != "real" {
		t.Fatalf("Get of the real keyed Schedule %s: %v %v; want it pending with its own body", real, got, err)
	}
	if again := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "spoof", When: delayMs(60_000), IdempotencyKey: "order-42"}); again != real {
		t.Errorf("the keyed Schedule sent again: %s; want the first one's ID %s", again, real)
	}
	for name := range protocols {
		if n := scheduledTo(t, p.client, "spoof-"+name); n != 0 {
			t.Errorf("%d messages stored on spoof-%s; want none", n, name)
		}
	}
}

// scheduledTo counts a topic's pending messages with List.
func scheduledTo(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string) int {
	t.Helper()
	res, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageSize: 1000}))
	if err != nil {
		t.Fatalf("List(%s): %v", topic, err)
	}
	return len(res.Msg.Messages)
}

package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/natstest"
	"github.com/hourglassmq/hourglass/message"
)

// TestWebhookSink: the real binary posts due messages to the route's URL,
// never early; a topic whose endpoint always fails ends in <topic>.dlq
// after --max-attempts, where Receive gets it.
func TestWebhookSink(t *testing.T) {
	type post struct {
		at    time.Time
		topic string
		body  string
	}
	posts := make(chan post, 100)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		topic := r.Header.Get("Hourglass-Topic")
		posts <- post{time.Now(), topic, string(b)}
		if topic == "hook-bad" {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer hook.Close()
	p := start(t, t.TempDir(), nil, "--sink", "webhook", "--webhook", "hook-*="+hook.URL, "--max-attempts", "2")
	at := time.Now().Add(300 * time.Millisecond)
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "hook-ok", Body: []byte("hi"),
		When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 300}})
	select {
	case got := <-posts:
		if got.topic != "hook-ok" || got.body != "hi" || got.at.Before(at) {
			t.Fatalf("POST %+v; want hook-ok/hi no earlier than %v", got, at)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no POST within 20s")
	}
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "hook-bad", Body: []byte("doomed")})
	for i := range 2 { // two attempts, a second apart
		select {
		case got := <-posts:
			if got.topic != "hook-bad" {
				t.Fatalf("attempt %d: POST %+v", i, got)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d: no POST within 20s", i)
		}
	}
	_, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "hook-ok", MaxMessages: 1}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "webhook sink") {
		t.Errorf("Receive of a webhook topic: %v; want FailedPrecondition naming the webhook sink", err)
	}
	res, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "hook-bad.dlq", MaxMessages: 10, WaitMs: 20_000}))
	if err != nil || len(res.Msg.Messages) != 1 || string(res.Msg.Messages[0].Body) != "doomed" {
		t.Fatalf("dead letters: %v, %v; want the doomed message", res, err)
	}
	p.stop(syscall.SIGTERM)
}

// TestNATSSink: the real binary publishes due messages to a real
// nats-server's JetStream, one copy per ID, never early.
func TestNATSSink(t *testing.T) {
	ns := natstest.Start(t)
	p := start(t, t.TempDir(), nil, "--sink", "nats", "--nats-url", ns.ClientURL())
	due := map[string]time.Time{}
	for range 10 {
		id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("x"),
			When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 200}})
		mid, err := message.ParseID(id)
		if err != nil {
			t.Fatal(err)
		}
		due[id] = mid.Time()
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, "HOURGLASS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"hourglass.orders"}})
	if err != nil {
		t.Fatal(err)
	}
	for len(due) > 0 {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("%d messages not published: %v", len(due), err)
		}
		id := m.Headers().Get("Hourglass-Id")
		md, _ := m.Metadata()
		if _, ok := due[id]; !ok {
			t.Fatalf("unexpected or repeated message %q", id)
		}
		if md.Timestamp.Before(due[id]) {
			t.Errorf("%s stored at %v, %v before it was due", id, md.Timestamp, due[id].Sub(md.Timestamp))
		}
		delete(due, id)
	}
	p.stop(syscall.SIGTERM)
}

// TestIdempotentRetryAcrossKill9: a producer that lost the answer to a
// Schedule (the server was killed) retries it with the same key after the
// restart and gets the same ID; one message is delivered.
func TestIdempotentRetryAcrossKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	req := &hourglassv1.ScheduleRequest{Topic: "idem", Body: []byte("once"), IdempotencyKey: "order-42", When: delayMs(500)}
	first := schedule(t, p.client, req)
	if again := schedule(t, p.client, req); again != first {
		t.Fatalf("retry before the kill: %s, want %s", again, first)
	}
	p.stop(syscall.SIGKILL)
	p2 := start(t, dir, nil)
	if again := schedule(t, p2.client, req); again != first {
		t.Fatalf("retry after kill -9: %s, want %s", again, first)
	}
	got := receive(t, p2.client, "idem", 1, 20*time.Second)
	if len(got) != 1 || got[0].m.Id != first {
		t.Fatalf("received %v, want %s", bodies(got), first)
	}
	if k := headerValue(got[0].m, "hourglass-idempotency-key"); k != "order-42" {
		t.Errorf("delivered with idempotency header %q, want order-42", k)
	}
	ack(t, p2.client, "idem", first)
	receiveNone(t, p2.client, "idem", 700*time.Millisecond)
	_, err := p2.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "idem", IdempotencyKey: strings.Repeat("k", 201)}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "idempotency_key") {
		t.Errorf("a 201-byte key: %v; want InvalidArgument naming idempotency_key", err)
	}
	p2.stop(syscall.SIGTERM)
}

func headerValue(m *hourglassv1.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

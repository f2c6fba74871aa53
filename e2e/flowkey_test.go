package e2e

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestFlowKeyDelivered: a flow key given to Schedule (the API, the Go
// client, the CLI's --flow-key) reaches the consumer as the header
// hourglass-flow-key, beside an idempotency key that stays apart; a key
// past 200 bytes is refused naming the field.
func TestFlowKeyDelivered(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	ctx := ctxT(t)
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fk", Body: []byte("api"), FlowKey: "tenant-a", IdempotencyKey: "order-1"})
	c := newClient(t, p)
	if _, err := c.Schedule(ctx, client.Message{Topic: "fk", Body: []byte("go"), FlowKey: "tenant-b"}); err != nil {
		t.Fatal(err)
	}
	runCLI(t, "send", "--addr", p.url, "--topic", "fk", "--now", "--flow-key", "tenant-c", "--body", "cli")
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fk", Body: []byte("none")})
	want := map[string]string{"api": "tenant-a", "go": "tenant-b", "cli": "tenant-c", "none": ""}
	for _, r := range receive(t, p.client, "fk", 4, 30e9) {
		got, ik := "", ""
		for _, h := range r.m.Headers {
			switch h.Key {
			case "hourglass-flow-key":
				got = h.Value
			case "hourglass-idempotency-key":
				ik = h.Value
			}
		}
		if w := want[string(r.m.Body)]; got != w {
			t.Errorf("message %q: flow key header %q; want %q", r.m.Body, got, w)
		}
		if string(r.m.Body) == "api" && ik != "order-1" {
			t.Errorf("message api: idempotency key %q; want order-1 beside the flow key", ik)
		}
	}
	_, err := p.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "fk", FlowKey: strings.Repeat("k", 201)}))
	if code, text := connectErr(err); code != codes.InvalidArgument || !strings.Contains(text, "flow_key is 201 bytes; at most 200") {
		t.Errorf("Schedule with a 201-byte flow key: %v %q; want InvalidArgument naming flow_key and its bound", code, text)
	}
}

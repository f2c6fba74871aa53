package natsjs

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/internal/natstest"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

var quiet = slog.New(slog.DiscardHandler)

// startNATS runs a real nats-server with JetStream on a free loopback port.
func startNATS(t *testing.T) *server.Server { return natstest.Start(t) }

// fetchAll reads every message of the stream from the start.
func fetchAll(t *testing.T, url string, want int) []jetstream.Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, DefaultStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < want {
		batch, err := c.Fetch(want-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			out = append(out, m)
			n++
		}
		if n == 0 {
			t.Fatalf("stream holds %d messages, want %d", len(out), want)
		}
	}
	return out
}

func TestPublishesDueMessagesOnce(t *testing.T) {
	ns := startNATS(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: ns.ClientURL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eng, err := engine.Open(engine.Options{Dir: t.TempDir(), Sink: s, Fsync: commitlog.SyncNone, Logger: quiet,
		SegmentDuration: 10 * time.Second, CommitlogSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	<-eng.Ready()
	ids := map[string]bool{}
	for i := range 50 {
		id, err := eng.Schedule(ctx, engine.Request{Topic: "orders.eu", Body: []byte{byte(i)}, Delay: time.Duration(i) * time.Millisecond,
			Headers: []message.Header{{Key: []byte("X-Custom"), Value: []byte("v")}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[id.String()] = true
	}
	msgs := fetchAll(t, ns.ClientURL(), 50)
	for _, m := range msgs {
		id := m.Headers().Get("Hourglass-Id")
		if !ids[id] || m.Headers().Get(nats.MsgIdHdr) != id || m.Subject() != "hourglass.orders.eu" || m.Headers().Get("X-Custom") != "v" {
			t.Errorf("message %s on %s with headers %v", id, m.Subject(), m.Headers())
		}
		mid, _ := message.ParseID(id)
		md, _ := m.Metadata()
		if md != nil && md.Timestamp.Before(mid.Time()) {
			t.Errorf("%s stored %v before its time", id, mid.Time().Sub(md.Timestamp))
		}
		delete(ids, id)
	}
	if len(ids) != 0 {
		t.Errorf("%d messages not published", len(ids))
	}
}

// TestRedeliveryIsDeduplicated: a batch delivered again (as after a crash
// before its done-records) leaves one copy per ID in the stream.
func TestRedeliveryIsDeduplicated(t *testing.T) {
	ns := startNATS(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: ns.ClientURL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := make([]engine.Delivery, 5)
	for i := range batch {
		batch[i] = engine.Delivery{ID: message.ID{DeliverAt: time.Now().UnixMilli(), Seq: uint64(100 + i)},
			Message: &message.Message{Topic: []byte("t"), Body: []byte{byte(i)}}}
	}
	for range 2 {
		if err := s.Deliver(ctx, "t", batch); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 5 {
		t.Fatalf("stream holds %d messages after delivering 5 twice, want 5", info.State.Msgs)
	}
}

func TestDeliverFailsWhenJetStreamIsGone(t *testing.T) {
	ns := startNATS(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: ns.ClientURL(), Logger: quiet, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ns.Shutdown()
	err = s.Deliver(ctx, "t", []engine.Delivery{{ID: message.ID{DeliverAt: 1, Seq: 1}, Message: &message.Message{Body: []byte("x")}}})
	if err == nil {
		t.Fatal("Deliver with the server gone returned nil: the engine would mark it done")
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Options{{}, {URL: "nats://127.0.0.1:1", Prefix: "no-dot"}, {URL: "nats://127.0.0.1:1", Prefix: "a.*."}} {
		if _, err := Open(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

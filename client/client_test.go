package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/server"
)

func TestMessageRequest(t *testing.T) {
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		m       Message
		wantErr bool
		check   func(*hourglassv1.ScheduleRequest) bool
	}{
		{"now", Message{Topic: "t"}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.When == nil }},
		{"delay_rounds_up", Message{Topic: "t", Delay: 1500 * time.Microsecond}, false,
			func(r *hourglassv1.ScheduleRequest) bool { return r.GetDelayMs() == 2 }},
		{"at", Message{Topic: "t", At: at}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.GetDeliverAt().AsTime().Equal(at) }},
		{"level", Message{Topic: "t", Level: 3}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.GetDelayLevel() == 3 }},
		{"headers", Message{Topic: "t", Headers: map[string]string{"k": "v"}}, false,
			func(r *hourglassv1.ScheduleRequest) bool {
				return len(r.Headers) == 1 && r.Headers[0].Key == "k" && r.Headers[0].Value == "v"
			}},
		{"delay_and_level", Message{Topic: "t", Delay: time.Second, Level: 1}, true, nil},
		{"at_and_delay", Message{Topic: "t", Delay: time.Second, At: at}, true, nil},
		{"negative_delay", Message{Topic: "t", Delay: -time.Second}, true, nil},
		{"negative_level", Message{Topic: "t", Level: -1}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.m.request()
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidMessage) {
					t.Errorf("err = %v, want ErrInvalidMessage", err)
				}
				return
			}
			if err != nil || !tc.check(r) {
				t.Errorf("%v, %v", r, err)
			}
		})
	}
}

func TestDefaultRetryDelay(t *testing.T) {
	for f, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := DefaultRetryDelay(f); got != want {
			t.Errorf("DefaultRetryDelay(%d) = %v, want %v", f, got, want)
		}
	}
}

// TestProducerClosedAndInvalid needs no server: refused messages and a
// closed producer answer at once.
func TestProducerClosedAndInvalid(t *testing.T) {
	p := NewProducer(newClient(t, "http://127.0.0.1:1"), ProducerOptions{})
	ctx := context.Background()
	if _, err := p.Send(ctx, Message{Topic: "t", Level: 1, Delay: time.Second}).Wait(ctx); !errors.Is(err, ErrInvalidMessage) {
		t.Errorf("invalid message: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Errorf("Flush of nothing: %v", err)
	}
	p.Close()
	if _, err := p.Send(ctx, Message{Topic: "t"}).Wait(ctx); !errors.Is(err, ErrProducerClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, ErrProducerClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		target     string
		secure     bool
		errHas     string // "" for no error
	}{
		{"http", "http://127.0.0.1:7420", "127.0.0.1:7420", false, ""},
		{"http_slash", "http://localhost:7420/", "localhost:7420", false, ""},
		{"http_default_port", "http://example.com", "example.com:80", false, ""},
		{"http_ipv6", "http://[::1]:7420", "[::1]:7420", false, ""},
		{"http_ipv6_default_port", "http://[::1]", "[::1]:80", false, ""},
		{"https", "https://example.com:8443", "example.com:8443", true, ""},
		{"https_default_port", "https://example.com", "example.com:443", true, ""},
		{"host_port", "127.0.0.1:7420", "127.0.0.1:7420", false, ""},
		{"name_port", "localhost:7420", "localhost:7420", false, ""},
		{"bad_scheme", "ftp://example.com:21", "", false, `scheme "ftp"`},
		{"grpc_scheme", "grpc://example.com:21", "", false, "want http:// or https://"},
		{"path", "http://example.com:7420/v1", "", false, "has a path"},
		{"no_host", "http://", "", false, "no host"},
		{"bad_url", "http://[::1", "", false, "address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, secure, err := parseAddr(tc.addr)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("parseAddr(%q) = %q, %v, %v; want an error containing %q", tc.addr, target, secure, err, tc.errHas)
				}
				if _, err := New(tc.addr); err == nil {
					t.Errorf("New(%q) accepted a bad address", tc.addr)
				}
				return
			}
			if err != nil || target != tc.target || secure != tc.secure {
				t.Fatalf("parseAddr(%q) = %q, %v, %v; want %q, %v", tc.addr, target, secure, err, tc.target, tc.secure)
			}
		})
	}
}

// TestUnaryCalls runs every unary call of the client against a real
// server, addressed as host:port.
func TestUnaryCalls(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, strings.TrimPrefix(rs.addr, "http://"))
	ctx := context.Background()

	id, err := c.Schedule(ctx, Message{Topic: "u", Body: []byte("one"), Headers: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.ScheduleBatch(ctx, []Message{{Topic: "u", Body: []byte("two")}, {Topic: "u", Body: []byte("three")}})
	if err != nil || len(ids) != 2 || ids[0] == ids[1] || ids[0] == id {
		t.Fatalf("ScheduleBatch = %v, %v; want two new IDs", ids, err)
	}
	later, err := c.Schedule(ctx, Message{Topic: "u", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ref  Ref
		want CancelResult
	}{
		{"pending", later, Cancelled},
		{"never_scheduled", mustParseID(t, strings.Repeat("0", 31)+"1"), Unknown},
	} {
		if got, err := c.Cancel(ctx, tc.ref); err != nil || got != tc.want {
			t.Errorf("Cancel %s = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	_, err = c.Cancel(ctx, ID{})
	wantCode(t, "Cancel of the zero ID", err, codes.InvalidArgument)

	var got []Delivery
	for len(got) < 3 {
		ds, err := c.Receive(ctx, "u", ReceiveOptions{MaxMessages: 10, Wait: testTimeout, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			t.Fatalf("Receive waited %v and got nothing; %d of 3 received", testTimeout, len(got))
		}
		got = append(got, ds...)
	}
	byBody := map[string]Delivery{}
	for _, d := range got {
		byBody[string(d.Body)] = d
	}
	if d := byBody["one"]; d.ID != id || d.OriginID != id || d.Headers["k"] != "v" || d.Attempt != 0 || d.Receipt == "" {
		t.Errorf("received %+v; scheduled %s with header k=v", d, id)
	}
	if err := c.Ack(ctx, byBody["one"]); err != nil {
		t.Errorf("Ack: %v", err)
	}
	wantCode(t, "second Ack", c.Ack(ctx, byBody["one"]), codes.FailedPrecondition)
	res, err := c.AckBatch(ctx, []Delivery{byBody["two"], byBody["one"]})
	if err != nil || len(res) != 2 || res[0] != nil || res[1] == nil {
		t.Errorf("AckBatch of a leased and an acked delivery = %v, %v; want [nil, error]", res, err)
	}
	if _, err := c.AckBatch(ctx, []Delivery{byBody["three"], {Topic: "other", Receipt: "r"}}); err == nil {
		t.Error("AckBatch of two topics: no error")
	}
	if err := c.Nack(ctx, byBody["three"], 0); err != nil {
		t.Errorf("Nack: %v", err)
	}
	st := topicStats(t, c, "u")
	if st.Acked != 2 || st.Nacked != 1 || st.Scheduled != 4 {
		t.Errorf("stats of u = %v; want 2 acked, 1 nacked, 4 scheduled", st)
	}
	now, err := c.Time(ctx)
	if err != nil || now.Sub(time.Now()).Abs() > time.Minute {
		t.Errorf("Time = %v, %v", now, err)
	}
}

// TestToken checks that WithToken reaches every kind of call (unary, the
// ScheduleStream of a Producer, Consume), and that a wrong or missing
// token is refused with Unauthenticated on each, Consume returning at
// once.
func TestToken(t *testing.T) {
	rs := startServer(t, server.Options{AuthToken: "s3cret"})
	for _, tc := range []struct {
		name string
		opts []Option
		want codes.Code
	}{
		{"right", []Option{WithToken("s3cret")}, codes.OK},
		{"wrong", []Option{WithToken("guess")}, codes.Unauthenticated},
		{"none", nil, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, rs.addr, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, err := c.Schedule(ctx, Message{Topic: "auth"})
			wantCode(t, "Schedule", err, tc.want)
			p := NewProducer(c, ProducerOptions{})
			_, err = p.Send(ctx, Message{Topic: "auth"}).Wait(ctx)
			p.Close()
			wantCode(t, "Producer.Send", err, tc.want)
			if tc.want == codes.OK {
				return // Consume would run until ctx ends
			}
			err = c.Consume(ctx, "auth", func(context.Context, Delivery) error { return nil }, ConsumeOptions{})
			if ctx.Err() != nil {
				t.Fatalf("Consume with a bad token ran until the test's deadline")
			}
			wantCode(t, "Consume", err, tc.want)
		})
	}
}

// headerService records the metadata key "x-who" of every call.
type headerService struct {
	hourglassv1.UnimplementedHourglassServiceServer
	mu  sync.Mutex
	got map[string][]string // method -> values of x-who
}

func (s *headerService) record(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[method] = md.Get("x-who")
	if a := md.Get("authorization"); len(a) != 1 || a[0] != "Bearer tok" {
		s.got[method] = append(s.got[method], fmt.Sprintf("authorization %q", a))
	}
}

func (s *headerService) Schedule(ctx context.Context, _ *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error) {
	s.record(ctx, "Schedule")
	return &hourglassv1.ScheduleResponse{Id: fakeID("x")}, nil
}

func (s *headerService) ScheduleStream(st grpc.BidiStreamingServer[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]) error {
	s.record(st.Context(), "ScheduleStream")
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		res := &hourglassv1.ScheduleBatchResponse{}
		for range req.GetBatch().GetMessages() {
			res.Results = append(res.Results, &hourglassv1.ScheduleResponse{Id: fakeID("x")})
		}
		if err := st.Send(&hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: res}}); err != nil {
			return err
		}
	}
}

// TestHeaders checks that WithHeader and WithToken send their metadata
// with unary calls and streams, next to the caller's own.
func TestHeaders(t *testing.T) {
	svc := &headerService{got: map[string][]string{}}
	c := newClient(t, startFake(t, svc), WithHeader("x-who", "node-1"), WithToken("tok"), WithMaxCalls(0))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-who", "caller")
	if _, err := c.Schedule(ctx, Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	p := NewProducer(c, ProducerOptions{})
	if _, err := p.Send(ctx, Message{Topic: "t"}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	want := map[string][]string{"Schedule": {"caller", "node-1"}, "ScheduleStream": {"node-1"}}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for method, w := range want {
		if got := svc.got[method]; !slices.Equal(got, w) {
			t.Errorf("%s: x-who %q; want %q (and the token)", method, got, w)
		}
	}
}

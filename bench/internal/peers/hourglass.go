package peers

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

func hourglassSystem(cfg Config, fsync string) System {
	dur := "fsync per write (--fsync always: the answer waits for the group-commit fsync that covers it)"
	if fsync == "interval" {
		dur = "fsync every 10 ms (--fsync interval)"
	}
	return System{
		Name: "hourglass", Variant: "--fsync " + fsync, Durability: dur,
		Delivery: "at least once (Receive with a lease, then Ack)",
		Notes: fmt.Sprintf("producers send a batch as one gRPC ScheduleBatch with absolute deliver_at and the message's ID as idempotency_key; consumers run client.Consume on the Consume stream with %d credits", orDefault(cfg.ConsumeBatch, 100)) +
			" (lease = the redelivery timeout), one handler goroutine, and the acks that wait go back on the stream in one settle (one fsync); the Go client (gRPC over HTTP/2) as a user gets it",
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			s.command = func() *exec.Cmd {
				return exec.Command(cfg.HourglassBin, "serve", "--data-dir", dir, "--listen", s.Addr(), "--fsync", fsync)
			}
			s.ready = func(ctx context.Context) error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+"/readyz", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("readyz: %s", resp.Status)
				}
				return nil
			}
			return s
		},
		newDriver: func(s *Server) (Driver, error) { return hourglassDriver(cfg, s) },
	}
}

// hourglassDriver is the Hourglass driver on s, set up by cfg: for
// Hourglass and for the servers that speak its API (pebbledelay).
func hourglassDriver(cfg Config, s *Server) (Driver, error) {
	h, err := NewHourglass(s.Addr())
	if err != nil {
		return nil, err
	}
	h.Lease, h.ConsumeBatch = cfg.Redeliver, cfg.ConsumeBatch
	return h, nil
}

// Hourglass drives an Hourglass server through its Go client, set up as
// a user would: client.New, client.Consume.
type Hourglass struct {
	c     *client.Client
	topic string
	// Lease of each received message (0: the server's default).
	Lease time.Duration
	// ConsumeBatch is the Consume stream's credits (0: 100).
	ConsumeBatch int
}

// NewHourglass returns a driver on addr with a topic of its own.
func NewHourglass(addr string) (*Hourglass, error) {
	c, err := client.New("http://" + addr)
	if err != nil {
		return nil, err
	}
	return &Hourglass{c: c, topic: uniqueName("hg")}, nil
}

// Setup does nothing: a topic exists once used.
func (h *Hourglass) Setup(context.Context) error { return nil }

// Close closes the client.
func (h *Hourglass) Close() error { return h.c.Close() }

// NewProducer shares the client.
func (h *Hourglass) NewProducer(context.Context) (Producer, error) { return hgProducer{h}, nil }

// NewConsumer shares the client.
func (h *Hourglass) NewConsumer(context.Context) (Consumer, error) { return hgConsumer{h}, nil }

type hgProducer struct{ h *Hourglass }

func (p hgProducer) Produce(ctx context.Context, msgs []Msg) error {
	ms := make([]client.Message, len(msgs))
	for i, m := range msgs {
		ms[i] = client.Message{
			Topic: p.h.topic, Body: m.Body, At: m.DeliverAt,
			// The message's ID as its key, as Redis and PostgreSQL use it:
			// a retried batch is not stored twice.
			IdempotencyKey: strconv.FormatUint(m.ID, 10),
		}
	}
	_, err := p.h.c.ScheduleBatch(ctx, ms)
	return err
}

func (hgProducer) Close() error { return nil }

type hgConsumer struct{ h *Hourglass }

func (c hgConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	err := c.h.c.Consume(ctx, c.h.topic, func(_ context.Context, d client.Delivery) error {
		handle(d.Body)
		return nil
	}, client.ConsumeOptions{
		Prefetch: orDefault(c.h.ConsumeBatch, 100), Lease: c.h.Lease,
		OnError: func(err error) {
			if ctx.Err() == nil {
				onErr(err)
			}
		},
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (hgConsumer) Close() error { return nil }

package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/internal/natscluster"
)

func natsSystem(cfg Config, syncAlways bool) System {
	variant, dur, sync := "sync_interval default (2 min)", "fsync every 2 min (the file store's default sync_interval)", ""
	if syncAlways {
		variant, dur, sync = "sync_interval always", "fsync per write (sync_interval: always)", "sync_interval: always\n"
	}
	return System{
		Name: "nats", Variant: variant, Durability: dur,
		Delivery: "at least once (durable pull consumer, explicit ack, AckWait = the redelivery timeout)",
		Notes: "JetStream message schedules on a file stream with AllowMsgSchedules: each message is published on its own subject " +
			"<stream>.sched.<id> (one schedule per subject) with Nats-Schedule: @at <RFC 3339 with nanoseconds> and Nats-Schedule-Target: <stream>.fire; " +
			"producers publish a batch asynchronously and wait for every PubAck; consumers Fetch up to " + fmt.Sprint(orDefault(cfg.ConsumeBatch, 100)) + " (1 s wait) from one durable consumer on <stream>.fire and Ack each",
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			conf := dir + ".conf"
			s.init = func() error {
				c := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n  %s}\n", port, dir, sync)
				return os.WriteFile(conf, []byte(c), 0o644)
			}
			s.command = func() *exec.Cmd { return exec.Command(cfg.NatsBin, "-c", conf) }
			s.ready = func(ctx context.Context) error { return natscluster.JetStreamReady(ctx, "nats://"+s.Addr()) }
			return s
		},
		newDriver: func(s *Server) (Driver, error) {
			n, err := NewNats(s.Addr())
			if n != nil {
				n.AckWait, n.ConsumeBatch = cfg.Redeliver, cfg.ConsumeBatch
			}
			return n, err
		},
	}
}

// Nats is the message-schedule delay queue on a NATS JetStream server.
type Nats struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	// AckWait of the durable consumer (0: the server's default, 30 s).
	AckWait time.Duration
	// ConsumeBatch is the most messages one Fetch takes (0: 100).
	ConsumeBatch int
}

// NewNats connects a driver to addr, with a stream of its own.
func NewNats(addr string) (*Nats, error) {
	n := &Nats{url: "nats://" + addr, stream: uniqueName("HG")}
	nc, js, err := n.connect()
	if err != nil {
		return nil, err
	}
	n.nc, n.js = nc, js
	return n, nil
}

func (n *Nats) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(n.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (n *Nats) fire() string { return n.stream + ".fire" }

// NatsScheduleHeader is the Nats-Schedule value that fires at t: "@at"
// and t in RFC 3339 with nanoseconds (the server parses fractions).
func NatsScheduleHeader(t time.Time) string { return "@at " + t.UTC().Format(time.RFC3339Nano) }

// Setup creates the stream and its durable consumer.
func (n *Nats) Setup(ctx context.Context) error {
	_, err := n.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              n.stream,
		Subjects:          []string{n.stream + ".sched.>", n.fire()},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.WorkQueuePolicy,
		AllowMsgSchedules: true,
		AllowRollup:       true,
	})
	if err != nil {
		return fmt.Errorf("peers: nats stream: %w", err)
	}
	_, err = n.js.CreateOrUpdateConsumer(ctx, n.stream, jetstream.ConsumerConfig{
		Durable:       "consumers",
		FilterSubject: n.fire(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       n.AckWait,
	})
	return err
}

// Close closes the connection.
func (n *Nats) Close() error { n.nc.Close(); return nil }

// NewProducer connects on its own.
func (n *Nats) NewProducer(context.Context) (Producer, error) {
	nc, js, err := n.connect()
	if err != nil {
		return nil, err
	}
	return &natsProducer{n: n, nc: nc, js: js}, nil
}

// NewConsumer connects on its own.
func (n *Nats) NewConsumer(context.Context) (Consumer, error) {
	nc, js, err := n.connect()
	if err != nil {
		return nil, err
	}
	return &natsConsumer{n: n, nc: nc, js: js}, nil
}

type natsProducer struct {
	n  *Nats
	nc *nats.Conn
	js jetstream.JetStream
}

func (p *natsProducer) Produce(ctx context.Context, msgs []Msg) error {
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	var first error
	for _, m := range msgs {
		msg := nats.NewMsg(fmt.Sprintf("%s.sched.%d", p.n.stream, m.ID))
		msg.Data = m.Body
		msg.Header.Set("Nats-Schedule", NatsScheduleHeader(m.DeliverAt))
		msg.Header.Set("Nats-Schedule-Target", p.n.fire())
		f, err := p.js.PublishMsgAsync(msg)
		if err != nil {
			first = err
			break
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

func (p *natsProducer) Close() error { p.nc.Close(); return nil }

type natsConsumer struct {
	n  *Nats
	nc *nats.Conn
	js jetstream.JetStream
}

func (c *natsConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	var cons jetstream.Consumer
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			cons, err = c.js.Consumer(cctx, c.n.stream, "consumers")
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					onErr(err)
					sleepCtx(ctx, 100*time.Millisecond)
				}
				cons = nil
				continue
			}
		}
		batch, err := cons.Fetch(orDefault(c.n.ConsumeBatch, 100), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				onErr(err)
				sleepCtx(ctx, 100*time.Millisecond)
			}
			continue
		}
		for m := range batch.Messages() {
			handle(m.Data())
			if err := m.Ack(); err != nil {
				onErr(err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			onErr(err)
		}
	}
	return nil
}

func (c *natsConsumer) Close() error { c.nc.Close(); return nil }

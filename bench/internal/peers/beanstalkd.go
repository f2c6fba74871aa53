package peers

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"time"

	"github.com/beanstalkd/go-beanstalk"
)

func beanstalkdSystem(cfg Config, fsyncEach bool) System {
	variant, dur, flags := "-f 50 (default)", "binlog fsync at most every 50 ms (the default -f 50)", []string{}
	if fsyncEach {
		variant, dur, flags = "-f 0", "fsync per write (-f 0)", []string{"-f", "0"}
	}
	return System{
		Name: "beanstalkd", Variant: variant, Durability: dur,
		Delivery: "at least once (reserve, then delete; TTR = the redelivery timeout)",
		Notes: "one tube; a put's delay is whole seconds on the wire, so it is ceil(deliverAt - now) s: never early, up to 1 s late by design. " +
			"The protocol client answers one command at a time, so a producer's batch is that many puts in a row on its connection (a retry resumes at the failed put); " +
			"consumers reserve-with-timeout 1 s, then delete, each on its own connection",
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			s.command = func() *exec.Cmd {
				args := append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", dir}, flags...)
				return exec.Command("beanstalkd", args...)
			}
			s.ready = func(ctx context.Context) error { return tcpReady(ctx, s.Addr()) }
			return s
		},
		newDriver: func(s *Server) (Driver, error) { b := NewBeanstalkd(s.Addr()); b.TTR = cfg.Redeliver; return b, nil },
	}
}

// Beanstalkd is the delayed-put queue on a beanstalkd server.
type Beanstalkd struct {
	addr, tube string
	now        func() time.Time
	// TTR of each job: reserved and not deleted within it, it is ready again.
	TTR time.Duration
}

// NewBeanstalkd returns a driver on addr with a tube of its own.
func NewBeanstalkd(addr string) *Beanstalkd {
	return &Beanstalkd{addr: addr, tube: uniqueName("hg"), now: time.Now, TTR: 60 * time.Second}
}

// Setup does nothing: a tube exists once used.
func (b *Beanstalkd) Setup(context.Context) error { return nil }

// Close does nothing: producers and consumers hold the connections.
func (b *Beanstalkd) Close() error { return nil }

func (b *Beanstalkd) dial() (*beanstalk.Conn, error) {
	return beanstalk.DialTimeout("tcp", b.addr, 2*time.Second)
}

// NewProducer dials a connection of its own.
func (b *Beanstalkd) NewProducer(context.Context) (Producer, error) {
	c, err := b.dial()
	if err != nil {
		return nil, err
	}
	return &bsProducer{b: b, c: c}, nil
}

// NewConsumer dials a connection of its own.
func (b *Beanstalkd) NewConsumer(context.Context) (Consumer, error) {
	c, err := b.dial()
	if err != nil {
		return nil, err
	}
	return &bsConsumer{b: b, c: c}, nil
}

// BeanstalkDelay is the whole-second delay a put for deliverAt gets at
// now: rounded up, so that the job is never ready early.
func BeanstalkDelay(deliverAt, now time.Time) time.Duration {
	d := deliverAt.Sub(now)
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

type bsProducer struct {
	b *Beanstalkd
	c *beanstalk.Conn
	// A batch that failed part way: a retry of the same batch (same first
	// ID) resumes at the put that failed instead of putting the answered
	// ones again, as a user retrying one failed put would.
	failedFirst uint64
	failedDone  int
}

func (p *bsProducer) Produce(ctx context.Context, msgs []Msg) error {
	if p.c == nil {
		c, err := p.b.dial()
		if err != nil {
			return err
		}
		p.c = c
	}
	t := beanstalk.NewTube(p.c, p.b.tube)
	from := 0
	if len(msgs) > 0 && p.failedDone > 0 && msgs[0].ID == p.failedFirst {
		from = p.failedDone
	}
	p.failedDone = 0
	for i := from; i < len(msgs); i++ {
		m := msgs[i]
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := t.Put(m.Body, 1024, BeanstalkDelay(m.DeliverAt, p.b.now()), p.b.TTR); err != nil {
			p.c.Close()
			p.c = nil
			p.failedFirst, p.failedDone = msgs[0].ID, i
			return err
		}
	}
	return nil
}

func (p *bsProducer) Close() error {
	if p.c != nil {
		return p.c.Close()
	}
	return nil
}

type bsConsumer struct {
	b *Beanstalkd
	c *beanstalk.Conn
}

func (c *bsConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	fail := func(err error) {
		onErr(err)
		if c.c != nil {
			c.c.Close()
			c.c = nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	for ctx.Err() == nil {
		if c.c == nil {
			conn, err := c.b.dial()
			if err != nil {
				fail(err)
				continue
			}
			c.c = conn
		}
		ts := beanstalk.NewTubeSet(c.c, c.b.tube)
		id, body, err := ts.Reserve(time.Second)
		if errors.Is(err, beanstalk.ErrTimeout) {
			continue
		}
		if err != nil {
			fail(err)
			continue
		}
		handle(body)
		if err := c.c.Delete(id); err != nil {
			fail(err)
		}
	}
	return nil
}

func (c *bsConsumer) Close() error {
	if c.c != nil {
		return c.c.Close()
	}
	return nil
}

package peers

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func redisSystem(cfg Config, fsync string) System {
	dur := "fsync per write (appendfsync always: the reply follows the AOF fsync)"
	if fsync == "everysec" {
		dur = "fsync every 1 s (appendfsync everysec)"
	}
	return System{
		Name: "redis", Variant: "appendfsync " + fsync, Durability: dur,
		Delivery: "at most once (the Lua pop deletes)",
		Notes: "sorted set scored by deliverAt (ms with µs fraction) + hash of bodies; producers MULTI/EXEC one ZADD and one HSET per batch; " +
			"consumers run one Lua script (ZRANGEBYSCORE up to " + fmt.Sprint(orDefault(cfg.ConsumeBatch, 1000)) + " due by the server's TIME, ZREM, HMGET, HDEL) and sleep the poll interval when it returns nothing",
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			s.command = func() *exec.Cmd {
				return exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
					"--dir", dir, "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
					"--protected-mode", "yes")
			}
			s.ready = func(ctx context.Context) error {
				c := redis.NewClient(&redis.Options{Addr: s.Addr()})
				defer c.Close()
				return c.Ping(ctx).Err()
			}
			return s
		},
		newDriver: func(s *Server) (Driver, error) {
			r := NewRedis(s.Addr(), cfg.PollInterval)
			r.ConsumeBatch = cfg.ConsumeBatch
			return r, nil
		},
	}
}

// Redis is the sorted-set delay queue on a Redis server.
type Redis struct {
	c            *redis.Client
	due, bodies  string
	pollInterval time.Duration
	// ConsumeBatch is the most members one pop takes (0: 1000).
	ConsumeBatch int
}

// NewRedis returns a Redis driver on addr with keys of its own.
func NewRedis(addr string, poll time.Duration) *Redis {
	p := uniqueName("hg")
	return &Redis{
		c:   redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, MaxRetries: -1}),
		due: p + ":due", bodies: p + ":bodies", pollInterval: poll,
	}
}

// Setup removes the driver's keys.
func (r *Redis) Setup(ctx context.Context) error { return r.c.Del(ctx, r.due, r.bodies).Err() }

// Close closes the client.
func (r *Redis) Close() error { return r.c.Close() }

// NewProducer shares the client's pool.
func (r *Redis) NewProducer(context.Context) (Producer, error) { return redisProducer{r}, nil }

// NewConsumer shares the client's pool.
func (r *Redis) NewConsumer(context.Context) (Consumer, error) { return redisConsumer{r}, nil }

type redisProducer struct{ r *Redis }

func (p redisProducer) Produce(ctx context.Context, msgs []Msg) error {
	zs := make([]redis.Z, len(msgs))
	hs := make([]any, 0, 2*len(msgs))
	for i, m := range msgs {
		id := strconv.FormatUint(m.ID, 10)
		zs[i] = redis.Z{Score: float64(m.DeliverAt.UnixMicro()) / 1000, Member: id}
		hs = append(hs, id, m.Body)
	}
	_, err := p.r.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, p.r.bodies, hs...)
		pipe.ZAdd(ctx, p.r.due, zs...)
		return nil
	})
	return err
}

func (redisProducer) Close() error { return nil }

// popDue pops up to ARGV[1] members of KEYS[1] due by the server's clock
// and returns their bodies from KEYS[2], removing both.
var popDue = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids == 0 then return {} end
redis.call('ZREM', KEYS[1], unpack(ids))
local bodies = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
return bodies
`)

type redisConsumer struct{ r *Redis }

func (c redisConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	for ctx.Err() == nil {
		res, err := popDue.Run(ctx, c.r.c, []string{c.r.due, c.r.bodies}, orDefault(c.r.ConsumeBatch, 1000)).Slice()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return nil
			}
			onErr(err)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for _, b := range res {
			if s, ok := b.(string); ok {
				handle([]byte(s))
			}
		}
		if len(res) == 0 {
			sleepCtx(ctx, c.r.pollInterval)
		}
	}
	return nil
}

func (redisConsumer) Close() error { return nil }

package peers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func postgresSystem(cfg Config) System {
	return System{
		Name: "postgresql", Variant: "synchronous_commit on",
		Durability: "fsync per commit (the default synchronous_commit = on; concurrent commits share a WAL flush)",
		Delivery:   "at most once (the claiming DELETE commits on its own)",
		Notes: "table (id, deliver_at, body) indexed on deliver_at; producers insert a batch in one INSERT ... SELECT unnest(...) ON CONFLICT DO NOTHING; " +
			"consumers DELETE ... WHERE id IN (SELECT id ... WHERE deliver_at <= now() ORDER BY deliver_at LIMIT " + fmt.Sprint(orDefault(cfg.ConsumeBatch, 1000)) + " FOR UPDATE SKIP LOCKED) RETURNING body, " +
			"sleeping the poll interval when it returns nothing",
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			sock := dir + ".sock"
			s.init = func() error {
				cred, err := postgresCred()
				if err != nil {
					return err
				}
				for _, d := range []string{dir, sock} {
					if err := os.MkdirAll(d, 0o700); err != nil {
						return err
					}
					if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
						return err
					}
				}
				// The postgres user must be able to reach dir.
				for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
					if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
						os.Chmod(p, fi.Mode().Perm()|0o011)
					}
				}
				// Its log file too.
				f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
				if err == nil {
					f.Close()
				}
				cmd := exec.Command(filepath.Join(cfg.PgBin, "initdb"), "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
				cmd.Dir = "/"
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("peers: initdb: %v: %s", err, out)
				}
				return nil
			}
			s.command = func() *exec.Cmd {
				cred, _ := postgresCred()
				cmd := exec.Command(filepath.Join(cfg.PgBin, "postgres"), "-D", dir,
					"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(port), "-k", sock)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
				cmd.Dir = "/"
				return cmd
			}
			s.ready = func(ctx context.Context) error {
				c, err := pgx.Connect(ctx, postgresURL(s.Addr()))
				if err != nil {
					return err
				}
				defer c.Close(context.Background())
				return c.Ping(ctx)
			}
			return s
		},
		newDriver: func(s *Server) (Driver, error) {
			p, err := NewPostgres(s.Addr(), cfg.PollInterval)
			if err != nil {
				return nil, err
			}
			p.ConsumeBatch = cfg.ConsumeBatch
			return p, nil
		},
	}
}

func postgresCred() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("peers: no postgres user (install the postgresql package: bench/peers.sh install): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func postgresURL(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// Postgres is the polled-table delay queue on a PostgreSQL server.
type Postgres struct {
	pool         *pgxpool.Pool
	table        string
	pollInterval time.Duration
	// ConsumeBatch is the claiming DELETE's LIMIT (0: 1000).
	ConsumeBatch int
}

// NewPostgres returns a driver on addr with a table of its own.
func NewPostgres(addr string, poll time.Duration) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(postgresURL(addr))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return &Postgres{pool: pool, table: uniqueName("delayed_"), pollInterval: poll}, nil
}

// Setup creates the driver's table.
func (p *Postgres) Setup(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
CREATE TABLE %[1]s (id bigint PRIMARY KEY, deliver_at timestamptz NOT NULL, body bytea NOT NULL);
CREATE INDEX ON %[1]s (deliver_at)`, p.table))
	return err
}

// Close closes the pool.
func (p *Postgres) Close() error { p.pool.Close(); return nil }

// NewProducer shares the pool.
func (p *Postgres) NewProducer(context.Context) (Producer, error) { return pgProducer{p}, nil }

// NewConsumer shares the pool.
func (p *Postgres) NewConsumer(context.Context) (Consumer, error) { return pgConsumer{p}, nil }

type pgProducer struct{ p *Postgres }

func (w pgProducer) Produce(ctx context.Context, msgs []Msg) error {
	ids := make([]int64, len(msgs))
	ats := make([]time.Time, len(msgs))
	bodies := make([][]byte, len(msgs))
	for i, m := range msgs {
		ids[i], ats[i], bodies[i] = int64(m.ID), m.DeliverAt, m.Body
	}
	_, err := w.p.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, deliver_at, body)
SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bytea[]) ON CONFLICT (id) DO NOTHING`, w.p.table), ids, ats, bodies)
	return err
}

func (pgProducer) Close() error { return nil }

type pgConsumer struct{ p *Postgres }

func (c pgConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE deliver_at <= now()
ORDER BY deliver_at LIMIT %[2]d FOR UPDATE SKIP LOCKED) RETURNING body`, c.p.table, orDefault(c.p.ConsumeBatch, 1000))
	for ctx.Err() == nil {
		n := 0
		rows, err := c.p.pool.Query(ctx, q)
		if err == nil {
			for rows.Next() {
				var b []byte
				if err = rows.Scan(&b); err != nil {
					break
				}
				handle(b)
				n++
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			onErr(err)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if n == 0 {
			sleepCtx(ctx, c.p.pollInterval)
		}
	}
	return nil
}

func (pgConsumer) Close() error { return nil }

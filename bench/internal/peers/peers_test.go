package peers

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/measure"
)

// The ports bench/peers.sh starts the peers on.
const (
	hourglassAddr  = "127.0.0.1:17420"
	redisAddr      = "127.0.0.1:16379"
	postgresAddr   = "127.0.0.1:15432"
	beanstalkdAddr = "127.0.0.1:11310"
	natsAddr       = "127.0.0.1:14222"
)

func needPeer(t *testing.T, name, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Skipf("%s is not running on %s (%v): start the peers with `bash peers.sh start` in bench/", name, addr, err)
	}
	c.Close()
}

// roundTrip schedules 40 messages due 300 ms to 1.5 s ahead through two
// producers, consumes them with two consumers, and checks that every one
// arrives once, none early, each at most maxLate after its time.
func roundTrip(t *testing.T, d Driver, maxLate time.Duration) { roundTripN(t, d, 40, maxLate) }

// roundTripN is roundTrip with n messages (an even number).
func roundTripN(t *testing.T, d Driver, n int, maxLate time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer d.Close()
	if err := d.Setup(ctx); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	tr := measure.NewTracker(n)
	start := time.Now()
	msgs := make([]Msg, n)
	for i := range msgs {
		at := start.Add(300*time.Millisecond + time.Duration(i%20)*60*time.Millisecond)
		msgs[i] = Msg{ID: uint64(i), DeliverAt: at, Body: measure.EncodeBody(uint64(i), at, 256)}
	}
	var cwg sync.WaitGroup
	cctx, ccancel := context.WithCancel(ctx)
	for range 2 {
		c, err := d.NewConsumer(ctx)
		if err != nil {
			t.Fatalf("NewConsumer: %v", err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			defer c.Close()
			c.Run(cctx, func(b []byte) { tr.DeliveredBody(b, time.Now()) }, func(err error) { t.Logf("consumer: %v", err) })
		}()
	}
	var pwg sync.WaitGroup
	for p := range 2 {
		pr, err := d.NewProducer(ctx)
		if err != nil {
			t.Fatalf("NewProducer: %v", err)
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer pr.Close()
			part := msgs[p*n/2 : (p+1)*n/2]
			if err := pr.Produce(ctx, part); err != nil {
				t.Errorf("Produce: %v", err)
				return
			}
			for _, m := range part {
				tr.Acked(m.ID)
			}
		}()
	}
	pwg.Wait()
	select {
	case <-tr.AllDelivered():
	case <-time.After(15 * time.Second):
	}
	ccancel()
	cwg.Wait()
	r := tr.Result()
	if r.Acked != n || r.Lost != 0 || r.Duplicates != 0 || r.Early != 0 || r.Unknown != 0 {
		t.Fatalf("acked %d of %d, lost %d, duplicates %d, early %d, unknown %d", r.Acked, n, r.Lost, r.Duplicates, r.Early, r.Unknown)
	}
	if r.LatenessMax > maxLate {
		t.Fatalf("lateness max %v, want at most %v (p50 %v)", r.LatenessMax, maxLate, r.LatenessP50)
	}
	t.Logf("lateness p50 %v max %v", r.LatenessP50, r.LatenessMax)
}

func TestHourglassDriver(t *testing.T) {
	needPeer(t, "hourglass", hourglassAddr)
	h, err := NewHourglass(hourglassAddr, ProtoDefault)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, h, time.Second)
}

func TestRedisDriver(t *testing.T) {
	needPeer(t, "redis-server", redisAddr)
	roundTrip(t, NewRedis(redisAddr, 10*time.Millisecond), time.Second)
}

func TestPostgresDriver(t *testing.T) {
	needPeer(t, "postgresql", postgresAddr)
	d, err := NewPostgres(postgresAddr, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, d, time.Second)
}

func TestBeanstalkdDriver(t *testing.T) {
	needPeer(t, "beanstalkd", beanstalkdAddr)
	// Whole-second delays: up to 1 s late by design, plus the test's slack.
	roundTrip(t, NewBeanstalkd(beanstalkdAddr), 2*time.Second)
}

// TestNatsDriver checks that a JetStream message schedule with a
// sub-second @at time fires at that time: not early, and within the
// server's 1 s scheduling tick.
func TestNatsDriver(t *testing.T) {
	needPeer(t, "nats-server", natsAddr)
	d, err := NewNats(natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, d, 2*time.Second)
}

func TestBeanstalkDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		ahead, want time.Duration
	}{
		{-time.Second, 0}, {0, 0}, {time.Nanosecond, time.Second}, {999 * time.Millisecond, time.Second},
		{time.Second, time.Second}, {1001 * time.Millisecond, 2 * time.Second}, {30 * time.Second, 30 * time.Second},
	} {
		if got := BeanstalkDelay(now.Add(c.ahead), now); got != c.want {
			t.Errorf("due in %v: delay %v, want %v", c.ahead, got, c.want)
		}
	}
}

func TestNatsScheduleHeader(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.FixedZone("x", 3600))
	h := NatsScheduleHeader(at)
	if h != "@at 2030-01-02T02:04:05.6789Z" {
		t.Fatalf("header %q", h)
	}
	// The server parses the time after "@at " with time.RFC3339, which takes
	// the fraction: the schedule keeps sub-second precision.
	got, err := time.Parse(time.RFC3339, strings.TrimPrefix(h, "@at "))
	if err != nil || !got.Equal(at) {
		t.Fatalf("parsed %v, %v; want %v", got, err, at)
	}
}

func TestServerProcess(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Dir: dir, Log: dir + "/log", Port: 1,
		command: func() *exec.Cmd { return exec.Command("sleep", "60") },
		ready:   func(context.Context) error { return nil },
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	m, err := s.Memory()
	if err != nil || m.RSS <= 0 || m.PSS <= 0 || m.Anon <= 0 || m.Anon > m.RSS {
		t.Fatalf("memory %+v, %v; want RSS, PSS and anonymous RSS above 0, anonymous at most RSS", m, err)
	}
	if got := s.PIDs(); len(got) != 1 || got[0] != pid {
		t.Fatalf("PIDs %v, want [%d]", got, pid)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Fatal("PID after Kill is not 0")
	}
	if err := exec.Command("kill", "-0", strconv.Itoa(pid)).Run(); err == nil {
		t.Fatalf("pid %d still alive after Kill", pid)
	}
}

func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	if err := exec.Command("dd", "if=/dev/zero", "of="+dir+"/f", "bs=64k", "count=4", "status=none").Run(); err != nil {
		t.Fatal(err)
	}
	n, err := DiskUsage(dir)
	if err != nil || n < 256<<10 {
		t.Fatalf("DiskUsage = %d, %v; want at least 256 KiB", n, err)
	}
}

// Kill returns once the server's children are gone too, as a restart of
// PostgreSQL needs (its shared memory is held until its backends exit).
func TestKillWaitsForChildren(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Dir: dir, Log: dir + "/log", Port: 1,
		command: func() *exec.Cmd { return exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait") },
		ready:   func(context.Context) error { return nil },
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for range 5000 { // the shell starts its two children
		if pids = s.PIDs(); len(pids) == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if len(pids) != 3 {
		s.Kill()
		t.Fatalf("PIDs %v: want the shell and its two sleeps", pids)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d of %v still running after Kill", pid, pids)
		}
	}
}

func TestRunningSeesZombies(t *testing.T) {
	if !running(os.Getpid()) {
		t.Fatal("running(this process) = false")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	for range 5000 { // until it has exited and is a zombie, not yet reaped
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			if running(pid) {
				t.Fatalf("running(zombie %d) = true", pid)
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("pid %d never became a zombie", pid)
}

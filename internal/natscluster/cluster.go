// Package natscluster runs a real nats-server cluster with JetStream as
// separate OS processes on 127.0.0.1, for tests and the crash harness: a
// node can be killed with SIGKILL and started again on the same ports and
// store, as a machine that crashes and reboots would be.
//
// Each node i lives in Options.Dir/n<i>: its config file (nats.conf), its
// JetStream file store (jetstream/) and its log (nats-server.log, appended
// to by every run of the node, with a line marking each start). Errors of
// Start and Restart include the tail of the failing node's log.
// JetStreamReady probes one server, also for the benchmarks, which run
// nats-server themselves.
package natscluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterName is the cluster name every node is configured with.
const ClusterName = "hourglass-test"

// Options configure Start. The zero value of every field but Dir has a
// default.
type Options struct {
	// Dir holds every node's config, JetStream store and log. Required; it
	// is created if missing.
	Dir string
	// Size is the number of nodes; default 3. Size 1 runs one JetStream
	// server with no cluster block (streams must then have one replica).
	Size int
	// Binary is the nats-server executable; default the result of Binary.
	Binary string
	// Logf, if set, is told of each start, kill, restart and stop.
	Logf func(format string, args ...any)
	// Timeout bounds each wait of Start and Restart for nodes to become
	// healthy, and of Kill for a process to exit; default 60s.
	Timeout time.Duration
	// SyncAlways makes every node fsync each JetStream write
	// (jetstream.sync_interval: always). The default is nats-server's own
	// (fsync every 2 minutes), which survives SIGKILL of the process (the
	// kernel keeps the written pages) but not the loss of the machine.
	SyncAlways bool
}

// Cluster is a running set of nats-server processes. Its methods may be
// called from any goroutine; Kill, Restart and Stop are serialised.
type Cluster struct {
	opts  Options
	nodes []*node

	mu sync.Mutex // serialises Kill, Restart and Stop
}

// node is one nats-server of the cluster. Its ports and paths never change;
// proc is the current run (nil when stopped or killed), guarded by
// Cluster.mu.
type node struct {
	index       int
	name        string // server_name, "n<i>"
	dir         string
	conf        string
	logPath     string
	clientPort  int
	clusterPort int
	httpPort    int
	proc        *proc
}

// proc is one run of a node's process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, set before exited is closed
}

// Start launches opts.Size nodes on free loopback ports and returns once the
// JetStream meta leader is elected and every node answers its health check
// (/healthz: JetStream current with the meta leader) and a JetStream API
// request over its own client port. If a port was taken between being
// picked and being bound, it retries with new ports (up to three times).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("natscluster: Options.Dir is required")
	}
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.Size < 0 {
		return nil, fmt.Errorf("natscluster: Size %d: must be at least 1", opts.Size)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Binary == "" {
		bin, err := Binary(ctx)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *Cluster
		c, err = start(ctx, opts)
		if err == nil {
			return c, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		opts.Logf("natscluster: a port was taken (attempt %d), retrying with new ports", attempt)
	}
	return nil, err
}

func start(ctx context.Context, opts Options) (*Cluster, error) {
	ports, err := freePorts(3 * opts.Size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	for i := range opts.Size {
		dir := filepath.Join(opts.Dir, fmt.Sprintf("n%d", i))
		n := &node{
			index:       i,
			name:        fmt.Sprintf("n%d", i),
			dir:         dir,
			conf:        filepath.Join(dir, "nats.conf"),
			logPath:     filepath.Join(dir, "nats-server.log"),
			clientPort:  ports[3*i],
			clusterPort: ports[3*i+1],
			httpPort:    ports[3*i+2],
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, fmt.Errorf("natscluster: %w", err)
		}
		if err := os.WriteFile(n.conf, []byte(c.config(n)), 0o644); err != nil {
			return nil, fmt.Errorf("natscluster: %w", err)
		}
	}
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitHealthy(ctx, n); err != nil {
			c.Stop()
			return nil, err
		}
	}
	opts.Logf("natscluster: %d node(s) ready: %s", opts.Size, c.URLs())
	return c, nil
}

// config is node n's nats-server configuration file.
func (c *Cluster) config(n *node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\n", n.name)
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\n", n.clientPort)
	fmt.Fprintf(&b, "http: 127.0.0.1:%d\n", n.httpPort)
	b.WriteString("logtime: true\n")
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", filepath.Join(n.dir, "jetstream"))
	if c.opts.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(c.nodes) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  routes: [\n", ClusterName, n.clusterPort)
		for _, o := range c.nodes {
			if o != n {
				fmt.Fprintf(&b, "    nats-route://127.0.0.1:%d\n", o.clusterPort)
			}
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// launch starts node n's process, its output appended to its log.
func (c *Cluster) launch(n *node) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("natscluster: %w", err)
	}
	cmd := exec.Command(c.opts.Binary, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("natscluster: starting node %d (%s): %w", n.index, c.opts.Binary, err)
	}
	fmt.Fprintf(logf, "=== natscluster: started node %d pid %d: %s -c %s\n", n.index, cmd.Process.Pid, c.opts.Binary, n.conf)
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== natscluster: node %d pid %d exited: %v\n", n.index, cmd.Process.Pid, p.err)
		logf.Close()
		close(p.exited)
	}()
	n.proc = p
	c.opts.Logf("natscluster: node %d started (pid %d, client 127.0.0.1:%d)", n.index, cmd.Process.Pid, n.clientPort)
	return nil
}

// waitHealthy polls node n until its /healthz answers 200 and a JetStream
// API request through its client port succeeds, bounded by opts.Timeout.
func (c *Cluster) waitHealthy(ctx context.Context, n *node) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	healthz := c.MonitorURL(n.index) + "/healthz"
	last := errors.New("not polled yet")
	for {
		select {
		case <-n.proc.exited:
			return fmt.Errorf("natscluster: node %d exited while starting: %v\n%s", n.index, n.proc.err, tail(n.logPath))
		default:
		}
		last = check(ctx, hc, healthz, c.URL(n.index))
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: node %d not healthy within %v (last: %v)\n%s", n.index, c.opts.Timeout, last, tail(n.logPath))
		case <-n.proc.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check is one health probe of a node: /healthz, then $JS.API.INFO over a
// connection to that node only.
func check(ctx context.Context, hc *http.Client, healthz, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	var body [256]byte
	k, _ := resp.Body.Read(body[:])
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:k])))
	}
	return JetStreamReady(ctx, url)
}

// JetStreamReady returns nil once the nats-server at url (nats://host:port)
// answers JetStream's account info ($JS.API.INFO) on a connection to it
// alone, opened for the probe and closed after it; each step waits 2 s at
// most.
func JetStreamReady(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.NoReconnect(), nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(actx); err != nil {
		return fmt.Errorf("JetStream account info: %w", err)
	}
	return nil
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// URLs is the comma-separated client URLs of all nodes, for nats.Connect or
// hourglass's --cluster / --nats-url.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// URL is node i's client URL, nats://127.0.0.1:<port>. It stays the same
// across Kill and Restart.
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].clientPort)
}

// MonitorURL is node i's HTTP monitoring base URL, http://127.0.0.1:<port>
// (its /healthz and /jsz). It stays the same across Kill and Restart.
func (c *Cluster) MonitorURL(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.nodes[i].httpPort)
}

// Name is node i's server name ("n<i>"), as JetStream reports it in stream
// and consumer cluster info (leader, replicas).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index is the index of the node whose server name is name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// LogPath is node i's log file (all its runs).
func (c *Cluster) LogPath(i int) string { return c.nodes[i].logPath }

// Running reports whether node i's process is running (not killed or
// stopped, and not exited by itself).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.nodes[i].proc
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to node i and waits for its process to exit. It is an
// error if node i is not running.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("natscluster: Kill(%d): the cluster has nodes 0..%d", i, len(c.nodes)-1)
	}
	n := c.nodes[i]
	if n.proc == nil {
		return fmt.Errorf("natscluster: Kill(%d): node is not running", i)
	}
	p := n.proc
	select {
	case <-p.exited:
		n.proc = nil
		return fmt.Errorf("natscluster: Kill(%d): node had already exited: %v\n%s", i, p.err, tail(n.logPath))
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("natscluster: Kill(%d): %w", i, err)
	}
	select {
	case <-p.exited:
	case <-time.After(c.opts.Timeout):
		return fmt.Errorf("natscluster: Kill(%d): pid %d still running %v after SIGKILL", i, p.cmd.Process.Pid, c.opts.Timeout)
	}
	n.proc = nil
	c.opts.Logf("natscluster: node %d killed (SIGKILL)", i)
	return nil
}

// Restart starts node i again on the same ports and store and waits until it
// has rejoined: its /healthz answers 200, which in a cluster means it is
// current with the meta leader and every stream and consumer replica it
// holds has caught up, and it answers JetStream API requests. It is an error
// if node i is running.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("natscluster: Restart(%d): the cluster has nodes 0..%d", i, len(c.nodes)-1)
	}
	n := c.nodes[i]
	if n.proc != nil {
		select {
		case <-n.proc.exited:
		default:
			return fmt.Errorf("natscluster: Restart(%d): node is running; Kill it first", i)
		}
	}
	if err := c.launch(n); err != nil {
		return err
	}
	if err := c.waitHealthy(context.Background(), n); err != nil {
		return err
	}
	c.opts.Logf("natscluster: node %d restarted and healthy", i)
	return nil
}

// Stop ends every running node: SIGTERM, then SIGKILL for any still running
// 10 s later. It waits for every process to exit. The store stays in Dir.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	var running []*node
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		if err := n.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("natscluster: node %d: SIGTERM: %w", n.index, err))
		}
		running = append(running, n)
	}
	deadline := time.After(10 * time.Second)
	for _, n := range running {
		select {
		case <-n.proc.exited:
		case <-deadline:
			c.opts.Logf("natscluster: node %d still running 10s after SIGTERM: SIGKILL", n.index)
			n.proc.cmd.Process.Signal(syscall.SIGKILL)
			<-n.proc.exited
		}
		n.proc = nil
	}
	if len(running) > 0 {
		c.opts.Logf("natscluster: stopped %d node(s)", len(running))
	}
	return errors.Join(errs...)
}

// freePorts returns k distinct free TCP ports on 127.0.0.1. They are free
// when picked; another process can take one before the node binds it, which
// Start detects and retries.
func freePorts(k int) ([]int, error) {
	ls := make([]net.Listener, 0, k)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, k)
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natscluster: picking a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last lines of the log at path, for error messages.
func tail(path string) string {
	const maxBytes, maxLines = 4096, 25
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(fi.Size()-maxBytes, 0)
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first may be cut
	}
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return "--- last lines of " + path + " ---\n" + strings.Join(lines, "\n")
}

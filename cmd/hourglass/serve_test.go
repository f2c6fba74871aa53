package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

func TestServeHelp(t *testing.T) {
	out, _, err := runApp(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--data-dir", "./hourglass-data", "--listen", "127.0.0.1:7420", "--segment-duration", "--preload-lead",
		"--fsync", "always", "--max-delay", "10y", "--max-body", "1MiB", "--auth-token", "--tls-cert", "--tls-key",
		"--delay-levels", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", "--max-attempts", "16",
		"HOURGLASS_DATA_DIR", "HOURGLASS_AUTH_TOKEN", "HOURGLASS_MAX_DELAY", "/healthz", "/readyz", "/metrics",
		"SIGTERM", "listening on", "--cors-origin", "--max-streams", "grpc.health.v1", "docs/CLI.md",
		catData, catListen, catLogs, catMessages, catQueue, catLimits, catSinks, catCluster,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
	// Every flag is in a category, with its environment variable, on a
	// line that fits a wide terminal.
	for _, f := range serveFlags() {
		name := f.Names()[0]
		if cat := f.(cli.CategorizableFlag).GetCategory(); cat == "" {
			t.Errorf("--%s has no category", name)
		}
		if env := "$" + envVar(name)[0]; !strings.Contains(out, env) {
			t.Errorf("serve --help lacks --%s's %s", name, env)
		}
	}
	for line := range strings.Lines(out) {
		if n := utf8.RuneCountInString(line); n > 170 {
			t.Errorf("a line of %d characters: %q", n, line)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
	if out, _, _ := runApp(t, "--help"); !strings.Contains(out, "serve") {
		t.Errorf("hourglass --help does not list serve:\n%s", out)
	}
}

func TestServeBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"fsync", []string{"--fsync", "sometimes"}, "want always, interval or none"},
		{"max_delay_unit", []string{"--max-delay", "10x"}, "--max-delay"},
		{"max_delay_zero", []string{"--max-delay", "0s"}, "must be positive"},
		{"max_body_too_big", []string{"--max-body", "100MiB"}, "at most 32 MiB"},
		{"max_body_unit", []string{"--max-body", "1TB"}, "unknown unit"},
		{"tls_half", []string{"--tls-cert", "c.pem"}, "go together"},
		{"delay_levels", []string{"--delay-levels", "1s nope"}, "delay level 2"},
		{"level_beyond_max_delay", []string{"--max-delay", "1h", "--delay-levels", "1s 2h"}, "beyond --max-delay"},
		{"preload_lead", []string{"--segment-duration", "2s", "--preload-lead", "5s"}, "shorter than --segment-duration"},
		{"max_attempts", []string{"--max-attempts", "0"}, "at least 1"},
		{"max_topics_zero", []string{"--max-topics", "0"}, "--max-topics 0: at least 1, or -1 for no limit"},
		{"topic_idle_zero", []string{"--topic-idle-timeout", "0s"}, "--topic-idle-timeout 0s: must be positive"},
		{"memory_limit_small", []string{"--memory-limit", "1MiB"}, "at least 32MiB"},
		{"memory_limit_unit", []string{"--memory-limit", "lots"}, "--memory-limit \"lots\""},
		{"log_level", []string{"--log-level", "loud"}, "--log-level"},
		{"argument", []string{"extra"}, "takes no arguments"},
		{"segment_duration_unit", []string{"--segment-duration", "2"}, "takes a duration with a unit"},
		{"cluster_sink_queue", []string{"--cluster", "nats://127.0.0.1:1", "--sink", "queue"}, "consumers read"},
		{"cluster_sink_webhook", []string{"--cluster", "nats://127.0.0.1:1", "--sink", "webhook", "--webhook", "*=http://127.0.0.1:1/"}, "cannot run with --cluster"},
		{"partitions_without_cluster", []string{"--partitions", "4"}, "--partitions needs --cluster"},
		{"cluster_partitions_zero", []string{"--cluster", "nats://127.0.0.1:1", "--partitions", "0"}, "from 1 to 4096"},
		{"cluster_lease_short", []string{"--cluster", "nats://127.0.0.1:1", "--lease-ttl", "100ms"}, "at least 1s"},
		{"cluster_replicas", []string{"--cluster", "nats://127.0.0.1:1", "--replicas", "7"}, "from 1 to 5"},
		{"compact_margin_without_cluster", []string{"--compact-margin", "5"}, "--compact-margin needs --cluster"},
		{"cluster_compact_margin_zero", []string{"--cluster", "nats://127.0.0.1:1", "--compact-margin", "0"}, "turn compaction off"},
		{"cluster_compact_interval_zero", []string{"--cluster", "nats://127.0.0.1:1", "--compact-interval", "0s"}, "positive duration"},
	} {
		args := append([]string{"serve", "--data-dir", filepath.Join(dir, tc.name), "--listen", "127.0.0.1:0"}, tc.args...)
		_, _, err := runApp(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestServeEnv(t *testing.T) {
	t.Setenv("HOURGLASS_FSYNC", "sometimes")
	_, _, err := runApp(t, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "--fsync") {
		t.Errorf("HOURGLASS_FSYNC=sometimes: err = %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs serve in-process with args and returns its address,
// a function that stops it (what SIGTERM does in main) and its stderr.
func startServe(t *testing.T, args ...string) (addr string, stop func() error, errOut *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	app := newApp()
	errOut = &syncBuffer{}
	app.Writer, app.ErrWriter = &bytes.Buffer{}, errOut
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, append([]string{"hourglass", "serve", "--listen", "127.0.0.1:0", "--fsync", "none"}, args...))
	}()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("serve did not stop")
			return nil
		}
	}
	t.Cleanup(func() { cancel() })
	re := regexp.MustCompile(`listening on (\S+)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v\n%s", err, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			return m[1], stop, errOut
		}
	}
	t.Fatalf("serve printed no address:\n%s", errOut.String())
	return "", nil, nil
}

// TestServeStartStop runs serve in-process, checks /healthz and a second
// server on the same data directory, and stops it.
func TestServeStartStop(t *testing.T) {
	dir := t.TempDir()
	addr, stop, errOut := startServe(t, "--data-dir", dir)
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
	_, _, err = runApp(t, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second server on the same data directory: err = %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("serve after stop: %v", err)
	}
	if !strings.Contains(errOut.String(), "stopped cleanly") {
		t.Errorf("no clean stop in the log:\n%s", errOut.String())
	}
}

// TestServeTLS serves with a self-signed certificate: a client that offers
// both HTTP/1.1 and h2 in ALPN (a browser, curl) gets HTTP/2 and the
// Connect side; the Go client (gRPC) gets native gRPC.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	addr, stop, _ := startServe(t, "--data-dir", filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post("https://"+addr+hourglassv1connect.HourglassServiceScheduleProcedure,
		"application/json", strings.NewReader(`{"topic":"t","delayMs":"60000"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.HasPrefix(string(body), `{"id":"`) {
		t.Errorf("JSON Schedule over TLS: %d over %s: %s; want 200 over HTTP/2", resp.StatusCode, resp.Proto, body)
	}
	cl, err := client.New("https://"+addr, client.WithTLS(&tls.Config{InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if id, err := cl.Schedule(ctx, client.Message{Topic: "t", Delay: time.Minute}); err != nil || id.IsZero() {
		t.Errorf("gRPC Schedule over TLS: %q, %v", id, err)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeProtocols serves every protocol on one address: gRPC (the Go
// client), Connect's binary protocol and JSON over HTTP/1.1, /metrics; JSON
// with an unknown field is refused naming it; a stop with a kept-alive idle
// connection open is clean and closes that connection.
func TestServeProtocols(t *testing.T) {
	addr, stop, errOut := startServe(t, "--data-dir", t.TempDir())
	url := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if id, err := cl.Schedule(ctx, client.Message{Topic: "t", Delay: time.Minute}); err != nil || id.IsZero() {
		t.Fatalf("gRPC Schedule: %q, %v", id, err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	c := hourglassv1connect.NewHourglassServiceClient(hc, url)
	for i := range 3 {
		res, err := c.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: []byte{byte(i)}}))
		if err != nil || len(res.Msg.Id) != 32 {
			t.Fatalf("Connect Schedule: %v", err)
		}
	}
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := hc.Post(url+hourglassv1connect.HourglassServiceScheduleProcedure, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"topic":"t","delayMs":"5"}`); code != 200 || !strings.HasPrefix(body, `{"id":"`) {
		t.Errorf("JSON Schedule: %d %s", code, body)
	}
	if code, body := post(`{"topic":"t","delayMS":"1800000"}`); code != 400 || !strings.Contains(body, `unknown field \"delayMS\"`) || !strings.Contains(body, "invalid_argument") {
		t.Errorf("JSON Schedule with a misspelt field: %d %s; want 400 invalid_argument naming delayMS", code, body)
	}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "# HELP") {
		t.Errorf("/metrics: %d", resp.StatusCode)
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(15 * time.Second)) // a guard: stop closes it first
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v", err)
	}
	io.ReadAll(resp.Body)
	if err := stop(); err != nil {
		t.Errorf("serve after stop: %v", err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after stop: %v, want EOF", err)
	}
	if log := errOut.String(); !strings.Contains(log, "stopped cleanly") {
		t.Errorf("log lacks a clean stop:\n%s", log)
	}
}

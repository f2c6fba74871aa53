package e2e

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	hgbuild "github.com/hourglassmq/hourglass/internal/buildinfo"
)

// The tests of what an operator runs and watches: the version, the build
// and per-RPC metrics, JSON logs and the systemd readiness notification.

// binaryInfo is what internal/buildinfo makes of the test binary's own
// build info, read from the file.
func binaryInfo(t *testing.T) hgbuild.Info {
	t.Helper()
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	return hgbuild.From(bi, "")
}

func TestVersionCommand(t *testing.T) {
	want := binaryInfo(t)
	var b strings.Builder
	want.Write(&b)
	if !strings.HasPrefix(b.String(), "hourglass ") || want.GoVersion == "" {
		t.Fatalf("the expected output is not a version: %q", b.String())
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("hourglass %s: %v\n%s", args[0], err, out)
		}
		if string(out) != b.String() {
			t.Errorf("hourglass %s printed\n%s\nwant (from the binary's build info)\n%s", args[0], out, b.String())
		}
	}
	if out, err := exec.Command(binary, "version", "extra").CombinedOutput(); err == nil || !strings.Contains(string(out), "no arguments") {
		t.Errorf("hourglass version extra: %v %s; want an error saying it takes no arguments", err, out)
	}
}

// scrape returns p's /metrics, parsed.
func scrape(t *testing.T, p *proc) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

// sample returns the value of the sample of fam whose labels include
// labels (a counter's or gauge's value, a histogram's count), or -1.
func sample(fams map[string]*dto.MetricFamily, fam string, labels map[string]string) float64 {
	f := fams[fam]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestRPCMetrics makes calls over gRPC and Connect, ones that succeed and
// ones that fail, and finds each on /metrics with its protocol, method
// and code; an open gRPC stream shows in hourglass_streams_open; and
// hourglass_build_info names the binary's build.
func TestRPCMetrics(t *testing.T) {
	p := start(t, t.TempDir(), nil)
	ctx := ctxT(t)
	// Connect: one Schedule answered, one refused (no topic).
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "m", Body: []byte("x"), When: delayMs(60_000)})
	if _, err := p.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Body: []byte("x")})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Schedule without a topic over Connect: %v, want InvalidArgument", err)
	}
	// gRPC-Web (connect-go's client): two Schedules answered.
	web := hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url, connect.WithGRPCWeb())
	if _, err := web.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "m", Body: []byte("w"), When: delayMs(60_000)})); err != nil {
		t.Fatalf("Schedule over gRPC-Web: %v", err)
	}
	// Connect: a ReceiveStream that gets one message and stays open.
	schedule(t, web, &hourglassv1.ScheduleRequest{Topic: "cs", Body: []byte("s"), When: delayMs(1)})
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	cst, err := p.client.ReceiveStream(cctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: "cs", LeaseMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	if !cst.Receive() || len(cst.Msg().Messages) != 1 {
		t.Fatalf("ReceiveStream over Connect: no message (%v)", cst.Err())
	}
	// gRPC: the same two as Connect, and a ReceiveStream held open.
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := hourglassv1.NewHourglassServiceClient(conn)
	if _, err := gc.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "m", Body: []byte("y"), When: delayMs(60_000)}); err != nil {
		t.Fatalf("Schedule over gRPC: %v", err)
	}
	if _, err := gc.Schedule(ctx, &hourglassv1.ScheduleRequest{Body: []byte("y")}); err == nil {
		t.Fatal("Schedule without a topic over gRPC answered OK")
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := gc.ReceiveStream(sctx, &hourglassv1.ReceiveStreamRequest{Topic: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Header(); err != nil { // the server has taken the stream
		t.Fatal(err)
	}

	fams := scrape(t, p)
	svc := "hourglass.v1.HourglassService"
	for _, c := range []struct {
		protocol, code string
	}{{"connect", "OK"}, {"connect", "InvalidArgument"}, {"grpc", "OK"}, {"grpc", "InvalidArgument"}} {
		labels := map[string]string{"protocol": c.protocol, "grpc_service": svc, "grpc_method": "Schedule", "grpc_type": "unary", "grpc_code": c.code}
		if v := sample(fams, "grpc_server_handled_total", labels); v != 1 {
			t.Errorf("grpc_server_handled_total%v = %v, want 1", labels, v)
		}
		delete(labels, "grpc_code")
		if v := sample(fams, "grpc_server_handling_seconds", labels); v != 2 {
			t.Errorf("grpc_server_handling_seconds%v has %v samples, want 2 (one OK, one refused)", labels, v)
		}
		if v := sample(fams, "grpc_server_started_total", labels); v != 2 {
			t.Errorf("grpc_server_started_total%v = %v, want 2", labels, v)
		}
	}
	webOK := map[string]string{"protocol": "grpcweb", "grpc_method": "Schedule", "grpc_code": "OK"}
	if v := sample(fams, "grpc_server_handled_total", webOK); v != 2 {
		t.Errorf("grpc_server_handled_total%v = %v, want 2", webOK, v)
	}
	open := map[string]string{"protocol": "grpc", "grpc_method": "ReceiveStream", "grpc_type": "server_stream"}
	if s, h := sample(fams, "grpc_server_started_total", open), sample(fams, "grpc_server_handled_total", open); s != 1 || h != -1 {
		t.Errorf("ReceiveStream: started %v, handled %v; want 1 started, none handled while it is open", s, h)
	}
	cs := map[string]string{"protocol": "connect", "grpc_method": "ReceiveStream", "grpc_type": "server_stream"}
	if s, m := sample(fams, "grpc_server_started_total", cs), sample(fams, "grpc_server_msg_sent_total", cs); s != 1 || m != 1 {
		t.Errorf("ReceiveStream over Connect: started %v, messages sent %v; want 1 and 1", s, m)
	}
	if v := sample(fams, "hourglass_streams_open", nil); v != 2 {
		t.Errorf("hourglass_streams_open = %v with two ReceiveStreams open, want 2", v)
	}
	ccancel()
	b := binaryInfo(t)
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	if b.Modified {
		rev += "+modified"
	}
	build := map[string]string{"version": b.Version, "revision": rev, "goversion": b.GoVersion}
	if v := sample(fams, "hourglass_build_info", build); v != 1 {
		t.Errorf("hourglass_build_info%v = %v, want 1; families: %v", build, v, fams["hourglass_build_info"])
	}

	cancel()
	if _, err := st.Recv(); err == nil {
		t.Fatal("ReceiveStream went on after its context ended")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams = scrape(t, p)
		open["grpc_code"] = "Canceled"
		if sample(fams, "grpc_server_handled_total", open) == 1 && sample(fams, "hourglass_streams_open", nil) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the client cancelled: ReceiveStream handled Canceled %v, hourglass_streams_open %v; want 1 and 0",
				sample(fams, "grpc_server_handled_total", open), sample(fams, "hourglass_streams_open", nil))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJSONLogs runs the server with --log-format json at debug level,
// makes calls (a failing one logs "rpc failed" with its duration), stops
// it, and checks that every line on stderr is a JSON object, and that
// durations are strings with a unit.
func TestJSONLogs(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--log-format", "json", "--log-level", "debug")
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "j", Body: []byte("x"), When: delayMs(10)})
	receive(t, p.client, "j", 1, 10*time.Second)
	if _, err := p.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Body: []byte("x")})); err == nil {
		t.Fatal("Schedule without a topic answered OK")
	}
	p.stop(syscall.SIGTERM)
	lines := strings.Split(strings.TrimSuffix(p.log(), "\n"), "\n")
	seen := map[string]bool{}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a stderr line is not a JSON object (%v): %s", err, line)
			continue
		}
		msg, _ := rec["msg"].(string)
		seen[strings.Fields(msg + " x")[0]] = true
		for _, k := range []string{"duration", "after", "took", "timeout"} {
			v, ok := rec[k]
			if !ok {
				continue
			}
			s, isString := v.(string)
			if _, err := time.ParseDuration(s); !isString || err != nil {
				t.Errorf("%q in %q is %v, want a duration with its unit such as \"1.5s\"", k, msg, v)
			}
		}
	}
	for _, m := range []string{"starting", "listening", "ready:", "rpc", "stopped"} {
		if !seen[m] {
			t.Errorf("no line whose msg starts with %q in the log:\n%s", m, p.log())
		}
	}
	if len(lines) < 6 {
		t.Errorf("%d lines in the log, want the start, serving, ready, a failed RPC and the stop", len(lines))
	}
}

// TestSystemdNotify starts the server with NOTIFY_SOCKET pointing at a
// datagram socket of the test, as systemd does for Type=notify, and reads
// READY=1 once /readyz answers and STOPPING=1 after SIGTERM.
func TestSystemdNotify(t *testing.T) {
	dir, err := os.MkdirTemp("", "hg-notify-") // short: a socket path has ~100 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	msgs := make(chan string, 10)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := ln.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the notify socket closed before %s", what)
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s on NOTIFY_SOCKET within 30 s", what)
		}
		return ""
	}
	p := start(t, t.TempDir(), []string{"NOTIFY_SOCKET=" + sock})
	if m := next("READY=1"); m != "READY=1" {
		t.Errorf("first notification %q, want READY=1", m)
	}
	resp, err := http.Get(p.url + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/readyz after READY=1: %v %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m := next("STOPPING=1"); m != "STOPPING=1" {
		t.Errorf("notification after SIGTERM %q, want STOPPING=1", m)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit within 30 s of SIGTERM")
	}
	if p.err != nil && !errors.Is(p.err, os.ErrProcessDone) {
		t.Errorf("exit after SIGTERM: %v", p.err)
	}
}

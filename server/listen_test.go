package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// TestServeOnePort: native gRPC and Connect share the one address Serve
// listens on, and Shutdown makes Serve return and frees the port.
func TestServeOnePort(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	ctx := testCtx(t)
	if _, err := s.grpcClient(t).Time(ctx, &hourglassv1.TimeRequest{}); err != nil {
		t.Fatalf("gRPC Time: %v", err)
	}
	if _, err := s.connectClient(t).Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{})); err != nil {
		t.Fatalf("Connect Time: %v", err)
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", s.addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Shutdown", s.addr)
	}
}

// TestShutdownFinishesCalls: Shutdown lets the unary calls in flight on
// either protocol finish and answer, then returns.
func TestShutdownFinishesCalls(t *testing.T) {
	calls := make(chan *fakeCall)
	s := serveTest(t, Options{Cluster: newFakeCluster(true, calls)}, nil)
	ctx := testCtx(t)
	results := make(chan error, 2)
	go func() {
		_, err := s.grpcClient(t).Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "t"})
		results <- err
	}()
	go func() {
		_, err := s.connectClient(t).Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t"}))
		results <- err
	}()
	inFlight := takeCalls(t, calls, 2)
	shut := make(chan error, 1)
	go func() { shut <- s.shutdown() }()
	waitFor(t, "BeginShutdown", func() bool { return s.srv.life.polls.Err() != nil })
	for _, c := range inFlight {
		c.answer <- nil
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("call in flight during Shutdown: %v", err)
		}
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEndsHealthWatch: a grpc.health.v1 Watch (which gRPC
// clients with health checking keep open) hears NOT_SERVING and ends, so
// that Shutdown need not wait for its deadline.
func TestShutdownEndsHealthWatch(t *testing.T) {
	s := serveTest(t, Options{Cluster: newFakeCluster(true, nil)}, nil)
	hc := healthpb.NewHealthClient(s.grpcConn(t))
	w, err := hc.Watch(testCtx(t), &healthpb.HealthCheckRequest{Service: serviceName})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 3*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a health Watch open: %v", err)
	}
	var last healthpb.HealthCheckResponse_ServingStatus
	for {
		r, err := w.Recv()
		if err != nil {
			wantStatus(t, "Watch after Shutdown", err, codes.Unavailable, "shutting down")
			break
		}
		last = r.Status
	}
	if last != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("last status before the Watch ended: %v, want NOT_SERVING", last)
	}
}

// testCert is a self-signed certificate for 127.0.0.1 and a pool that
// trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hourglass test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestServeTLS: with TLS, ALPN prefers h2 and gives HTTP/1.1 to a client
// that offers only that; gRPC, Connect and /healthz answer on the one
// port (TestTransports has every protocol on both versions).
func TestServeTLS(t *testing.T) {
	cert, pool := testCert(t)
	s := serveTestTLS(t, Options{}, nil, &tls.Config{Certificates: []tls.Certificate{cert}})
	for _, tc := range []struct {
		name   string
		offer  []string
		chosen string
	}{
		{"h2_only", []string{"h2"}, "h2"},
		{"both", []string{"http/1.1", "h2"}, "h2"},
		{"http1_only", []string{"http/1.1"}, "http/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: pool, NextProtos: tc.offer})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.ConnectionState().NegotiatedProtocol; got != tc.chosen {
				t.Errorf("ALPN chose %q, want %q", got, tc.chosen)
			}
		})
	}
	ctx := testCtx(t)
	g := hourglassv1.NewHourglassServiceClient(s.grpcConn(t, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))))
	if _, err := g.Time(ctx, &hourglassv1.TimeRequest{}); err != nil {
		t.Errorf("gRPC over TLS: %v", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	cc := hourglassv1connect.NewHourglassServiceClient(hc, "https://"+s.addr)
	if _, err := cc.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{})); err != nil {
		t.Errorf("Connect over TLS: %v", err)
	}
	resp, err := hc.Get("https://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("/healthz over TLS: %s %s, want 200 on HTTP/2", resp.Proto, resp.Status)
	}
}

// TestShutdownEndsStreams: Shutdown ends every long poll and stream of
// either protocol promptly, each as its contract says: ReceiveStream and
// a long poll cleanly, Consume and ScheduleStream with Unavailable.
func TestShutdownEndsStreams(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	ctx := testCtx(t)
	g := s.grpcClient(t)
	c := s.connectClient(t)
	type ended struct {
		name string
		err  error
	}
	ends := make(chan ended, 5)
	rs, err := g.ReceiveStream(ctx, &hourglassv1.ReceiveStreamRequest{Topic: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, err := rs.Recv(); ends <- ended{"grpc_receive_stream", err} }()
	cs := consumeOpen(t, ctx, g, &hourglassv1.ConsumeOpen{Topic: "idle", Credits: 10})
	go func() { _, err := cs.Recv(); ends <- ended{"consume", err} }()
	ss, err := g.ScheduleStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, err := ss.Recv(); ends <- ended{"schedule_stream", err} }()
	crs, err := c.ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: "idle"}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for crs.Receive() {
		}
		ends <- ended{"connect_receive_stream", crs.Err()}
	}()
	go func() {
		res, err := c.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "idle", WaitMs: 60_000}))
		if err == nil && len(res.Msg.Messages) != 0 {
			t.Errorf("long poll of an idle topic: %v", res.Msg.Messages)
		}
		ends <- ended{"connect_long_poll", err}
	}()
	waitFor(t, "the 5 calls in the server", func() bool { return s.srv.limits.open() == 5 })
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}
	want := map[string]codes.Code{
		"grpc_receive_stream": codes.OK, "connect_receive_stream": codes.OK, "connect_long_poll": codes.OK,
		"consume": codes.Unavailable, "schedule_stream": codes.Unavailable,
	}
	for range want {
		e := <-ends
		if e.err == io.EOF {
			e.err = nil
		}
		wantStatus(t, e.name, e.err, want[e.name])
	}
}

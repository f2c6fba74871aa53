package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf certificate: a server's for 127.0.0.1, or a
// client's with cn and dns names.
func (ca *testCA) issue(t *testing.T, cn string, server bool, dns ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, dir string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	kder, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

// TestMTLS: on the one TLS port, a client certificate the --tls-client-ca
// verifies is the credential that names its CN or SAN, on gRPC, Connect
// (HTTP/1.1) and gRPC-Web (HTTP/2); one no credential names is
// Unauthenticated; one of another CA fails the handshake; a client with
// no certificate may still send a token.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "hourglass test CA"), newCA(t, "another CA")
	certFile, keyFile := writePEM(t, dir, ca.issue(t, "server", true))
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)
	creds := filepath.Join(dir, "credentials.yaml")
	writeCredentials(t, creds, "  - {name: billing, certificate: [\"billing.internal\"], verbs: [produce], topics: [\"billing\"]}\n")
	p := startTLS(t, ca, "--credentials", creds, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)
	ctx := ctxT(t)

	clients := func(cert *tls.Certificate, token string) map[string]hourglassv1connect.HourglassServiceClient {
		tc := &tls.Config{RootCAs: x509.NewCertPool()}
		tc.RootCAs.AddCert(ca.cert)
		if cert != nil {
			// Sent whatever CAs the server names (Go's client would not
			// send one of another CA on its own).
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		mk := func(h1 bool) *http.Client {
			var ps http.Protocols
			if h1 {
				ps.SetHTTP1(true)
			} else {
				ps.SetHTTP2(true)
			}
			return &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone(), Protocols: &ps}}
		}
		var opts []connect.ClientOption
		if token != "" {
			opts = append(opts, connect.WithInterceptors(bearerAuth(token)))
		}
		url := "https://" + p.addr
		return map[string]hourglassv1connect.HourglassServiceClient{
			"grpc":        hourglassv1connect.NewHourglassServiceClient(mk(false), url, append(opts, connect.WithGRPC())...),
			"connect_h1":  hourglassv1connect.NewHourglassServiceClient(mk(true), url, opts...),
			"grpc_web_h2": hourglassv1connect.NewHourglassServiceClient(mk(false), url, append(opts, connect.WithGRPCWeb())...),
		}
	}
	billing := ca.issue(t, "someone", false, "billing.internal")
	stranger := ca.issue(t, "stranger", false)
	forged := other.issue(t, "billing.internal", false, "billing.internal")
	for proto, c := range clients(&billing, "") {
		t.Run("mapped/"+proto, func(t *testing.T) {
			if _, err := c.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: "billing", When: delayMs(60_000)})); err != nil {
				t.Errorf("Schedule as billing: %v", err)
			}
			_, err := c.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: "orders", When: delayMs(60_000)}))
			if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `credential "billing" may not produce on topic "orders"`) {
				t.Errorf("Schedule to orders: %v; want PermissionDenied", err)
			}
			res, err := c.WhoAmI(ctx, req(&hourglassv1.WhoAmIRequest{}))
			if err != nil || res.Msg.Name != "billing" || res.Msg.Method != "certificate" {
				t.Errorf("WhoAmI: %v %v", res, err)
			}
		})
	}
	for proto, c := range clients(&stranger, "") {
		_, err := c.Time(ctx, req(&hourglassv1.TimeRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "stranger") {
			t.Errorf("%s: a verified certificate no credential names: %v; want Unauthenticated naming it", proto, err)
		}
	}
	for proto, c := range clients(&forged, "") {
		if _, err := c.Time(ctx, req(&hourglassv1.TimeRequest{})); err == nil || connect.CodeOf(err) == connect.CodeUnauthenticated {
			t.Errorf("%s: a certificate of another CA: %v; want the handshake to fail", proto, err)
		}
	}
	for proto, c := range clients(nil, "viewer-token") {
		if res, err := c.WhoAmI(ctx, req(&hourglassv1.WhoAmIRequest{})); err != nil || res.Msg.Name != "viewer-cred" {
			t.Errorf("%s: a token without a certificate: %v %v", proto, res, err)
		}
	}
	for proto, c := range clients(nil, "") {
		if _, err := c.Time(ctx, req(&hourglassv1.TimeRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: neither certificate nor token: %v; want Unauthenticated", proto, err)
		}
	}
}

// startTLS starts a server with TLS flags and waits for /readyz over
// HTTPS (start's wait is over plain HTTP).
func startTLS(t *testing.T, ca *testCA, args ...string) *proc {
	t.Helper()
	tc := &tls.Config{RootCAs: x509.NewCertPool()}
	tc.RootCAs.AddCert(ca.cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	return startWith(t, t.TempDir(), nil, func(p *proc) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := hc.Get("https://" + p.addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz over TLS not 200 after 30s: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}, args...)
}

// TestMTLSFromCLI: the client commands take --tls-cert, --tls-key and
// --tls-ca: with a client certificate a credential names, send, get and
// cancel work against a server with --tls-client-ca, and backup too;
// without one the server refuses (Unauthenticated), and a half-given pair
// is refused before dialing.
func TestMTLSFromCLI(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "hourglass test CA")
	certFile, keyFile := writePEM(t, dir, ca.issue(t, "server", true))
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)
	cliDir := filepath.Join(dir, "cli")
	os.Mkdir(cliDir, 0o700)
	cliCert, cliKey := writePEM(t, cliDir, ca.issue(t, "ops-laptop", false))
	creds := filepath.Join(dir, "credentials.yaml")
	writeCredentials(t, creds, "  - {name: ops-cert, certificate: [\"ops-laptop\"], role: admin, topics: [\"*\"]}\n")
	p := startTLS(t, ca, "--credentials", creds, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)
	url := "https://" + p.addr
	tlsArgs := []string{"--addr", url, "--tls-cert", cliCert, "--tls-key", cliKey, "--tls-ca", caFile}

	id := strings.Fields(hgOK(t, "", append([]string{"send", "--topic", "cli-mtls", "--delay", "1h", "--body", "hi"}, tlsArgs...)...))[0]
	if out := hgOK(t, "", append([]string{"get", id, "--json"}, tlsArgs...)...); !strings.Contains(out, `"topic":"cli-mtls"`) && !strings.Contains(out, `"topic": "cli-mtls"`) {
		t.Errorf("get over mTLS: %s", out)
	}
	if out := hgOK(t, "", append([]string{"cancel", id}, tlsArgs...)...); !strings.Contains(out, "cancelled") {
		t.Errorf("cancel over mTLS: %s", out)
	}
	if out := hgOK(t, "", append([]string{"backup", "--to", filepath.Join(t.TempDir(), "copy")}, tlsArgs...)...); out == "" {
		t.Error("backup over mTLS printed nothing")
	}

	_, errOut, err := hg(t, "", "send", "--topic", "cli-mtls", "--now", "--body", "x", "--addr", url, "--tls-ca", caFile)
	if err == nil || !strings.Contains(errOut, "needs a credential") {
		t.Errorf("send without a client certificate: %v\n%s; want the server's Unauthenticated", err, errOut)
	}
	_, errOut, err = hg(t, "", "send", "--topic", "cli-mtls", "--now", "--body", "x", "--addr", url, "--tls-cert", cliCert)
	if err == nil || !strings.Contains(errOut, "--tls-cert and --tls-key go together") {
		t.Errorf("--tls-cert without --tls-key: %v\n%s", err, errOut)
	}
	_, errOut, err = hg(t, "", "send", "--topic", "cli-mtls", "--now", "--body", "x", "--addr", "http://"+p.addr, "--tls-ca", caFile)
	if err == nil || !strings.Contains(errOut, "need an https:// --addr") {
		t.Errorf("--tls-ca with http://: %v\n%s", err, errOut)
	}
}

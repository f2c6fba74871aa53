package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// clientTLSFlags are the TLS flags of every client command: a client
// certificate for a server with --tls-client-ca (mTLS), and the CA that
// signed the server's certificate. They are named as serve's (its
// --tls-cert and --tls-key are the server's own pair); their environment
// variables say CLIENT so that a shell that runs both keeps them apart.
var clientTLSFlags = []cli.Flag{
	&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"HOURGLASS_CLIENT_TLS_CERT"},
		Usage: "client certificate `FILE` (PEM) for a server with --tls-client-ca; needs --tls-key and an https:// --addr"},
	&cli.StringFlag{Name: "tls-key", EnvVars: []string{"HOURGLASS_CLIENT_TLS_KEY"},
		Usage: "the private key `FILE` (PEM) of --tls-cert"},
	&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"HOURGLASS_CLIENT_TLS_CA"},
		Usage: "verify the server's certificate against this CA `FILE` (PEM) instead of the system's roots"},
}

// clientTLS returns the TLS configuration the flags ask for: nil when
// they set nothing (the system's roots, no client certificate).
func clientTLS(c *cli.Context) (*tls.Config, error) {
	cert, key, ca := c.String("tls-cert"), c.String("tls-key"), c.String("tls-ca")
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if !strings.HasPrefix(c.String("addr"), "https://") {
		return nil, commandError(c, "--tls-cert, --tls-key and --tls-ca need an https:// --addr, got %q", c.String("addr"))
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if (cert == "") != (key == "") {
		return nil, commandError(c, "--tls-cert and --tls-key go together: give both (the client certificate and its key) or neither")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, commandError(c, "--tls-cert %s, --tls-key %s: %v", cert, key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, commandError(c, "--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, commandError(c, "--tls-ca %s: no PEM certificate in it", ca)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

package main

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hourglassmq/hourglass"
)

// loadCAs reads --tls-client-ca: the PEM certificates client certificates
// are verified against.
func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// reloadOnHUP rereads --credentials on each SIGHUP until the returned
// stop is called. A file that is not valid is logged and leaves the
// credentials in use. Without --credentials, SIGHUP is logged and
// ignored (it no longer ends the server).
func reloadOnHUP(log *slog.Logger, cfg *serveConfig, node *hourglass.Node) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if cfg.node.CredentialsFile == "" {
					log.Warn("SIGHUP: nothing to reload (no --credentials)")
					continue
				}
				if err := node.ReloadCredentials("SIGHUP"); err != nil {
					log.Error("SIGHUP: credentials not reloaded; the previous ones stay in use", "err", err)
					continue
				}
				log.Info("SIGHUP: credentials reloaded", "file", cfg.node.CredentialsFile)
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

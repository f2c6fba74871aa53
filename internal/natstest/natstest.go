// Package natstest runs a real nats-server with JetStream inside a test
// process, on a free port of 127.0.0.1, for the tests of the NATS sink, the
// cluster package and the end-to-end sink test. (internal/natscluster runs
// nats-server as separate processes, for tests that kill a node.)
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs the server with its store in a temporary directory of t and
// shuts it down when t ends.
func Start(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("natstest: nats-server did not accept connections within 10s")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// Command pebbledelay runs the peer benchmark's LSM delay service (package
// bench/internal/pebbledelay): delayed messages in a Pebble store keyed by
// delivery time, served over the part of Hourglass's gRPC API that the
// benchmark's Hourglass driver uses. A baseline, not a product.
//
//	pebbledelay --dir DIR [--host 127.0.0.1] [--port 7431] [--fsync always|interval] [--fsync-interval 1s]
//
// It listens once the store is open; SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/hourglassmq/hourglass/bench/internal/pebbledelay"
)

func main() {
	dir := flag.String("dir", "", "Pebble data directory (required)")
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 7431, "TCP port")
	fsync := flag.String("fsync", "always", "always: every write commits with pebble.Sync; interval: pebble.NoSync and a WAL sync every --fsync-interval")
	interval := flag.Duration("fsync-interval", time.Second, "WAL sync period under --fsync interval")
	version := flag.Bool("version", false, "print the version and Pebble's, and exit")
	flag.Parse()
	if *version {
		fmt.Println(versionLine())
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *dir, net.JoinHostPort(*host, strconv.Itoa(*port)), *fsync, *interval); err != nil {
		log.Error("pebbledelay", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, dir, addr, fsync string, interval time.Duration) error {
	if dir == "" {
		return fmt.Errorf("--dir is required")
	}
	if fsync != "always" && fsync != "interval" {
		return fmt.Errorf("--fsync %q: want always or interval", fsync)
	}
	if interval <= 0 {
		return fmt.Errorf("--fsync-interval %v: must be above 0", interval)
	}
	q, err := pebbledelay.Open(pebbledelay.Options{Dir: dir, Sync: fsync == "always", SyncInterval: interval, Logger: log})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		q.Close()
		return err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	pebbledelay.NewService(q).Register(srv)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // SERVING
	reflection.Register(srv)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		t := time.AfterFunc(5*time.Second, srv.Stop)
		srv.GracefulStop()
		t.Stop()
	}()
	log.Info("serving", "addr", lis.Addr().String(), "dir", dir, "fsync", fsync, "version", versionLine())
	serr := srv.Serve(lis)
	stop()
	if err := q.Close(); err != nil {
		return err
	}
	return serr
}

// versionLine names this program and the Pebble it was built with.
func versionLine() string {
	pebble := "pebble ?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cockroachdb/pebble/v2" {
				pebble = "pebble " + d.Version
			}
		}
	}
	return "pebbledelay (" + pebble + ")"
}

package peers

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
)

// pebbleSystem is the LSM approach of DDMQ Chronos and Meituan's delay
// queue: bench/cmd/pebbledelay, a delay service over a Pebble store keyed
// by delivery time (package bench/internal/pebbledelay). It speaks
// Hourglass's gRPC API, so the Hourglass driver and Go client drive it.
func pebbleSystem(cfg Config, fsync string) System {
	variant := "Sync per batch"
	dur := "fsync per write (each write batch commits with pebble.Sync; Pebble's commit pipeline shares one WAL fsync among concurrent commits)"
	if fsync == "interval" {
		variant = "NoSync + 1 s WAL sync"
		dur = "fsync every 1 s (pebble.NoSync commits, the WAL synced each second: a machine crash can lose about a second; " +
			"Pebble writes a NoSync record to the file only when its 32 KiB WAL block fills or at that sync, so a process kill can lose up to the last block)"
	}
	return System{
		Name: "pebble", Variant: variant, Durability: dur,
		Delivery: "at least once (Consume with a lease, then Ack; an ack deletes the key)",
		Notes: "bench/cmd/pebbledelay, a delay service over Pebble (as Chronos on RocksDB and Meituan on LevelDB): one key per message, (deliverAt ns big-endian, seq), " +
			"the request as value; a loop seeks from its cursor up to now, leases what is due to Consume streams, and sleeps until the next key is due (a write due sooner wakes it); " +
			"it serves the part of Hourglass's gRPC API that the Hourglass driver uses, so producers and consumers are the Hourglass driver's: " +
			fmt.Sprintf("ScheduleBatch with the message's ID as idempotency_key (a hash of it is the key's seq, so a retry overwrites), client.Consume with %s, acks settled on the stream", consumeCredits(cfg.ConsumeBatch)),
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			s.command = func() *exec.Cmd {
				return exec.Command(cfg.PebbleBin, "--dir", dir, "--port", strconv.Itoa(port), "--fsync", fsync)
			}
			// It listens once its store is open.
			s.ready = func(ctx context.Context) error { return tcpReady(ctx, s.Addr()) }
			return s
		},
		newDriver: func(s *Server) (Driver, error) { return hourglassDriver(cfg, s, ProtoDefault) },
	}
}

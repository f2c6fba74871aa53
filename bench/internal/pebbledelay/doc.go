// Package pebbledelay is a small delay service over a Pebble LSM store: the
// approach of DDMQ Chronos (RocksDB) and Meituan's delay queue (LevelDB),
// rebuilt as a baseline for the peer benchmark (bench/cmd/pebbledelay runs
// it as a server process). Messages sit in the store under keys ordered by
// delivery time; a loop scans the keys that are due and leases them to
// consumers; an acknowledged message is deleted.
//
// It serves the part of Hourglass's gRPC API (hourglass.v1.HourglassService)
// that the benchmark's Hourglass driver and the Go client's Consume use,
// with the same meaning: Schedule and ScheduleBatch (deliver_at or
// delay_ms, idempotency_key), Consume (open, credits, settle), Ack and
// AckBatch by receipt, Nack by receipt. Everything else answers
// Unimplemented.
//
// # Store
//
// One key per message, 16 bytes, then the ScheduleRequest it came in as the
// value (protobuf, deliver_at set):
//
//	+-----------------------------+---------------------+
//	| deliverAt: Unix ns, u64 BE  | seq: u64 BE         |
//	+-----------------------------+---------------------+
//
// so that key order is delivery order. seq is a counter that starts at the
// process's start time in nanoseconds; for a message with an
// idempotency_key it is instead a hash of topic and key with the top bit
// set, so that a producer's retry of a batch writes the same keys again
// rather than new messages (as long as the first copy is not yet acked:
// there is no idempotency window).
//
// # Durability
//
// Every write (a ScheduleBatch, the acks of one settle, a nack with a
// delay) is one pebble.Batch. With Options.Sync it commits with pebble.Sync
// and the answer waits for the WAL fsync that covers it. Pebble's commit
// pipeline already gathers the syncs of concurrent commits into one fsync
// (its LogWriter's sync queue), so concurrent producers share fsyncs without
// a second group-commit layer here. Without Sync it commits with
// pebble.NoSync, and a goroutine syncs the WAL every Options.SyncInterval
// (DB.LogData(nil, pebble.Sync)), like Redis's appendfsync everysec: a
// machine crash can lose the last interval of acknowledged writes. Unlike
// Redis, a process kill can lose some too: Pebble's WAL writer hands a
// NoSync record to the file only once its 32 KiB block is full or a sync
// is asked for (record.LogWriter), so up to the last block of writes, from
// at most the last interval, lives in the process alone.
//
// # Delivery
//
// The due scan resumes from a cursor, the last key it loaded, as Chronos
// keeps a seek timestamp: every stored key at or before the cursor is in
// memory (ready, or leased to a consumer), and the scan seeks just past it
// up to now. A write whose key is at or before the cursor (due already)
// goes to memory by itself; one due before the loop's next wake-up wakes it
// early. Ready messages are leased to Consume streams that have credits; a
// lease that ends unacknowledged puts its message back (at least once); an
// ack deletes the key. Leases are not stored: after a restart the cursor
// starts at the smallest key and every unacknowledged message is delivered
// again, attempt 0.
//
// # What it is not
//
// A baseline, not a product: no dead-letter topics, delay levels, cancel,
// Receive, Get or List; acks and nacks by receipt only; attempts are counted
// in memory only. One scan serves every topic, so a topic nobody consumes
// keeps its due messages in memory and, past Options.MaxReady, stalls the
// scan for all. Deletes are tombstones, so a scan after a restart steps
// over every deleted key that compaction has not yet dropped: the cost this
// design is known for.
package pebbledelay

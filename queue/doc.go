// Package queue is Hourglass's built-in queue, the embedded default sink.
// When a delayed message comes due the engine hands it to Deliver; a
// consumer then Receives it under a lease (visibility timeout) and Acks it,
// or Nacks it with a retry delay. A failure (an expired lease or a Nack)
// raises the message's attempt count; after MaxAttempts it goes to the
// topic "<topic>.dlq" instead.
//
// # Guarantees
//
//   - Deliver returns nil only once the batch is durable in the topic's
//     queue log (under the always fsync policy); concurrent callers of a
//     topic share one fsync. Different topics fsync their own files, in
//     parallel.
//   - Ack returns nil only once its ack record is durable; an acked
//     message is never handed out again, even after kill -9. Damage to
//     the files that would undo that makes Open refuse (see Damage).
//   - Every delivered message that is not acked is handed out again: after
//     its lease runs out, after a restart, or after a log of its topic
//     failed and the topic was opened again (at least once).
//   - The backlog stays on disk: memory holds the leased messages, those
//     waiting to be received again, and a few hundred bytes per topic, not
//     the messages waiting to be received for the first time.
//
// # Layout
//
// Each topic is a directory under Dir/topics, named as the topic (see
// ValidateTopic), holding two logs of package commitlog:
//
//	Dir/topics/orders/log/%020d.log    queue log: the delivered messages
//	Dir/topics/orders/acks/%020d.log   ack log: acks and checkpoints
//
// Records are framed by package record; offsets are commitlog offsets. A
// queue-log record (type 'M') is one message:
//
//	+--------+------------------+------------+------------------------------+
//	| ver u8 | ID deliverAt i64 | ID seq u64 | schedule payload (package    |
//	|  (=1)  |   UTC epoch ms   |            | message: AppendSchedule)     |
//	+--------+------------------+------------+------------------------------+
//
// Its offset in the queue log is its position: receipts, acks and
// checkpoints name messages by it. The ack log holds three record types:
//
//	'A' ack         ver u8 | offset u64 ...           acked queue-log records
//	'C' checkpoint  ver u8 | lwm u64 | cursor u64 | end u64 | unread u64 | n u32
//	'E' entries     ver u8 | { offset u64 | attempt u32 } ...
//
// A checkpoint is one head ('C') followed by entry records holding its n
// entries in offset order (at most 4096 per record), written by a single
// Append. It says: every queue-log record below lwm is acked; records
// in [lwm, cursor) were received and are acked except the entries below
// cursor, which were outstanding with the given attempt count; records
// from cursor on were never received except the entries at or above
// cursor (attempt 0), which were acked after a restart before the reader
// reached them; [cursor, end) holds unread records.
//
// # Memory and state
//
// In memory a topic keeps a reader at the cursor (the next never-received
// record), a lease table (offset -> deadline, attempt; plus an index by
// message ID), a FIFO of messages to hand out again (offset, attempt), and
// after a restart the acked offsets ahead of the cursor. The low-water
// mark is the lowest of the cursor and the outstanding offsets. Nothing
// else is persisted: a record received and no longer outstanding is acked.
//
// # Recovery
//
// Open replays each ack log from its first retained record: a complete
// checkpoint replaces the state, acks after it are applied. A checkpoint
// cut short by a crash (only possible at the end of what was durable) is
// dropped; entry records at the very start of the log belong to a
// checkpoint whose head was in a deleted segment, and are skipped (a newer
// complete checkpoint must follow); so are entry records right after a
// span repair covered with a skip record. Outstanding entries not acked since become receivable at once,
// with the attempt count they had at that checkpoint (a restart does not
// count as a failed attempt); records received after it and not acked are
// read again from the log as never received. Start-up reads each ack log
// (at most a few segments) and counts the queue-log records appended since
// the last checkpoint (about one segment at most), not the backlog, one
// topic at a time: each topic's files close once it is recovered (and a
// checkpoint is written if replay found anything after the last one),
// until the topic is used.
//
// # Retention
//
// A checkpoint is written once CheckpointEvery acks (or as many as the
// topic's outstanding messages, if more) or a queue-log segment's worth of
// deliveries followed the last one, and at Close. Once it is durable the
// ack-log segments before it and the queue-log segments below its lwm are
// deleted.
//
// # Topics cost what they hold
//
// A topic's logs claim disk as they fill (64 KiB steps for the queue log,
// 16 KiB for the ack log; commitlog's AllocStep), so a topic holding one
// message takes about 100 KiB. A topic with nothing leased or being
// appended and no Receive waiting is retired after Options.IdleTopic (a
// minute): it writes a final checkpoint and closes its logs, so that an
// idle topic holds no files, mappings or goroutines, whatever its backlog
// (which waits on disk). The next Deliver, Receive, Ack or Nack naming it
// opens it again as Open does (replaying nothing after that checkpoint);
// its counters in Stats carry over, and its gauges are those it had when
// retired. Admit bounds the topics (Options.MaxTopics, not counting
// dead-letter topics): the server admits each Schedule's topic before
// accepting it, so that Deliver never has to refuse one.
//
// # Leases and clocks
//
// Leases run on the monotonic clock: a step of the wall clock neither
// expires nor prolongs them. The wall clock (Options.Now) decides only
// whether a message is due and what a Message shows (ReceivedAt,
// LeaseUntil).
//
// # Damage
//
// Open opens each topic's ack log first and gives the queue log, as the
// position it must reach (commitlog's MinEnd), the furthest queue-log
// offset the ack log names (the last checkpoint's end and cursor, its
// entries, the acks after it): a queue log that ends below it lost
// durable records and is refused, never truncated to match. Damage in
// either log (a bad record with valid records after it, a missing
// segment, an ack log gone or without the checkpoint its retention relied
// on) makes Open fail with a *segfile.CorruptionError naming the file and
// offset and saying what is at stake (in the ack log: acked messages could
// be handed out again; in the queue log: messages would be lost) and
// naming hourglass repair. Repair (the queue's step of hourglass repair)
// covers damaged spans with commitlog skip records, keeps a copy of every
// file it changes, and appends a checkpoint stating the repaired state;
// when acks cannot be recovered it says how many messages may be handed
// out again, and goes on only with RepairOptions.AcceptRedelivery
// (RepairStep, hourglass repair's queue step, sets it and prints ACKS
// LOST with the count).
// VerifyTopic checks the two logs against each other (inspect verify).
// Lookup says whether a topic holds a message, waiting, leased or acked,
// without receiving or changing it.
// What no file names cannot be told from a write cut short by a crash:
// the last record of an ack log, and queue-log records past the last one
// the ack log names, are dropped as a torn tail when damaged after a
// crash (the queue logs a warning for the ack log). After a clean Close
// the final checkpoint names the whole queue log.
//
// # Faults
//
// A failed write or fsync leaves a log unusable (its error is sticky): the
// topic is closed and opened again from what is on disk, by itself with a
// backoff (50 ms doubling to 5 s) or at its next use, and its leases end
// (their messages are handed out again: at least once). A full disk when
// claiming space fails only the appends that need it. A failed checkpoint
// is tried again a second later. Health reports every stage of a topic
// (StageOpen, StageAppend, StageAck, StageCheckpoint, StageDeadLetter)
// that has been failing for DefaultStallAfter (2 s), naming the topic,
// the stage and since when; the server's /readyz includes it.
//
// # Flow control
//
// Under a flow policy (Policy.Flow) a topic's receivable messages go
// through one in-memory queue per flow key (the header
// message.FlowKeyHeader), kept only for keys with due or leased
// messages: Receive moves due records from the reader, and the messages
// waiting to be received again, into their keys' queues, and takes from
// the keys whose concurrency, rate and order allow it, in turn under
// Fair. A held message is outstanding: checkpoints name it as an entry
// with its attempt, and a restart makes it receivable again. An ordered
// key's retry (a Nack, or an expired lease under a backoff) waits in
// place at the key's head instead of being rescheduled, so the key does
// not move past it, across a restart too. A key's rate bucket fills from
// Open, so a restart gives no extra burst.
//
// # Nack, retries and dead letters
//
// Nack with delay <= 0 makes the message receivable again at once (no
// disk write). Nack with a delay calls the engine's Schedule (SetReschedule)
// with a new message: Attempt+1, Origin = the first attempt's ID; the
// original is then acked. When a failure raises the attempt count to
// MaxAttempts the message is appended to "<topic>.dlq" (same ID, Attempt
// = the failed attempts) and then acked here. A crash between the two
// steps of either leaves both copies (at least once). Dead-letter topics
// keep their failures: their messages are redelivered, not moved on.
//
// # Expiry
//
// A message past its expiry (message.ExpireAtHeader) is never handed out:
// a Receive or Take that reaches one ends it instead, dead-lettered with
// ReasonExpired or, under Policy.Expiry.Drop, acked away. Under
// Policy.Expiry.Unacked a message also expires when it is not acked by
// then: a lease ending after its expiry ends it so, and an Ack after it is
// refused (ErrExpired) and ends it so (expiry.go).
//
// It owns Dir/topics; it imports packages commitlog (its logs), engine
// (the Sink contract it implements and the Request a retry is), message,
// record and segfile.
package queue

// Package commitlog is Hourglass's write-ahead log: every Schedule and every
// Cancel becomes one record here before anything else happens to it.
//
// # Segments
//
// The log is a directory of segment files. Each has a fixed size
// (Options.SegmentSize, default 128 MiB) from its creation, so that its
// mapping never changes, but gets disk blocks a step at a time
// (Options.AllocStep, default 4 MiB), a step ahead of the writes: a new
// segment costs a step of disk, and no record is written where the file
// has no blocks, so a full disk fails the append that needs the next step
// (ErrDiskFull, with the ENOSPC and the file) instead of faulting a write
// through the mapping, and appends work again once a step is free. Blocks
// are allocated by writing zeros under SyncAlways while group commits are
// small, so that an fsync overwrites blocks in place, and with fallocate
// otherwise (see zeroFill for the rule). The next segment file is made
// ahead of need too. Files are named by the logical offset of
// their first byte of data, zero-padded so that lexical order is numeric order:
//
//	00000000000000000000.log   base 0
//	00000000000134217696.log   base 134217696 (= 0 + capacity of the first)
//
// A segment file:
//
//	0        4        6        8                 16                24        32
//	+--------+--------+--------+-----------------+-----------------+---------+
//	| "HGCL" | ver u16| 0 u16  | base offset u64 | capacity u64    | xxh64   |
//	+--------+--------+--------+-----------------+-----------------+---------+
//	| record | record | record | ... | zero bytes to the end of the file     |
//	+--------------------------------------------------------------+---------+
//
// The header checksum covers its first 24 bytes. Capacity is the file size
// minus the header. Records are framed by package record; a record never
// spans two segments, and the zero bytes after the last record are how a
// reader finds the end of the data (record.ErrEnd).
//
// # Offsets
//
// An offset is a logical byte position: the record at file position p of a
// segment with base b has offset b + p - 32. The next segment's base is this
// segment's base plus its capacity, so the unused tail of a sealed segment is
// a gap in the offset space that readers step over. Offsets are unique and
// increasing for the life of a data directory; Hourglass uses them as message
// sequence numbers.
//
// # Durability
//
// Appends copy records into the mapping under one lock. The SyncPolicy decides
// when they are flushed: SyncAlways makes Append wait for an fsync covering
// its records, shared by every appender waiting at the same time (group
// commit); SyncInterval flushes at least every Options.SyncInterval; SyncNone
// never flushes before Close. Readers see only what is durable under the
// policy (everything, under SyncNone), so nothing derived from the log can
// outlive a record the log itself might lose.
//
// # Recovery
//
// Open validates the headers of all segments but scans only the active one
// (the last holding data), so opening does not grow with the number of
// sealed segments. At the first position of the active segment that does
// not hold a whole record it tells a torn tail from damage (scanTail):
// when only zeros follow, that is the end; when no valid record follows,
// the bytes are the end of the last write, cut short: a torn tail, zeroed
// and reported in the Recovery. When a valid record follows anywhere
// after it, or the end lies below Options.MinEnd (a position another file
// names, such as reput's checkpoint), it is damage: Open returns a
// *segfile.CorruptionError (ErrDamaged) naming the file, the position and
// the offsets lost, and changes nothing. A gap between segment files, or
// a last file that ends below MinEnd, is ErrMissingSegment, also a
// *segfile.CorruptionError. A bad record in a sealed segment is a
// *segfile.CorruptionError returned by readers and by Verify, and is never
// served as data. So the log's end is never behind MinEnd, and an offset
// is never used twice.
//
// Repair (hourglass repair) covers damage with a skip record (TypeSkip),
// which readers step over with the span it covers, so that the records
// around it keep their offsets; it recreates a missing segment as one skip
// record. It never runs beside a writer.
//
// It owns one log directory (the engine's commitlog/, and each queue topic's
// log/ and acks/), and imports only packages record (framing) and segfile
// (corruption errors, durable file creation).
package commitlog

// Package inspect reads an Hourglass data directory without changing it and
// describes what is there: the schedule segments and how much of each is
// done, the entries of one segment, the commitlog and reput's position in
// it, damage found by checking every checksum, and the pending messages
// per hour ahead. It is the logic behind `hourglass inspect`.
//
// Everything here only reads: files are opened read-only, no lock is taken,
// nothing is truncated or repaired, so it is safe while a server runs on the
// same directory. A torn tail of a file being written is reported, not cut.
// Files a running server deletes while they are read (retired segments,
// trimmed commitlog segments) are skipped.
//
// The golden data directories under the repository's testdata/ are built
// by TestRegenTestdata in this package:
//
//	go generate ./internal/inspect
//
//go:generate go test . -run ^TestRegenTestdata$ -count=1 -regen
package inspect

package schedulelog

import (
	"fmt"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// BenchmarkAppend measures what reput pays per entry: validating the
// schedule payload, framing it and buffering it, with the buffer written
// to the OS every 256 KiB (no fsync). The MB/s figure counts the bytes on
// disk; compare it with the disk's sequential write rate, which bounds it
// once fsyncs are added.
func BenchmarkAppend(b *testing.B) {
	for _, body := range []int{128, 1024} {
		b.Run(fmt.Sprintf("body=%dB", body), func(b *testing.B) {
			w, err := Create(b.TempDir(), start, time.Hour, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			p := message.AppendSchedule(nil, msg(start+1, body, 1))
			n, _ := entryPayloadSize(len(p))
			b.SetBytes(int64(record.Size(n)))
			var seq uint64
			for b.Loop() {
				seq++
				if _, err := w.Append(seq, p); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkIterate measures loading a bucket into the wheel: a sequential
// pass over a segment of 100,000 entries (bodies of 128 B) from the page
// cache, decoding every message. Compare MB/s with the disk's sequential
// read rate, which bounds a cold load.
func BenchmarkIterate(b *testing.B) {
	const entries = 100_000
	w, err := Create(b.TempDir(), start, time.Hour, Options{})
	if err != nil {
		b.Fatal(err)
	}
	appendN(b, w, entries, 1, 1, 128)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	r, err := OpenReader(w.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.SetBytes(w.Size() - FirstOffset)
	for b.Loop() {
		it := r.Iter()
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil || n != entries {
			b.Fatalf("%d entries, %v", n, it.Err())
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkReadAt measures firing one entry: one pread and a decode, from
// the page cache, at scattered offsets.
func BenchmarkReadAt(b *testing.B) {
	w, err := Create(b.TempDir(), start, time.Hour, Options{})
	if err != nil {
		b.Fatal(err)
	}
	all := appendN(b, w, 10_000, 1, 1, 128)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	r, err := OpenReader(w.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 4096)
	var m message.Message
	i := 0
	for b.Loop() {
		i = (i + 7919) % len(all)
		if _, err := r.ReadAt(all[i].off, buf, &m); err != nil {
			b.Fatal(err)
		}
	}
}

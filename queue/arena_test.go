package queue

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReceivedBytesDoNotOverlap checks that the messages of one Receive,
// whose bytes share allocations, cannot change each other: appending to
// one's body or header value leaves the next one's as they were, also
// when they span more than one chunk.
func TestReceivedBytesDoNotOverlap(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	big := strings.Repeat("x", arenaChunk/2+1) // two per chunk do not fit
	bodies := []string{"a", "b", big, big + "y", "c"}
	deliver(t, q, "ar", bodies...)
	ms := recv(t, q, "ar", 10, time.Hour)
	if len(ms) != len(bodies) {
		t.Fatalf("received %d messages, want %d", len(ms), len(bodies))
	}
	for i := range ms {
		_ = append(ms[i].Body, '!')
		_ = append(ms[i].Headers[0].Value, '!')
	}
	for i, m := range ms {
		if string(m.Body) != bodies[i] || string(m.Headers[0].Value) != "v"+bodies[i] {
			t.Errorf("message %d: body %.10q (%d bytes), header %.10q after appending to the others", i, m.Body, len(m.Body), m.Headers[0].Value)
		}
	}
}

// TestReceiveOfOneAllocatesLittle: a Receive that takes one small message
// (most calls at a steady rate) allocates a small first chunk for its
// bytes, not a whole arenaChunk.
func TestReceiveOfOneAllocatesLittle(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	const n = 100
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = strings.Repeat("b", 100)
	}
	deliver(t, q, "one", bodies...)
	recv(t, q, "one", 1, time.Hour) // the topic's first call sets up what it keeps
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n - 1 {
		if ms := recv(t, q, "one", 1, time.Hour); len(ms) != 1 {
			t.Fatalf("received %d messages, want 1", len(ms))
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / (n - 1); per >= arenaChunk/2 {
		t.Errorf("a Receive of one 100-byte message allocated %d bytes; want less than %d", per, arenaChunk/2)
	}
}

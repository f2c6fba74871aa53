package queue

import (
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

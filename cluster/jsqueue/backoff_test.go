package jsqueue

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/queue"
)

// FuzzParseBackoff: the consumer metadata's backoff text never panics,
// and what it reads is written back as the same text's meaning.
func FuzzParseBackoff(f *testing.F) {
	f.Add(formatBackoff(queue.Backoff{Initial: 250 * time.Millisecond, Max: 4 * time.Second, Multiplier: 2.5, Jitter: 0.1}))
	f.Add("")
	f.Add("1,2,x,0")
	f.Add("-5,0,1,1")
	f.Fuzz(func(t *testing.T, s string) {
		b := parseBackoff(s)
		if again := parseBackoff(formatBackoff(b)); again != b && !(b.Multiplier != b.Multiplier || b.Jitter != b.Jitter) { // NaN never equals itself
			t.Fatalf("%q read as %+v, written and read again as %+v", s, b, again)
		}
	})
}

func TestBackoffText(t *testing.T) {
	b := queue.Backoff{Initial: 250 * time.Millisecond, Max: 4 * time.Second, Multiplier: 2.5, Jitter: 0.1}
	if got := parseBackoff(formatBackoff(b)); got != b {
		t.Errorf("round trip of %+v: %+v", b, got)
	}
	for _, bad := range []string{"", "1,2", "a,b,c,d"} {
		if got := parseBackoff(bad); !got.IsZero() {
			t.Errorf("parseBackoff(%q) = %+v; want none", bad, got)
		}
	}
}

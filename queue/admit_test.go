package queue

import (
	"errors"
	"testing"
	"time"
)

// TestAdmit: Admit lets in at most MaxTopics topics, dead-letter topics
// counted like any other; an admitted topic creates no file and is not seen by
// Receive or Stats until the first Deliver creates it; Deliver never
// refuses a topic.
func TestAdmit(t *testing.T) {
	q := openQ(t, t.TempDir(), func(o *Options) { o.MaxTopics = 3 })
	defer q.Close()
	for _, tc := range []struct {
		name, topic string
		wantErr     bool
	}{
		{"first", "a", false},
		{"second", "b", false},
		{"again_at_the_limit", "a", false},
		{"dead_letter_topic_counted", "a.dlq", false},
		{"fourth_refused", "c", true},
		{"dead_letter_topic_refused", "x.dlq", true},
		{"invalid_name", "-x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := q.Admit(tc.topic)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Admit(%q): %v, want error %v", tc.topic, err, tc.wantErr)
			}
			if tc.wantErr && tc.topic != "-x" && !errors.Is(err, ErrTooManyTopics) {
				t.Fatalf("Admit beyond the limit: %v, want ErrTooManyTopics", err)
			}
		})
	}
	if _, ok := q.Stats()["a"]; ok {
		t.Fatal("Stats lists a topic that was only admitted")
	}
	if ms, err := q.Receive(ctx(), "a", 1, 0, time.Minute); err != nil || len(ms) != 0 {
		t.Fatalf("Receive on an admitted topic: %v %v", ms, err)
	}
	deliver(t, q, "a", "x")
	if got := bodies(recv(t, q, "a", 10, time.Minute)); len(got) != 1 || got[0] != "x" {
		t.Fatalf("after Deliver created the admitted topic: received %q", got)
	}
	// Deliver creates what Admit would refuse: a message accepted before a
	// restart is delivered after it.
	deliver(t, q, "d", "y")
	if err := q.Admit("e"); !errors.Is(err, ErrTooManyTopics) {
		t.Fatalf("Admit with four topics held and a limit of 3: %v", err)
	}
}

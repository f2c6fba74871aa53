package server

import (
	"fmt"
	"testing"
)

// TestTopicSeries: the first MaxTopicSeries topics keep labels of their
// own for good; later ones share OtherTopics.
func TestTopicSeries(t *testing.T) {
	var s topicSeries
	for i := range MaxTopicSeries {
		if l := s.label(fmt.Sprint("t", i)); l != fmt.Sprint("t", i) {
			t.Fatalf("topic %d labelled %q, want its own name", i, l)
		}
	}
	for _, tc := range []struct{ name, topic, want string }{
		{"beyond_the_limit", "late", OtherTopics},
		{"named_topic_keeps_its_label", "t0", "t0"},
		{"last_named_topic", fmt.Sprint("t", MaxTopicSeries-1), fmt.Sprint("t", MaxTopicSeries-1)},
		{"beyond_again", "later", OtherTopics},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l := s.label(tc.topic); l != tc.want {
				t.Fatalf("label(%q) = %q, want %q", tc.topic, l, tc.want)
			}
		})
	}
}

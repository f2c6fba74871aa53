package natsjs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: Open waits out the errors of a JetStream that is still
// starting (what failed `serve --cluster` once in CI: "create stream
// HOURGLASS for hourglass.>: context deadline exceeded" right after the
// NATS cluster answered), and gives up at once on errors of the request.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"request_timed_out", fmt.Errorf("natsjs: create stream X: %w", context.DeadlineExceeded), true},
		{"nats_timeout", nats.ErrTimeout, true},
		{"no_responders", fmt.Errorf("natsjs: stream X: %w", nats.ErrNoResponders), true},
		{"jetstream_not_enabled", jetstream.ErrJetStreamNotEnabled, true},
		{"temporarily_unavailable", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"overlapping_subjects", &jetstream.APIError{Code: 400, ErrorCode: 10065, Description: "subjects overlap with an existing stream"}, false},
		{"stream_name_in_use", fmt.Errorf("natsjs: create stream X: %w", jetstream.ErrStreamNameAlreadyInUse), false},
		{"other", errors.New("natsjs: stream X: something else"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := transient(c.err); got != c.want {
				t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

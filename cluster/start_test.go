package cluster

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestStartRetry: a request of a partition's start that JetStream never
// answers (sent to a stream whose leader died) is given up after
// startAttempt and made again until it is answered, rather than waiting
// the client's 5 s and failing the partition; an answer that is an error
// (a missing stream) ends it at once, and so does the partition
// stopping.
func TestStartRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pt := &partition{ctx: t.Context()}
		calls := 0
		start := time.Now()
		err := pt.startRetry(func(ctx context.Context) error {
			calls++
			if dl, ok := ctx.Deadline(); !ok || dl.Sub(time.Now()) > startAttempt {
				t.Errorf("attempt %d: deadline %v (set %v); want at most %v ahead", calls, dl, ok, startAttempt)
			}
			if calls <= 2 { // unanswered: waits until its deadline
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		// Two unanswered attempts and retry's pause after each.
		if want := 2*startAttempt + 2*250*time.Millisecond; err != nil || calls != 3 || time.Since(start) != want {
			t.Errorf("startRetry = %v after %d calls and %v; want nil after 3 and %v", err, calls, time.Since(start), want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		pt := &partition{ctx: t.Context()}
		calls := 0
		err := pt.startRetry(func(context.Context) error {
			calls++
			return jetstream.ErrStreamNotFound
		})
		if !errors.Is(err, jetstream.ErrStreamNotFound) || calls != 1 {
			t.Errorf("startRetry = %v after %d calls; want the answer after 1", err, calls)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(t.Context())
		pt := &partition{ctx: ctx}
		calls := 0
		err := pt.startRetry(func(ctx context.Context) error {
			calls++
			if calls == 2 {
				stop() // the lease was lost
			}
			<-ctx.Done()
			return ctx.Err()
		})
		if err == nil || calls != 2 {
			t.Errorf("startRetry = %v after %d calls; want an error after 2 (the partition stopped)", err, calls)
		}
	})
}

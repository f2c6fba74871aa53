package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// uniqueName returns prefix and 8 random hex digits, so that runs and tests
// against a shared server never meet.
func uniqueName(prefix string) string {
	var b [4]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

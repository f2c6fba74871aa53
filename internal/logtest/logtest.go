// Package logtest holds slog handlers for tests that check what a
// component logged.
package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Durations collects the value of every attribute named Key, as a
// duration, from every record it handles. Safe for concurrent use.
type Durations struct {
	Key  string
	mu   sync.Mutex
	seen []time.Duration
}

func (h *Durations) Enabled(context.Context, slog.Level) bool { return true }
func (h *Durations) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *Durations) WithGroup(string) slog.Handler            { return h }

func (h *Durations) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == h.Key {
			h.mu.Lock()
			h.seen = append(h.seen, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// Seen returns a copy of the values collected so far, in log order.
func (h *Durations) Seen() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

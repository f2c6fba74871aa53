package client

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// PanicError is the result of a handler that panicked, under Recover.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack where it panicked.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Recover is middleware that turns a panic of the handler into its
// result, a *PanicError: the message is nacked with the panic's text as
// the reason, and the worker goes on. Without it a panic ends the
// program, as in any goroutine. Put it first in Worker.Use to cover the
// other middleware too.
func Recover() Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, d Delivery) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, d)
		})
	}
}

// Logging is middleware that logs every handled message on l: at Debug
// when it is acked, at Warn otherwise, with its topic, id, attempt, the
// outcome (OutcomeOf), how long the handler ran and its error.
func Logging(l *slog.Logger) Middleware {
	return Hooks{End: func(ctx context.Context, d Delivery, result error, took time.Duration) {
		level := slog.LevelDebug
		if result != nil {
			level = slog.LevelWarn
		}
		attrs := []slog.Attr{
			slog.String("topic", d.Topic), slog.String("id", d.ID.String()), slog.Int("attempt", d.Attempt),
			slog.String("outcome", string(OutcomeOf(result))), slog.Duration("took", took),
		}
		if result != nil {
			attrs = append(attrs, slog.String("error", result.Error()))
		}
		l.LogAttrs(ctx, level, "hourglass: message handled", attrs...)
	}}.Middleware()
}

// Hooks is middleware made of callbacks, for metrics and tracing. Start,
// if set, runs before each handler call and returns the ctx the handler
// gets (one carrying a span, say); End, if set, runs after it with that
// ctx, the handler's result (OutcomeOf tells what it does to the message)
// and how long the handler ran. Both run on the handler's goroutine.
type Hooks struct {
	Start func(ctx context.Context, d Delivery) context.Context
	End   func(ctx context.Context, d Delivery, result error, took time.Duration)
}

// Middleware returns the middleware that runs h's callbacks.
func (h Hooks) Middleware() Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, d Delivery) error {
			if h.Start != nil {
				ctx = h.Start(ctx, d)
			}
			start := time.Now()
			err := next.Handle(ctx, d)
			if h.End != nil {
				h.End(ctx, d, err, time.Since(start))
			}
			return err
		})
	}
}

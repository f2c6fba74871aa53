package main

import (
	"fmt"
	"io"
	"log/slog"

	"google.golang.org/grpc/grpclog"
)

// serveLog is where serve writes: its slog logger (--log-level,
// --log-format) and the "listening on" line that scripts and tests wait
// for. With --log-format json every line it writes is a JSON object.
type serveLog struct {
	*slog.Logger
	json bool
	// always is a logger of the same format without the level filter,
	// for the lines that --log-level must not hide.
	always *slog.Logger
}

// newServeLog returns the logger of --log-format format ("text" or
// "json") at level on w. Durations come out as strings with their unit
// ("1.5s"), not as JSON's nanosecond integers.
func newServeLog(w io.Writer, format string, level slog.Level) (*serveLog, error) {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	all := &slog.HandlerOptions{ReplaceAttr: durationText}
	switch format {
	case "text":
		return &serveLog{Logger: slog.New(slog.NewTextHandler(w, opts)), always: slog.New(slog.NewTextHandler(w, all))}, nil
	case "json":
		return &serveLog{Logger: slog.New(slog.NewJSONHandler(w, opts)), always: slog.New(slog.NewJSONHandler(w, all)), json: true}, nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// durationText is a slog ReplaceAttr that writes a time.Duration as its
// String ("250ms").
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// adopt makes l the process's default logger (and so the standard log
// package's) and grpc-go's error log, when it writes JSON: code that logs
// without being handed a logger then writes JSON too, not a plain line.
// With text it leaves them alone. Call it before serving.
func (l *serveLog) adopt() {
	if !l.json {
		return
	}
	slog.SetDefault(l.Logger)
	errs := slog.NewLogLogger(l.Handler(), slog.LevelError).Writer()
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, errs))
}

// listening announces the address, whatever --log-level: as the plain
// line "hourglass: listening on HOST:PORT (scheme)", or with JSON a record
// whose msg has the same words and whose addr is the address.
func (l *serveLog) listening(w io.Writer, addr, scheme string) {
	if !l.json {
		fmt.Fprintf(w, "hourglass: listening on %s (%s)\n", addr, scheme)
		return
	}
	l.always.Info(fmt.Sprintf("listening on %s (%s)", addr, scheme), "addr", addr)
}

// loggedError is an error serve has already written to its JSON log, so
// main prints no plain line for it.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// failed logs err as serve's last line when the log is JSON and returns
// it marked as logged; with text it returns err for main to print.
func (l *serveLog) failed(err error) error {
	if err == nil || !l.json {
		return err
	}
	l.always.Error("serve failed", "err", err)
	return loggedError{err}
}

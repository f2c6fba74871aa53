// Package natsjs is an engine sink that publishes each due message to NATS
// JetStream.
//
// A message of topic T is published to subject Prefix+T (default
// "hourglass.T") with its ID as Nats-Msg-Id, so that JetStream drops a
// second copy within the stream's duplicate window. Deliver returns only
// after JetStream acknowledged every message of the batch: only then does
// the engine write their done-records. A crash in between publishes them
// again after the restart, and the stream deduplicates them if that
// happens within its duplicate window (default 2 min; a longer outage
// than that can leave a duplicate in the stream, which consumers
// deduplicate by Nats-Msg-Id). A failed publish fails the batch, which
// the engine retries with backoff.
//
// Headers on each published message: Nats-Msg-Id, Hourglass-Id,
// Hourglass-Origin-Id, Hourglass-Topic, Hourglass-Deliver-At (RFC 3339
// with milliseconds, UTC), Hourglass-Attempt, and the message's own.
package natsjs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/sink"
)

// Defaults for zero Options fields.
const (
	DefaultPrefix     = "hourglass."
	DefaultStream     = "HOURGLASS"
	DefaultDuplicates = 2 * time.Minute
	DefaultTimeout    = 10 * time.Second
	DefaultReady      = time.Minute
)

// Options configure a Sink. URL is required.
type Options struct {
	// URL of the NATS servers, comma-separated (nats://127.0.0.1:4222).
	URL string
	// Prefix of the subjects; default "hourglass.". A topic is appended
	// as is ('.' in a topic separates subject tokens).
	Prefix string
	// Stream captures Prefix+">"; created if missing (file storage,
	// Duplicates window), used as it is if it exists. Default HOURGLASS.
	Stream string
	// Duplicates is the duplicate window of a stream this sink creates;
	// default 2 min.
	Duplicates time.Duration
	// Replicas of a stream this sink creates; default 1.
	Replicas int
	// Timeout bounds waiting for a batch's acknowledgements; default 10 s.
	Timeout time.Duration
	// ReadyTimeout bounds how long Open waits for JetStream to answer
	// (retrying every 500 ms while requests time out or JetStream says it
	// is temporarily unavailable); default 60 s.
	ReadyTimeout time.Duration
	// Options are extra nats.Connect options (credentials, TLS).
	Options []nats.Option
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Tracing records a span per published message, ended when JetStream
	// acknowledges it, and puts its trace context on the message
	// (traceparent, tracestate); nil: neither.
	Tracing *sink.Tracing
}

// Sink publishes due messages to JetStream.
type Sink struct {
	opts Options
	nc   *nats.Conn
	js   jetstream.JetStream
}

// Open connects, makes sure the stream exists and returns the Sink.
func Open(ctx context.Context, opts Options) (*Sink, error) {
	if opts.URL == "" {
		return nil, errors.New("natsjs: no URL: give nats://HOST:PORT")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, ".") || strings.ContainsAny(opts.Prefix, " *>\t") {
		return nil, fmt.Errorf("natsjs: subject prefix %q: want tokens ending in '.', without spaces or wildcards, e.g. hourglass.", opts.Prefix)
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if opts.Duplicates <= 0 {
		opts.Duplicates = DefaultDuplicates
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReady
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger
	nopts := append([]nats.Option{
		nats.Name("hourglass"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("natsjs: disconnected", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("natsjs: reconnected", "url", nc.ConnectedUrl()) }),
	}, opts.Options...)
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect to %s: %w", opts.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	// JetStream may not answer yet (a cluster still electing its leader,
	// a node just restarted): wait for it, up to ReadyTimeout.
	readyBy := time.Now().Add(opts.ReadyTimeout)
	for {
		err = ensureStream(ctx, js, opts)
		if err == nil || !transient(err) || ctx.Err() != nil || time.Now().After(readyBy) {
			break
		}
		log.Warn("natsjs: JetStream not ready; retrying", "stream", opts.Stream, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(readyRetry):
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Sink{opts: opts, nc: nc, js: js}, nil
}

// readyRetry is the pause between attempts while JetStream is not ready.
const readyRetry = 500 * time.Millisecond

// ensureStream makes sure opts.Stream exists, creating it if missing.
func ensureStream(ctx context.Context, js jetstream.JetStream, opts Options) error {
	_, err := js.Stream(ctx, opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: opts.Stream, Subjects: []string{opts.Prefix + ">"}, Storage: jetstream.FileStorage,
			Duplicates: opts.Duplicates, Replicas: opts.Replicas,
		})
		if err != nil {
			return fmt.Errorf("natsjs: create stream %s for %s>: %w", opts.Stream, opts.Prefix, err)
		}
		opts.Logger.Info("natsjs: created stream", "stream", opts.Stream, "subjects", opts.Prefix+">", "duplicates", opts.Duplicates, "replicas", max(opts.Replicas, 1))
		return nil
	}
	if err != nil {
		return fmt.Errorf("natsjs: stream %s: %w", opts.Stream, err)
	}
	return nil
}

// transient reports whether err may go away by itself while JetStream
// starts: a request that timed out or found no responder, or an API error
// of the 5xx kind ("JetStream system temporarily unavailable"). Errors of
// the request itself (a bad name, subjects that overlap another stream's)
// are not.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// Stream returns the name of the stream the sink publishes to.
func (s *Sink) Stream() string { return s.opts.Stream }

// Prefix returns the prefix of the subjects: topic T is on Prefix()+T.
func (s *Sink) Prefix() string { return s.opts.Prefix }

// Subject returns the subject topic's messages are published to.
func (s *Sink) Subject(topic string) string { return s.opts.Prefix + topic }

// Deliver implements engine.Sink: it publishes the batch asynchronously
// and returns once JetStream acknowledged all of it, or the first error.
func (s *Sink) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	subj := s.Subject(topic)
	futs := make([]jetstream.PubAckFuture, 0, len(batch))
	ends := make([]func(error), 0, len(batch))
	var err error
	defer func() {
		for _, end := range ends {
			end(err) // those acknowledged have ended: a no-op
		}
	}()
	for _, d := range batch {
		m := d.Message
		msg := nats.NewMsg(subj)
		// A copy: the future keeps msg to publish it again on a retry,
		// and m.Body is only valid during this call.
		msg.Data = bytes.Clone(m.Body)
		for _, h := range m.Headers {
			msg.Header.Add(string(h.Key), string(h.Value))
		}
		sink.SetHeaders(topic, d, msg.Header.Set)
		ends = append(ends, s.opts.Tracing.Start(ctx, topic, d, msg.Header.Set))
		id := d.ID.String()
		f, perr := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(s.opts.Stream))
		if perr != nil {
			err = fmt.Errorf("natsjs: publish %s to %s: %w", id, subj, perr)
			return err
		}
		futs = append(futs, f)
	}
	for i, f := range futs {
		select {
		case <-f.Ok():
			ends[i](nil)
		case perr := <-f.Err():
			err = fmt.Errorf("natsjs: publish to %s: %w", subj, perr)
			return err
		case <-ctx.Done():
			err = fmt.Errorf("natsjs: waiting for JetStream to acknowledge %d messages on %s: %w", len(futs), subj, ctx.Err())
			return err
		}
	}
	return nil
}

// Close drains the connection.
func (s *Sink) Close() error {
	return s.nc.Drain()
}

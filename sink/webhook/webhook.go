// Package webhook is an engine sink that delivers each due message as an
// HTTP POST to a URL chosen by its topic.
//
// A message is done when its POST is answered 2xx. Any other answer, a
// timeout or a connection error is a failed attempt: the message is
// rescheduled through the engine (a new message with Attempt+1 and the
// same Origin, due after Backoff(attempt)), and after MaxAttempts failed
// attempts it is handed to DeadLetter instead. Either way the original is
// then done. Delivery is at least once: a crash after a POST was answered
// and before the engine recorded it done posts it again, and receivers
// deduplicate by the Hourglass-Id header (or Hourglass-Origin-Id, which
// stays the same across retries).
//
// The request: the message body as the request body, Content-Type
// application/octet-stream unless the message has a content-type header,
// and headers
//
//	Hourglass-Id           the message ID (32 hex digits)
//	Hourglass-Origin-Id    the first attempt's ID
//	Hourglass-Topic        the topic
//	Hourglass-Deliver-At   deliverAt, RFC 3339 with milliseconds, UTC
//	Hourglass-Attempt      0 for the first attempt
//
// plus each of the message's own headers as is.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/sink"
)

// Route sends the topics matching Pattern (path.Match syntax: * matches
// any run of characters, ? one) to URL.
type Route struct {
	Pattern string
	URL     string
}

// ParseRoute parses "PATTERN=URL", e.g. "orders.*=http://127.0.0.1:8080/hook".
func ParseRoute(s string) (Route, error) {
	pat, u, ok := strings.Cut(s, "=")
	if !ok || pat == "" || u == "" {
		return Route{}, fmt.Errorf("webhook route %q: want PATTERN=URL, e.g. 'orders.*=http://127.0.0.1:8080/hook'", s)
	}
	r := Route{Pattern: pat, URL: u}
	return r, r.check()
}

func (r Route) check() error {
	if _, err := path.Match(r.Pattern, ""); err != nil {
		return fmt.Errorf("webhook route pattern %q: %v (use * and ?, e.g. orders.*)", r.Pattern, err)
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook route URL %q: want an absolute http:// or https:// URL", r.URL)
	}
	return nil
}

// Defaults for zero Options fields.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 16
	DefaultParallel    = 16
)

// DefaultBackoff is 1 s doubled per failed attempt, at most 5 min.
func DefaultBackoff(failures int) time.Duration {
	d := time.Second << min(failures-1, 9)
	return min(d, 5*time.Minute)
}

// Options configure a Sink. Routes and Reschedule are required.
type Options struct {
	// Routes are tried in order; the first whose pattern matches the
	// topic takes the message. A topic no route matches is dead-lettered
	// at once (a configuration error, logged).
	Routes []Route
	// Reschedule schedules a retry (the engine's Schedule). Required.
	Reschedule func(context.Context, engine.Request) (message.ID, error)
	// DeadLetter keeps a message that failed MaxAttempts times (or has no
	// route); the server puts it in the built-in queue's <topic>.dlq. nil
	// drops it with an error log.
	DeadLetter func(ctx context.Context, topic string, d engine.Delivery) error
	// Timeout of each POST; default 10 s.
	Timeout time.Duration
	// MaxAttempts before dead-lettering; default 16.
	MaxAttempts int
	// Backoff is the delay before retry number failures (1 for the first
	// failure); default DefaultBackoff.
	Backoff func(failures int) time.Duration
	// Parallel bounds the POSTs in flight per Deliver call; default 16.
	Parallel int
	// Client; default a client with Timeout.
	Client *http.Client
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Tracing records a span per POST and puts its trace context on the
	// request (traceparent, tracestate); nil: neither.
	Tracing *sink.Tracing
}

// Sink posts due messages to webhooks. Its Deliver may be called from
// several goroutines (one per topic).
type Sink struct {
	opts Options
}

// New checks opts and returns a Sink.
func New(opts Options) (*Sink, error) {
	if len(opts.Routes) == 0 {
		return nil, errors.New("webhook: no routes: give at least one PATTERN=URL")
	}
	for _, r := range opts.Routes {
		if err := r.check(); err != nil {
			return nil, err
		}
	}
	if opts.Reschedule == nil {
		return nil, errors.New("webhook: Options.Reschedule is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: opts.Timeout}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Sink{opts: opts}, nil
}

// URL returns the URL topic's messages go to, or "" if no route matches.
func (s *Sink) URL(topic string) string {
	for _, r := range s.opts.Routes {
		if ok, _ := path.Match(r.Pattern, topic); ok {
			return r.URL
		}
	}
	return ""
}

// Deliver implements engine.Sink: it posts every message of batch, then
// reschedules or dead-letters the failed ones. It returns an error only
// when a failed message could be neither rescheduled nor dead-lettered;
// the engine then retries the whole batch (so some are posted again).
func (s *Sink) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	u := s.URL(topic)
	failed := make([]error, len(batch))
	if u == "" {
		for i := range failed {
			failed[i] = fmt.Errorf("no --webhook route matches topic %q", topic)
		}
	} else {
		sem := make(chan struct{}, s.opts.Parallel)
		var wg sync.WaitGroup
		for i := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				failed[i] = s.post(ctx, u, topic, batch[i])
			})
		}
		wg.Wait()
	}
	var errs []error
	for i, ferr := range failed {
		if ferr == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.fail(ctx, topic, batch[i], ferr, u == ""); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// post makes one attempt; nil means a 2xx answer.
func (s *Sink) post(ctx context.Context, u, topic string, d engine.Delivery) (err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	m := d.Message
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(m.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	for _, h := range m.Headers {
		req.Header.Set(string(h.Key), string(h.Value))
	}
	sink.SetHeaders(topic, d, req.Header.Set)
	end := s.opts.Tracing.Start(ctx, topic, d, req.Header.Set)
	defer func() { end(err) }()
	res, err := s.opts.Client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s", u, res.Status)
	}
	return nil
}

// fail reschedules d after a failed attempt, or dead-letters it when its
// attempts are used up (or it has nowhere to go).
func (s *Sink) fail(ctx context.Context, topic string, d engine.Delivery, cause error, noRoute bool) error {
	m := d.Message
	failures := int(m.Attempt) + 1
	if noRoute || failures >= s.opts.MaxAttempts {
		s.opts.Logger.Warn("webhook: dead-lettering", "topic", topic, "id", d.ID, "attempts", failures, "err", cause)
		if s.opts.DeadLetter == nil {
			s.opts.Logger.Error("webhook: no dead-letter destination; message dropped", "topic", topic, "id", d.ID)
			return nil
		}
		return s.opts.DeadLetter(ctx, topic, d)
	}
	delay := s.opts.Backoff(failures)
	s.opts.Logger.Info("webhook: attempt failed; retrying", "topic", topic, "id", d.ID, "attempt", m.Attempt, "retry_in", delay, "err", cause)
	_, err := s.opts.Reschedule(ctx, engine.Request{
		Topic: topic, Headers: cloneHeaders(m.Headers), Body: bytes.Clone(m.Body),
		Delay: delay, Attempt: m.Attempt + 1, Origin: sink.Origin(d),
	})
	if err != nil {
		return fmt.Errorf("webhook: reschedule %s: %w", d.ID, err)
	}
	return nil
}

func cloneHeaders(hs []message.Header) []message.Header {
	out := make([]message.Header, len(hs))
	for i, h := range hs {
		out[i] = message.Header{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)}
	}
	return out
}

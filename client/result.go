package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// RetryError is the result of a handler that wants its message delivered
// again after a delay: a nack with that delay. Make one with Retry.
type RetryError struct {
	// After is the delay; 0 leaves it to the topic's retry backoff on the
	// server.
	After time.Duration
}

// Retry returns the result that has the message delivered again after
// the given delay (rounded up to whole milliseconds, never early): the
// handler returns it, or an error that wraps it (fmt.Errorf("...: %w",
// client.Retry(time.Minute))), whose text becomes the nack's reason.
func Retry(after time.Duration) error { return &RetryError{After: max(after, 0)} }

func (e *RetryError) Error() string { return fmt.Sprintf("retry after %v", e.After) }

// DeadLetterError is the result of a handler that knows its message can
// never be handled: it goes to the dead-letter topic "<topic>.dlq" at
// once, whatever attempts remain. Make one with DeadLetter.
type DeadLetterError struct {
	Reason string
}

// DeadLetter returns the result that sends the message to its topic's
// dead-letter topic now, with reason kept beside it (the handler returns
// it, or an error that wraps it; the whole text becomes the reason).
func DeadLetter(reason string) error { return &DeadLetterError{Reason: reason} }

func (e *DeadLetterError) Error() string { return e.Reason }

// Outcome names what a handler's result does to its message; metrics
// and logs label deliveries with it.
type Outcome string

// Outcomes of OutcomeOf.
const (
	OutcomeAck        Outcome = "ack"         // nil: acked
	OutcomeRetry      Outcome = "retry"       // a RetryError: nacked with its delay
	OutcomeDeadLetter Outcome = "dead-letter" // a DeadLetterError: dead-lettered
	OutcomeNack       Outcome = "nack"        // any other error: nacked with the topic's backoff
)

// OutcomeOf says what a handler's result does to its message.
func OutcomeOf(err error) Outcome {
	var r *RetryError
	var d *DeadLetterError
	switch {
	case err == nil:
		return OutcomeAck
	case errors.As(err, &d):
		return OutcomeDeadLetter
	case errors.As(err, &r):
		return OutcomeRetry
	}
	return OutcomeNack
}

// maxReason is the server's limit on a nack's reason, in bytes.
const maxReason = 1000

// action is what to tell the server of a handler's result.
type action struct {
	nack       bool
	delay      time.Duration
	reason     string
	deadLetter bool
	plain      bool // an error that is neither a RetryError nor a DeadLetterError
}

// actionOf maps a handler's result: nil acks; DeadLetter dead-letters;
// Retry nacks with its delay; any other error nacks with delay 0. Every
// nack carries the error's text as its reason, cut to the server's limit.
func actionOf(err error) action {
	if err == nil {
		return action{}
	}
	a := action{nack: true, reason: reasonOf(err)}
	var r *RetryError
	var d *DeadLetterError
	switch {
	case errors.As(err, &d):
		a.deadLetter = true
	case errors.As(err, &r):
		a.delay = (r.After + time.Millisecond - 1).Truncate(time.Millisecond)
	default:
		a.plain = true
	}
	return a
}

// reasonOf is err's text as valid UTF-8, cut to at most maxReason bytes
// on a character boundary.
func reasonOf(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= maxReason {
		return s
	}
	n := maxReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

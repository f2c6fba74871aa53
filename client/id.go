package client

import (
	"fmt"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// ID names a scheduled message. Its text form is the 32 lowercase hex
// digits the server answers: the delivery time, then a sequence number, so
// that IDs in text order are in delivery order. IDs are comparable; the
// zero ID (ID{}) names no message.
type ID struct {
	m  message.ID
	ok bool // false for the zero ID
}

// ParseID parses the text form of an ID (what String returns and the
// server answers, 32 hex digits).
func ParseID(s string) (ID, error) {
	m, err := message.ParseID(s)
	if err != nil {
		return ID{}, fmt.Errorf("client: %s", strings.TrimPrefix(err.Error(), "message: "))
	}
	return ID{m: m, ok: true}, nil
}

// idOf parses an ID the server answered for op.
func idOf(op, s string) (ID, error) {
	id, err := ParseID(s)
	if err != nil {
		return ID{}, fmt.Errorf("client: %s: the server answered an ID this client cannot read: %w", op, err)
	}
	return id, nil
}

// String returns the ID's 32 hex digits, or "" for the zero ID.
func (id ID) String() string {
	if id.IsZero() {
		return ""
	}
	return id.m.String()
}

// IsZero reports whether id is the zero ID, which names no message.
func (id ID) IsZero() bool { return !id.ok }

// Time returns the delivery time the ID carries, to the millisecond, as
// the server's clock tells it (the zero time for the zero ID). For a
// rescheduled or retried message it is the time of that ID, not of the
// first one.
func (id ID) Time() time.Time {
	if !id.ok {
		return time.Time{}
	}
	return id.m.Time()
}

// MarshalText returns String's form, so that IDs are strings in JSON.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses what MarshalText returns; empty text is the zero ID.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = ID{}
		return nil
	}
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// Ref names one message for Cancel, Get and Reschedule: an ID, or a Key.
type Ref interface {
	// ref returns the message's id, or its topic and key.
	ref() (id, topic, key string)
}

func (id ID) ref() (string, string, string) { return id.String(), "", "" }

// Key names a message by its topic and the IdempotencyKey it was
// scheduled with. Unlike the deduplication of Schedule, which lasts the
// server's --idempotency-window, a Key names the message for its whole
// life.
type Key struct {
	Topic string
	Key   string
}

func (k Key) ref() (string, string, string) { return "", k.Topic, k.Key }

// String returns "topic/key", for messages and logs.
func (k Key) String() string { return k.Topic + "/" + k.Key }

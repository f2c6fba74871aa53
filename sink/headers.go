// Package sink holds what the engine's external sinks (sink/webhook,
// sink/natsjs) share: the headers that describe a delivered message.
package sink

import (
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Header names every external sink sets on a delivered message.
const (
	HeaderID        = "Hourglass-Id"
	HeaderOriginID  = "Hourglass-Origin-Id"
	HeaderTopic     = "Hourglass-Topic"
	HeaderDeliverAt = "Hourglass-Deliver-At" // RFC 3339 with milliseconds, UTC
	HeaderAttempt   = "Hourglass-Attempt"    // 0 for the first attempt
)

// Origin is the ID of the first attempt of d's message: its Origin, or
// its own ID when it is the first attempt.
func Origin(d engine.Delivery) message.ID {
	if o := d.Message.Origin; !o.IsZero() {
		return o
	}
	return d.ID
}

// SetHeaders calls set with each Hourglass-* header of d on topic (after
// the message's own headers, which the caller copies as its transport
// allows).
func SetHeaders(topic string, d engine.Delivery, set func(key, value string)) {
	set(HeaderID, d.ID.String())
	set(HeaderOriginID, Origin(d).String())
	set(HeaderTopic, topic)
	set(HeaderDeliverAt, time.UnixMilli(d.ID.DeliverAt).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	set(HeaderAttempt, strconv.FormatUint(uint64(d.Message.Attempt), 10))
}

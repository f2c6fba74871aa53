// Package msgtrace holds what the server and the external sinks share to
// carry a message's trace across the delay (docs/OPERATIONS.md, "Traces"):
// the span attribute names and the W3C trace context a message stores
// (message.TraceParentHeader and message.TraceStateHeader).
package msgtrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/hourglassmq/hourglass/message"
)

// Attribute names of the spans; the messaging.* ones are OpenTelemetry's
// semantic conventions.
const (
	System      = attribute.Key("messaging.system")
	Destination = attribute.Key("messaging.destination.name")
	Operation   = attribute.Key("messaging.operation.type")
	Batch       = attribute.Key("messaging.batch.message_count")
	MessageID   = attribute.Key("messaging.message.id")
	Delay       = attribute.Key("hourglass.delay_ms")    // deliverAt − the Schedule call
	Lateness    = attribute.Key("hourglass.lateness_ms") // handed over − deliverAt
	Attempt     = attribute.Key("hourglass.attempt")
)

// W3C is the propagator of the trace context: traceparent and tracestate.
var W3C = propagation.TraceContext{}

// Carrier is a trace context's two headers as a propagation carrier.
type Carrier struct{ Parent, State string }

// Get returns the header key names, "" for another key.
func (c *Carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.Parent
	case "tracestate":
		return c.State
	}
	return ""
}

// Set sets the header key names; another key is ignored.
func (c *Carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.Parent = value
	case "tracestate":
		c.State = value
	}
}

// Keys names the two headers.
func (c *Carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Producer returns ctx with the producer's span context that the message
// headers hs store, as a remote parent; ctx unchanged if they store none.
func Producer(ctx context.Context, hs []message.Header) context.Context {
	tp := message.HeaderValue(hs, message.TraceParentHeader)
	if tp == "" {
		return ctx
	}
	return W3C.Extract(ctx, &Carrier{tp, message.HeaderValue(hs, message.TraceStateHeader)})
}

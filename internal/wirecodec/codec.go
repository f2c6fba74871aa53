// Package wirecodec is connect-go's binary protobuf codec ("proto", used
// by the Connect and gRPC protocols alike) with faster decoders and
// encoders for the messages Schedule and ScheduleBatch carry:
// ScheduleRequest and ScheduleBatchRequest, which the client writes and
// the server reads, and ScheduleResponse and ScheduleBatchResponse, which
// the server writes and the client reads; and for ReceiveResponse, which
// the server writes and the client reads by the hundred messages. The encoders write the same
// bytes as proto.Marshal without its reflection. DecodeBatchInto,
// DecodeRequestInto and AppendResponses serve the server's own path for
// Connect requests (package server), which reuses its buffers;
// AppendRequest and AppendBatchRequest serve the client's own path
// (package client), which writes into pooled buffers.
//
// The standard decoder makes three to five allocations per message of a
// batch and copies each body; these make a few per batch (one slice each
// of messages, times and ID or body bytes). They take only the common
// shape of each message (a ScheduleRequest's time as delay_ms, delay_level
// or deliver_at); anything else (headers, unknown or
// repeated fields, bad UTF-8, anything malformed) goes to proto.Unmarshal,
// which also words the errors. Fuzz tests hold each fast decoder to
// proto.Unmarshal: where it decodes, the result is equal.
//
// What Codec decodes never points into the buffer it was given (connect
// reuses it).
package wirecodec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Codec is the codec; pass it to connect.WithCodec on a handler or a
// client. Its methods may be called from any goroutine.
type Codec struct{}

// Name is connect's name of the binary protobuf codec, so that Codec
// replaces the default one.
func (Codec) Name() string { return "proto" }

// IsBinary reports that the codec's output is binary.
func (Codec) IsBinary() bool { return true }

// Marshal encodes msg as proto.Marshal does.
func (c Codec) Marshal(msg any) ([]byte, error) { return c.MarshalAppend(nil, msg) }

// MarshalAppend appends the encoding of msg to dst, as
// proto.MarshalOptions.MarshalAppend does; connect passes its pooled
// buffers.
func (Codec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	switch m := msg.(type) {
	case *hourglassv1.ScheduleBatchResponse:
		if b, ok := appendBatchResponse(dst, m); ok {
			return b, nil
		}
	case *hourglassv1.ScheduleBatchRequest:
		if b, ok := AppendBatchRequest(dst, m); ok {
			return b, nil
		}
	case *hourglassv1.ScheduleRequest:
		if b, ok := AppendRequest(dst, m); ok {
			return b, nil
		}
	case *hourglassv1.ReceiveResponse:
		if b, ok := appendReceiveResponse(dst, m); ok {
			return b, nil
		}
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

// MarshalStable encodes msg deterministically.
func (Codec) MarshalStable(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Unmarshal decodes data into msg, which must be a protobuf message.
func (Codec) Unmarshal(data []byte, msg any) error {
	switch m := msg.(type) {
	case *hourglassv1.ScheduleBatchRequest:
		if msgs, ok := decodeBatch(data); ok {
			proto.Reset(m)
			m.Messages = msgs
			return nil
		}
	case *hourglassv1.ScheduleRequest:
		if q, ok := decodeRequest(data); ok {
			proto.Reset(m)
			m.Topic, m.Body, m.When, m.IdempotencyKey = q.Topic, q.Body, q.When, q.IdempotencyKey
			return nil
		}
	case *hourglassv1.ScheduleResponse:
		if r, ok := decodeResponse(data); ok {
			proto.Reset(m)
			m.Id, m.DeliverAt = r.Id, r.DeliverAt
			return nil
		}
	case *hourglassv1.ScheduleBatchResponse:
		if results, ok := decodeBatchResponse(data); ok {
			proto.Reset(m)
			m.Results = results
			return nil
		}
	case *hourglassv1.ReceiveResponse:
		if msgs, ok := decodeReceiveResponse(data); ok {
			proto.Reset(m)
			m.Messages = msgs
			return nil
		}
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", msg)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", msg, err)
	}
	return nil
}

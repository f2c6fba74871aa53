// Package vtcodec is the protobuf codec of the API's gRPC and Connect
// sides: messages with the reflection-free methods that
// planetscale/vtprotobuf generates (gen/hourglass/v1/*_vtproto.pb.go) are
// encoded and decoded by them, any other message (health, reflection) by
// the protobuf library, with the same bytes on the wire. Shared by package
// server and package client; it imports only the libraries.
package vtcodec

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Name is the codec's name on both protocols: it is the "proto" codec.
const Name = "proto"

// vtMessage is what vtprotobuf generates with features
// marshal+unmarshal+size.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// GRPC is a grpc-go encoding.CodecV2; give it with
// grpc.ForceServerCodecV2 or grpc.ForceCodecV2.
type GRPC struct{}

var _ encoding.CodecV2 = GRPC{}

// pool holds the buffers messages are encoded into and received messages
// are joined in. grpc-go's default pool has tiers of 256 B, 4, 16 and 32
// KiB and 1 MiB, and a Get clears the whole buffer it hands out (a new one
// is cleared by the runtime): a ConsumeResponse of 100 messages (about 33
// KiB) cleared 1 MiB on every Send, 13 to 15 % of the server's CPU in a
// hot second (docs/DESIGN.md "A hot second"). A tier at every power of two
// from 256 B to 4 MiB clears at most twice what a message needs; larger
// messages are allocated at their size.
var pool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22)
	if err != nil {
		panic(fmt.Sprintf("vtcodec: buffer pool: %v", err))
	}
	return p
}()

// fallback is grpc-go's own protobuf codec.
func fallback() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }

// Name implements encoding.CodecV2.
func (GRPC) Name() string { return Name }

// Marshal implements encoding.CodecV2: into a pooled buffer above grpc-go's
// pooling threshold, as its own codec does.
func (GRPC) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return fallback().Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal implements encoding.CodecV2. The message copies what it keeps,
// so the received buffers go back to their pool at once.
func (GRPC) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return fallback().Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(pool)
	defer buf.Free()
	return m.UnmarshalVT(buf.ReadOnlyData())
}

// vtAliasing is what vtprotobuf generates with feature unmarshal_unsafe:
// a decode whose strings and bytes share the input.
type vtAliasing interface {
	UnmarshalVTUnsafe([]byte) error
}

// GRPCShared is GRPC, except that a message decodes from one fresh copy
// of the received bytes, which its strings and byte fields then share
// (vtprotobuf's UnmarshalVTUnsafe): one allocation per received message
// instead of one per string and bytes field, and no pooled buffer to give
// back. A field kept alone keeps that whole copy alive. The Go client
// uses it; the server keeps GRPC, as what it keeps of a request (a topic's
// name in a map, say) would hold the request's bytes.
type GRPCShared struct{ GRPC }

var _ encoding.CodecV2 = GRPCShared{}

// Unmarshal implements encoding.CodecV2.
func (GRPCShared) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(vtAliasing); ok {
		return m.UnmarshalVTUnsafe(data.Materialize())
	}
	return GRPC{}.Unmarshal(data, v)
}

// Connect is a connect-go codec for the binary protocol; give it with
// connect.WithCodec.
type Connect struct{}

// Name implements connect.Codec.
func (Connect) Name() string { return Name }

// Marshal implements connect.Codec.
func (c Connect) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

// MarshalAppend appends v's encoding to dst (connect-go uses it to reuse
// its buffers).
func (Connect) MarshalAppend(dst []byte, v any) ([]byte, error) {
	if m, ok := v.(vtMessage); ok {
		size := m.SizeVT()
		start := len(dst)
		dst = append(dst, make([]byte, size)...)
		_, err := m.MarshalToSizedBufferVT(dst[start:])
		return dst, err
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("vtcodec: %T is not a protobuf message", v)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

// Unmarshal implements connect.Codec.
func (Connect) Unmarshal(b []byte, v any) error {
	if m, ok := v.(vtMessage); ok {
		return m.UnmarshalVT(b)
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("vtcodec: %T is not a protobuf message", v)
	}
	return proto.Unmarshal(b, pm)
}

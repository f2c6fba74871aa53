package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// protoRecorder records the HTTP version of every response.
type protoRecorder struct {
	http.RoundTripper
	major atomic.Int32
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := p.RoundTripper.RoundTrip(r)
	if err == nil {
		p.major.Store(int32(res.ProtoMajor))
	}
	return res, err
}

// TestTransports: every protocol of connect-go (Connect, gRPC-Web, gRPC)
// over HTTP/1.1 and HTTP/2 (h2c with prior knowledge, or ALPN h2), plain
// and TLS, reaches the one port and is answered on the HTTP version it
// asked for: a unary call, a server stream, and on HTTP/2 a bidirectional
// stream. gRPC over HTTP/2 reaches grpc-go (grpc.health.v1, which only
// grpc-go serves, answers it).
func TestTransports(t *testing.T) {
	cert, pool := testCert(t)
	for _, secure := range []bool{false, true} {
		scheme, name := "http", "plain"
		var tlsConfig *tls.Config
		if secure {
			scheme, name, tlsConfig = "https", "tls", &tls.Config{Certificates: []tls.Certificate{cert}}
		}
		s := serveTestTLS(t, Options{}, nil, tlsConfig)
		for _, tc := range []struct {
			protocol string
			opts     []connect.ClientOption
		}{
			{"connect", nil},
			{"connect_json", []connect.ClientOption{connect.WithProtoJSON()}},
			{"grpc_web", []connect.ClientOption{connect.WithGRPCWeb()}},
			{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		} {
			for _, h2 := range []bool{false, true} {
				if tc.protocol == "grpc" && !h2 {
					continue // gRPC needs HTTP/2's trailers
				}
				version := map[bool]string{false: "http1", true: "http2"}[h2]
				t.Run(name+"/"+tc.protocol+"/"+version, func(t *testing.T) {
					var p http.Protocols
					switch {
					case !h2:
						p.SetHTTP1(true)
					case secure:
						p.SetHTTP2(true)
					default:
						p.SetUnencryptedHTTP2(true)
					}
					tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{RootCAs: pool}}
					t.Cleanup(tr.CloseIdleConnections)
					rec := &protoRecorder{RoundTripper: tr}
					hc := &http.Client{Transport: rec}
					base := scheme + "://" + s.addr
					// A topic of its own: a stream an earlier case closed may
					// still lease what comes due on a shared one, until the
					// server sees the close.
					topic := "transports-" + name + "-" + tc.protocol + "-" + version
					checkTransport(t, hourglassv1connect.NewHourglassServiceClient(hc, base, tc.opts...), topic, h2, tc.protocol != "grpc_web")
					if want := map[bool]int32{false: 1, true: 2}[h2]; rec.major.Load() != want {
						t.Errorf("answered on HTTP/%d, want HTTP/%d", rec.major.Load(), want)
					}
					if tc.protocol == "grpc" {
						check := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](hc,
							base+healthpb.Health_Check_FullMethodName, connect.WithGRPC())
						if _, err := check.CallUnary(testCtx(t), connect.NewRequest(&healthpb.HealthCheckRequest{})); err != nil {
							t.Errorf("grpc.health.v1 Check (grpc-go's): %v", err)
						}
					}
				})
			}
		}
	}
}

// checkTransport makes a unary call, reads a server stream and, on
// HTTP/2 and where the protocol has them, a bidirectional one with c.
func checkTransport(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, h2, bidi bool) {
	t.Helper()
	ctx := testCtx(t)
	res, err := c.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("x")}))
	if err != nil {
		t.Fatalf("Schedule: %v", err)
	}
	rs, err := c.ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: topic}))
	if err != nil {
		t.Fatalf("ReceiveStream: %v", err)
	}
	if !rs.Receive() || rs.Msg().Messages[0].Id != res.Msg.Id {
		t.Fatalf("ReceiveStream: %v, %v; want the message %s", rs.Msg(), rs.Err(), res.Msg.Id)
	}
	rs.Close()
	if !h2 || !bidi {
		return
	}
	ss := c.ScheduleStream(ctx)
	if err := ss.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{
		Message: &hourglassv1.ScheduleRequest{Topic: topic, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000}}}}); err != nil {
		t.Fatalf("ScheduleStream Send: %v", err)
	}
	got, err := ss.Receive()
	if err != nil || got.GetResult().GetId() == "" {
		t.Fatalf("ScheduleStream Receive: %v, %v; want an ID", got, err)
	}
	ss.CloseRequest()
	ss.CloseResponse()
}

// TestAckDropper: the first SETTINGS acknowledgement after the preface is
// removed, wherever the reads split the frames, and nothing else.
func TestAckDropper(t *testing.T) {
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteWindowUpdate(0, 1000)
	head := bytes.Clone(frames.Bytes())
	frames.Reset()
	fr.WriteSettingsAck()
	ack := bytes.Clone(frames.Bytes())
	frames.Reset()
	fr.WriteData(1, false, bytes.Repeat([]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}, 3)) // an ACK's bytes inside a payload
	fr.WriteSettingsAck()
	fr.WritePing(false, [8]byte{1})
	tail := bytes.Clone(frames.Bytes())
	in := bytes.Join([][]byte{[]byte(http2.ClientPreface), head, ack, tail}, nil)
	want := bytes.Join([][]byte{[]byte(http2.ClientPreface), head, tail}, nil)
	for _, tc := range []struct {
		name string
		r    func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one_byte_reads", iotest.OneByteReader},
		{"half_reads", iotest.HalfReader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ackDropper{r: bufio.NewReader(tc.r(bytes.NewReader(in))), pass: len(http2.ClientPreface)}
			got, err := io.ReadAll(iotest.OneByteReader(c))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("read %x, %v\nwant %x", got, err, want)
			}
		})
	}
}

// FuzzAckDropper: whatever a client sends, at most one 9-byte frame
// header is removed, and the rest comes through in order.
func FuzzAckDropper(f *testing.F) {
	f.Add([]byte(http2.ClientPreface + "\x00\x00\x00\x04\x01\x00\x00\x00\x00"))
	f.Add([]byte(http2.ClientPreface + "\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x00\x10\x00\x00\x00\x00\x00\x04\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &ackDropper{r: bufio.NewReader(bytes.NewReader(in)), pass: len(http2.ClientPreface)}
		got, _ := io.ReadAll(c)
		switch {
		case bytes.Equal(got, in):
		case len(got) == len(in)-9:
			i := 0
			for i < len(got) && got[i] == in[i] {
				i++
			}
			if !bytes.Equal(got[i:], in[i+9:]) {
				t.Errorf("more than one frame header removed: %x from %x", got, in)
			}
		default:
			t.Errorf("read %x from %x", got, in)
		}
	})
}

// FuzzFirstRequestGRPC: the matcher reads any client's first bytes
// without panicking.
func FuzzFirstRequestGRPC(f *testing.F) {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings()
	f.Add(b.Bytes())
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		firstRequestGRPC(io.Discard, bytes.NewReader(in))
	})
}

// TestFirstRequestGRPC: a connection whose first request is gRPC matches
// (whatever frames come first, the head split into CONTINUATION frames
// too), one of any other content type does not, and each HTTP/2
// connection is sent one SETTINGS frame.
func TestFirstRequestGRPC(t *testing.T) {
	for _, tc := range []struct {
		name        string
		contentType string // "": none
		split       bool   // the head in a HEADERS and a CONTINUATION frame
		want        bool
	}{
		{"grpc", "application/grpc", false, true},
		{"grpc_proto", "application/grpc+proto", false, true},
		{"grpc_split", "application/grpc", true, true},
		{"grpc_web", "application/grpc-web+proto", false, false},
		{"connect", "application/proto", false, false},
		{"connect_stream", "application/connect+proto", false, false},
		{"json", "application/json", true, false},
		{"no_content_type", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in bytes.Buffer
			in.WriteString(http2.ClientPreface)
			fr := http2.NewFramer(&in, nil)
			fr.WriteSettings()
			fr.WriteWindowUpdate(0, 1<<20)
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
				{Name: ":path", Value: "/hourglass.v1.HourglassService/Time"}, {Name: ":authority", Value: "127.0.0.1"}} {
				enc.WriteField(f)
			}
			if tc.contentType != "" {
				enc.WriteField(hpack.HeaderField{Name: "content-type", Value: tc.contentType})
			}
			b := block.Bytes()
			if tc.split {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:len(b)/2]})
				fr.WriteContinuation(1, true, b[len(b)/2:])
			} else {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndHeaders: true})
			}
			var out bytes.Buffer
			if got := firstRequestGRPC(&out, &in); got != tc.want {
				t.Errorf("matched %v, want %v", got, tc.want)
			}
			f, err := http2.NewFramer(nil, &out).ReadFrame()
			if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() || out.Len() != 0 {
				t.Errorf("sent %v, %v and %d bytes more; want one SETTINGS frame", f, err, out.Len())
			}
		})
	}
}

// BenchmarkFirstRequestGRPC is what matching costs a connection, once: a
// gRPC client's preface, SETTINGS, WINDOW_UPDATE and first request head.
// Calls after the first on the connection cost nothing more.
func BenchmarkFirstRequestGRPC(b *testing.B) {
	var in bytes.Buffer
	in.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&in, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	fr.WriteWindowUpdate(0, 1<<20)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/hourglass.v1.HourglassService/ScheduleBatch"}, {Name: ":authority", Value: "127.0.0.1:7420"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "user-agent", Value: "grpc-go/1.85.0"}, {Name: "te", Value: "trailers"}} {
		enc.WriteField(f)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true})
	b.SetBytes(int64(in.Len()))
	for b.Loop() {
		if !firstRequestGRPC(io.Discard, bytes.NewReader(in.Bytes())) {
			b.Fatal("not matched")
		}
	}
}

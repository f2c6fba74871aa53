package client

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// countingConn counts the writes made on a client connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// writesPerCall sends Schedule calls through rt's transport and returns
// the client-side writes per call.
func writesPerCall(t *testing.T, url string, wrap func(http.RoundTripper) http.RoundTripper) float64 {
	t.Helper()
	var writes atomic.Int64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	defer tr.CloseIdleConnections()
	svc := hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: wrap(tr)}, url)
	const calls = 20
	for i := range calls {
		body := make([]byte, 256)
		body[0] = byte(i)
		res, err := svc.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: body}))
		if err != nil {
			t.Fatal(err)
		}
		if want := "id:" + string(body); res.Msg.Id != want {
			t.Fatalf("call %d: the server got another body (id %q)", i, res.Msg.Id)
		}
	}
	return float64(writes.Load()) / calls
}

func TestOneWritePerRequest(t *testing.T) {
	url := startFake(t, newFake(false))
	plain := writesPerCall(t, url, func(rt http.RoundTripper) http.RoundTripper { return rt })
	one := writesPerCall(t, url, func(rt http.RoundTripper) http.RoundTripper { return oneWrite{next: rt} })
	if one != 1 {
		t.Errorf("with oneWrite: %.2f writes per call, want 1", one)
	}
	t.Logf("writes per call: net/http alone %.2f, with oneWrite %.2f", plain, one)
	if plain <= one {
		t.Logf("net/http alone already sends %.2f writes per call: oneWrite may no longer be needed", plain)
	}
}

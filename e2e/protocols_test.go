package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// tool finds an outside command-line tool: $env, then PATH. Without it the
// test is skipped with how to install it (.ci/run installs both).
func tool(t *testing.T, env, name, install string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	skipForTool(t, name+" not found", fmt.Sprintf("install it with %s, or set %s to it", install, env))
	return ""
}

func grpcurl(t *testing.T) string {
	return tool(t, "HOURGLASS_GRPCURL", "grpcurl", "GOBIN=$PWD/.tools go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4")
}

func bufTool(t *testing.T) string {
	return tool(t, "HOURGLASS_BUF", "buf", "GOBIN=$PWD/.tools go install github.com/bufbuild/buf/cmd/buf@v1.75.0")
}

// run runs a tool and returns its stdout, stderr and error.
func run(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

var idRE = regexp.MustCompile(`"id":\s*"([0-9a-f]{32})"`)

// scheduledOn counts the messages Stats says were scheduled on topic.
func scheduledOn(t *testing.T, c *client.Client, topic string) int64 {
	t.Helper()
	st, err := c.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.Topics {
		if ts.Topic == topic {
			return ts.Scheduled
		}
	}
	return 0
}

// TestProtocols reaches one server on every protocol from outside the
// project: curl (Connect-JSON), grpcurl with reflection only, buf curl
// (Connect with the schema, and gRPC with reflection), the Go client
// (gRPC) and connect-go (Connect binary, gRPC-Web); and a wrong bearer
// token is refused on each of them with nothing stored.
func TestProtocols(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--auth-token", "sesame")
	good := newClient(t, p)
	ctx := ctxT(t)

	t.Run("curl_json", func(t *testing.T) {
		curl := func(token, body string) (int, string) {
			out, errOut, err := run(t, "curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
				"-H", "Authorization: Bearer "+token, "-d", body, p.url+hourglassv1connect.HourglassServiceScheduleProcedure)
			if err != nil {
				t.Fatalf("curl: %v: %s", err, errOut)
			}
			i := strings.LastIndexByte(out, '\n')
			var code int
			fmt.Sscan(out[i+1:], &code)
			return code, out[:i]
		}
		if code, out := curl("sesame", `{"topic":"p-curl","delayMs":"60000"}`); code != 200 || !idRE.MatchString(out) {
			t.Errorf("Schedule: %d %s", code, out)
		}
		if code, out := curl("sesame", `{"topic":"p-curl","delayMS":"60000"}`); code != 400 || !strings.Contains(out, `unknown field \"delayMS\"`) {
			t.Errorf("misspelt delayMS: %d %s; want 400 naming the field", code, out)
		}
		if code, out := curl("WRONG", `{"topic":"p-curl-wrong"}`); code != 401 || !strings.Contains(out, "unauthenticated") {
			t.Errorf("wrong token: %d %s", code, out)
		}
	})

	t.Run("grpcurl_reflection", func(t *testing.T) {
		bin := grpcurl(t)
		out, errOut, err := run(t, bin, "-plaintext", p.addr, "list")
		if err != nil || !strings.Contains(out, "hourglass.v1.HourglassService") || !strings.Contains(out, "grpc.health.v1.Health") {
			t.Fatalf("grpcurl list: %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = run(t, bin, "-plaintext", p.addr, "grpc.health.v1.Health/Check")
		if err != nil || !strings.Contains(out, "SERVING") {
			t.Errorf("health check without token: %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = run(t, bin, "-plaintext", "-H", "authorization: Bearer sesame", "-d", `{"topic":"p-grpcurl","delayMs":"60000"}`,
			p.addr, "hourglass.v1.HourglassService/Schedule")
		if err != nil || !idRE.MatchString(out) {
			t.Errorf("grpcurl Schedule: %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = run(t, bin, "-plaintext", "-H", "authorization: Bearer WRONG", "-d", `{"topic":"p-grpcurl-wrong"}`,
			p.addr, "hourglass.v1.HourglassService/Schedule")
		if err == nil || !strings.Contains(out+errOut, "Unauthenticated") {
			t.Errorf("grpcurl with a wrong token: %v\n%s%s", err, out, errOut)
		}
	})

	t.Run("buf_curl", func(t *testing.T) {
		bin := bufTool(t)
		schema, err := filepath.Abs("../proto")
		if err != nil {
			t.Fatal(err)
		}
		url := p.url + hourglassv1connect.HourglassServiceScheduleProcedure
		out, errOut, err := run(t, bin, "curl", "--schema", schema, "-H", "Authorization: Bearer sesame",
			"--data", `{"topic":"p-buf","delayMs":"60000"}`, url)
		if err != nil || !idRE.MatchString(out) {
			t.Errorf("buf curl (Connect, HTTP/1.1): %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = run(t, bin, "curl", "--protocol", "grpc", "--http2-prior-knowledge", "-H", "Authorization: Bearer sesame",
			"--data", `{"topic":"p-buf","delayMs":"60000"}`, url)
		if err != nil || !idRE.MatchString(out) {
			t.Errorf("buf curl (gRPC, reflection): %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = run(t, bin, "curl", "--schema", schema, "-H", "Authorization: Bearer WRONG",
			"--data", `{"topic":"p-buf-wrong"}`, url)
		if err == nil || !strings.Contains(out+errOut, "unauthenticated") {
			t.Errorf("buf curl with a wrong token: %v\n%s%s", err, out, errOut)
		}
	})

	t.Run("go_clients", func(t *testing.T) {
		if id, err := good.Schedule(ctx, client.Message{Topic: "p-go", Delay: time.Minute}); err != nil || id.IsZero() {
			t.Errorf("gRPC Schedule: %q %v", id, err)
		}
		bad, err := client.New(p.url, client.WithToken("WRONG"))
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		if _, err := bad.Schedule(ctx, client.Message{Topic: "p-wrong", Delay: time.Minute}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC with a wrong token: %v", err)
		}
		prod := client.NewProducer(bad, client.ProducerOptions{})
		if _, err := prod.Send(ctx, client.Message{Topic: "p-wrong", Delay: time.Minute}).Wait(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ScheduleStream with a wrong token: %v", err)
		}
		prod.Close()
		for _, proto := range []struct {
			name string
			opt  connect.ClientOption
		}{{"connect", connect.WithProtoJSON()}, {"connect_binary", connect.WithSendGzip()}, {"grpc_web", connect.WithGRPCWeb()}} {
			for token, want := range map[string]connect.Code{"WRONG": connect.CodeUnauthenticated, "sesame": 0} {
				c := hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url, proto.opt,
					connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
						return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
							req.Header().Set("Authorization", "Bearer "+token)
							return next(ctx, req)
						}
					})))
				topic := "p-" + proto.name
				if token == "WRONG" {
					topic = "p-wrong"
				}
				_, err := c.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000}}))
				if got := connect.CodeOf(err); (want == 0 && err != nil) || (want != 0 && got != want) {
					t.Errorf("%s with token %s: %v", proto.name, token, err)
				}
			}
		}
	})

	t.Run("pipelined_wrong_token", func(t *testing.T) {
		// A Time call and, right behind it on the same connection, a
		// Schedule with a wrong token whose last bytes come a moment later.
		body, _ := proto.Marshal(&hourglassv1.ScheduleRequest{Topic: "p-wrong", Body: bytes.Repeat([]byte("x"), 500)})
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		timeReq := "POST " + hourglassv1connect.HourglassServiceTimeProcedure + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\n" +
			"Authorization: Bearer sesame\r\nContent-Length: 0\r\n\r\n"
		sched := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\nAuthorization: Bearer WRONG\r\nContent-Length: %d\r\n\r\n",
			hourglassv1connect.HourglassServiceScheduleProcedure, len(body))
		if _, err := io.WriteString(conn, timeReq+sched+string(body[:len(body)-10])); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		first, err := http.ReadResponse(br, nil)
		if err != nil || first.StatusCode != 200 {
			t.Fatalf("Time: %v %v", first, err)
		}
		io.Copy(io.Discard, first.Body)
		if _, err := conn.Write(body[len(body)-10:]); err != nil {
			t.Fatal(err)
		}
		second, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(second.Body)
		if second.StatusCode != 401 {
			t.Errorf("pipelined Schedule with a wrong token: %d %s; want 401", second.StatusCode, b)
		}
	})

	if n := scheduledOn(t, good, "p-wrong"); n != 0 {
		t.Errorf("%d messages stored on p-wrong, which only calls with a wrong token used", n)
	}
}

// hostile is a raw HTTP/1.1 request and how to tell the answers apart.
type hostile struct {
	name string
	req  string
}

// answer sends raw on a new connection to addr and returns the status line
// of the first answer, or "closed" if the connection ended without one.
func answer(t *testing.T, addr, raw string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return "closed"
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "closed"
		}
		return "error: " + err.Error()
	}
	resp.Body.Close()
	return fmt.Sprint(resp.StatusCode)
}

// TestHostileHTTP sends malformed and abusive HTTP/1.1 to the binary and
// to a plain net/http server, and wants the same status from both: the
// server's HTTP is net/http's. A gzip bomb is refused by size.
func TestHostileHTTP(t *testing.T) {
	p := start(t, t.TempDir(), nil)
	// The reference reads the body as a handler does and refuses one it
	// cannot read, as a bad request.
	ref := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}))
	ref.Config.MaxHeaderBytes = 64 << 10 // the server's limit of a request head (docs/API.md)
	ref.Start()
	defer ref.Close()
	refAddr := strings.TrimPrefix(ref.URL, "http://")
	path := hourglassv1connect.HourglassServiceTimeProcedure
	head := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	for _, h := range []hostile{
		{"content_length_and_chunked", head + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"two_content_lengths", head + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"},
		{"obs_fold", head + "X-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\n{}"},
		{"space_before_colon", head + "Content-Length : 2\r\n\r\n{}"},
		{"bad_chunk_size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"},
		{"huge_header", head + "X-Big: " + strings.Repeat("a", 1<<20) + "\r\nContent-Length: 2\r\n\r\n{}"},
		{"http_1_0_no_host", "POST " + path + " HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"},
		{"no_host_1_1", "POST " + path + " HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"},
		{"garbage_request_line", "HELLO\r\n\r\n"},
	} {
		t.Run(h.name, func(t *testing.T) {
			want := answer(t, refAddr, h.req)
			got := answer(t, p.addr, h.req)
			t.Logf("net/http: %s, the server: %s", want, got)
			// The requests are Time calls with a valid body: what net/http
			// accepts, the server answers 200.
			if got != want {
				t.Errorf("the server answered %s; net/http answers %s", got, want)
			}
		})
	}

	t.Run("gzip_bomb", func(t *testing.T) {
		// 16 MiB of zeros in a JSON string compress to about 16 KiB, twice
		// the request limit once inflated.
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		fmt.Fprint(zw, `{"topic":"bomb","body":"`)
		zw.Write(bytes.Repeat([]byte("A"), 16<<20))
		fmt.Fprint(zw, `"}`)
		zw.Close()
		req, _ := http.NewRequest("POST", p.url+hourglassv1connect.HourglassServiceScheduleProcedure, bytes.NewReader(zipped.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Code, Message string }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.Code != "resource_exhausted" || !strings.Contains(out.Message, "larger than configured max") {
			t.Errorf("a %d-byte gzip body inflating to 16 MiB: %d %+v; want resource_exhausted", zipped.Len(), resp.StatusCode, out)
		}
	})

	t.Run("idle_connection_closed", func(t *testing.T) {
		q := start(t, t.TempDir(), nil, "--idle-timeout", "300ms")
		conn, err := net.Dial("tcp", q.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		start := time.Now()
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("idle kept-alive connection: %v, want EOF (closed by the server)", err)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("closed after %v with --idle-timeout 300ms", d)
		}
	})
}

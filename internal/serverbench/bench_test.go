package serverbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var listenRE = regexp.MustCompile(`listening on (\S+)`)

// startServer builds the hourglass binary and runs `hourglass serve` on a
// free loopback port with --fsync none and extra args; it returns the
// server's URL once /readyz answers 200.
func startServer(t *testing.T, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hourglass")
	build := exec.Command("go", "build", "-o", bin, "github.com/hourglassmq/hourglass/cmd/hourglass")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hourglass: %v\n%s", err, out)
	}
	args := append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--fsync", "none"}, extra...)
	cmd := exec.Command(bin, args...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder // guarded by mu
	addrc := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			mu.Lock()
			t.Logf("server log:\n%s", log.String())
			mu.Unlock()
		}
	})
	var addr string
	select {
	case addr = <-addrc:
	case <-exited:
		t.Fatal("server exited before listening")
	case <-time.After(30 * time.Second):
		t.Fatal("server did not print its address in 30s")
	}
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after 30s (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRun runs every scenario over every protocol, briefly, against a
// real server, and checks what the report says happened.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	url := startServer(t)
	type run struct {
		name string
		cfg  Config
	}
	var runs []run
	for _, p := range Protocols {
		runs = append(runs,
			run{Batch + "_" + p, Config{Scenario: Batch, Protocol: p, Messages: 3000, Batch: 50}},
			run{Single + "_" + p, Config{Scenario: Single, Protocol: p, Messages: 1000, Clients: 16}},
			run{Lateness + "_" + p, Config{Scenario: Lateness, Protocol: p, Messages: 1000, Window: 500 * time.Millisecond, Grace: 5 * time.Second}},
		)
	}
	runs = append(runs, run{Single + "_merged", Config{Scenario: Single, Protocol: ProtocolGRPC, Messages: 2000, Clients: 32, MaxCalls: 1}},
		run{Get, Config{Scenario: Get, Protocol: ProtocolGRPC, Messages: 4000, Rate: 4000}})
	for _, tc := range runs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Addr, cfg.Timeout, cfg.BodySize = url, time.Minute, DefaultBodySize
			if cfg.Batch == 0 {
				cfg.Batch = DefaultBatch
			}
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.End != "complete" || r.Protocol != cfg.Protocol || r.Scenario != cfg.Scenario {
				t.Errorf("end %q, protocol %q, scenario %q", r.End, r.Protocol, r.Scenario)
			}
			if r.Scheduled != cfg.Messages || r.SchedulePerSec <= 0 || r.Errors != 0 {
				t.Errorf("scheduled %d of %d at %v/s, %d errors", r.Scheduled, cfg.Messages, r.SchedulePerSec, r.Errors)
			}
			// The requests the messages went in.
			switch {
			case cfg.MaxCalls > 0:
				// 32 goroutines and one call in flight: the Schedules that
				// wait for it share the next, so fewer calls than messages.
				if r.Calls < 1 || r.Calls >= int64(cfg.Messages) || r.Merged == 0 || r.Merged > int64(cfg.Messages) {
					t.Errorf("--max-calls 1: %d calls, %d merged messages for %d messages; want merged calls", r.Calls, r.Merged, cfg.Messages)
				}
			case cfg.Scenario == Get:
				// About a second at 4,000/s: Gets all along, each PENDING.
				if r.Gets < 10 || r.GetP50Ms <= 0 || r.GetP99Ms < r.GetP50Ms || r.GetMaxMs < r.GetP99Ms || r.Rate != cfg.Rate {
					t.Errorf("get: %d gets, p50 %v, p99 %v, max %v ms, rate %d", r.Gets, r.GetP50Ms, r.GetP99Ms, r.GetMaxMs, r.Rate)
				}
				if r.ScheduleSeconds < 0.9 {
					t.Errorf("4,000 messages at 4,000/s went in %v s: not paced", r.ScheduleSeconds)
				}
			case cfg.Scenario == Single:
				if r.Calls != int64(cfg.Messages) || r.Merged != 0 {
					t.Errorf("%d calls, %d merged for %d single messages; want one call each, none merged", r.Calls, r.Merged, cfg.Messages)
				}
			default:
				if want := int64((cfg.Messages + cfg.Batch - 1) / cfg.Batch); r.Calls != want || r.Merged != 0 {
					t.Errorf("%d calls, %d merged for %d messages in batches of %d; want %d, none merged", r.Calls, r.Merged, cfg.Messages, cfg.Batch, want)
				}
			}
			if cfg.Scenario == Lateness {
				if r.Delivered != int64(cfg.Messages) || r.FirePerSec <= 0 || r.LatenessMaxMs < r.LatenessP99Ms {
					t.Errorf("delivered %d, fire_per_sec %v, p99 %v, max %v", r.Delivered, r.FirePerSec, r.LatenessP99Ms, r.LatenessMaxMs)
				}
				if r.Consumers != DefaultConsumers || r.Credits != DefaultCredits {
					t.Errorf("consumers %d with %d credits, want %d with %d", r.Consumers, r.Credits, DefaultConsumers, DefaultCredits)
				}
				if want := fmt.Sprintf("%d credits", DefaultCredits); cfg.Protocol == ProtocolStream && !strings.Contains(r.load(), want) {
					t.Errorf("load %q does not say %q", r.load(), want)
				}
			}
			if r.Early != 0 || r.Lost != 0 || r.Duplicates != 0 || r.Anomalies != 0 {
				t.Errorf("early %d, lost %d, duplicates %d, anomalies %d; want 0", r.Early, r.Lost, r.Duplicates, r.Anomalies)
			}

			var js bytes.Buffer
			if err := r.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(js.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range Keys {
				if _, ok := m[k]; !ok {
					t.Errorf("JSON lacks %q", k)
				}
			}
			var table bytes.Buffer
			if err := r.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`(?m)^protocol +` + cfg.Protocol + `$`).Match(table.Bytes()) {
				t.Errorf("the table does not name the protocol:\n%s", table.String())
			}
		})
	}
}

// TestRunToken runs each protocol against a server with --auth-token:
// the token reaches the server on every path, a wrong one is refused.
func TestRunToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	url := startServer(t, "--auth-token", "s3cret")
	for _, p := range Protocols {
		t.Run(p, func(t *testing.T) {
			cfg := Config{Addr: url, Token: "s3cret", Scenario: Lateness, Protocol: p, Messages: 200, Window: 100 * time.Millisecond,
				Grace: 5 * time.Second, Timeout: time.Minute, BodySize: DefaultBodySize, Batch: DefaultBatch}
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Delivered != int64(cfg.Messages) || r.Errors != 0 {
				t.Errorf("delivered %d of %d, %d errors", r.Delivered, cfg.Messages, r.Errors)
			}
			cfg.Token = "wrong"
			if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthenticated") {
				t.Errorf("wrong token: %v, want an Unauthenticated error", err)
			}
		})
	}
}

// TestTallyEarlySlack: a delivery counts as early only when it came more
// than the skew's uncertainty (half the Time round trip) before its
// deliverAt on the server's clock.
func TestTallyEarlySlack(t *testing.T) {
	tl := newTally(3, 200*time.Microsecond, nil)
	var s sample
	due := time.Unix(1_800_000_000, 0)
	body := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	skew := -100 * time.Microsecond
	tl.record(&s, due, skew, body(0), due)                           // 0.1 ms "early": the skew's error
	tl.record(&s, due.Add(150*time.Microsecond), skew, body(1), due) // late
	tl.record(&s, due.Add(-time.Millisecond), skew, body(2), due)    // 1.1 ms early: early
	if got := tl.counts.Tally().Early; got != 1 {
		t.Fatalf("early = %d, want 1 (only the delivery 1.1 ms before its time)", got)
	}
	if got := tl.counts.Distinct(); got != 3 {
		t.Fatalf("delivered = %d, want 3", got)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestBackupUnderLoad takes a backup with `hourglass backup` while
// producers schedule messages due within 1.5 s and a consumer receives and
// acks them, then starts a server on the copy and checks it message by
// message: every message answered before the backup began is delivered
// from the copy unless the consumer acked it before the backup ended (the
// copy is of a moment between the two), and none acked before the backup
// began is.
func TestBackupUnderLoad(t *testing.T) {
	const topic, producers, perProducer = "bk", 4, 400
	root := t.TempDir()
	orig := start(t, filepath.Join(root, "data"), nil)

	var mu sync.Mutex
	answered := map[string]time.Time{} // body: when its Schedule was answered; guarded by mu
	acked := map[string]time.Time{}    // body: when its Ack was answered; guarded by mu
	ackSent := map[string]time.Time{}  // body: when its Ack was sent; guarded by mu
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(answered), len(acked)
	}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	errs := make(chan error, producers+1)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				if ctx.Err() != nil {
					return
				}
				body := fmt.Sprintf("m-%d-%d", p, i)
				_, err := orig.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{
					Topic: topic, Body: []byte(body), When: delayMs(int64((p*perProducer + i) * 37 % 1500))}))
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("Schedule %s: %w", body, err)
					return
				}
				now := time.Now()
				mu.Lock()
				answered[body] = now
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // the consumer: receive and ack until the load stops
		defer wg.Done()
		for ctx.Err() == nil {
			res, err := orig.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 50, WaitMs: 200, LeaseMs: 60_000}))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				errs <- fmt.Errorf("Receive: %w", err)
				return
			}
			for _, m := range res.Msg.Messages {
				mu.Lock()
				ackSent[string(m.Body)] = time.Now()
				mu.Unlock()
				if _, err := orig.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Id: m.Id})); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("Ack %s: %w", m.Body, err)
					}
					return
				}
				now := time.Now()
				mu.Lock()
				acked[string(m.Body)] = now
				mu.Unlock()
			}
		}
	}()

	// Back up in the middle of the load: once a third of the messages
	// were answered and some acked.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if a, k := count(); a >= producers*perProducer/3 && k >= 50 {
			break
		}
		if time.Now().After(deadline) {
			a, k := count()
			t.Fatalf("the load did not get going: %d answered, %d acked in 60s", a, k)
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	copyDir := filepath.Join(root, "copy")
	began := time.Now()
	out, err := runBin(t, nil, "backup", "--to", copyDir, "--addr", orig.url)
	if err != nil {
		t.Fatalf("hourglass backup: %v\n%s", err, out)
	}
	var rep struct {
		Copied int   `json:"copied"`
		Bytes  int64 `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Copied == 0 || rep.Bytes == 0 {
		t.Errorf("hourglass backup printed %q (%v): want what it copied", out, err)
	}
	ended := time.Now()
	a, k := count()
	t.Logf("backup took %v under load (%d answered, %d acked by its end): %s", time.Since(began), a, k, out)
	stopLoad()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	orig.stop(syscall.SIGTERM)

	mu.Lock()
	want, wasAcked := map[string]bool{}, map[string]bool{}
	for body, at := range answered {
		if at.Before(began) {
			want[body] = true
		}
	}
	for body, at := range acked {
		if at.Before(began) {
			wasAcked[body] = true
			delete(want, body)
		}
	}
	mayLack := map[string]bool{} // acked while the backup was taken
	for body, at := range ackSent {
		if want[body] && at.Before(ended) {
			mayLack[body] = true
		}
	}
	mu.Unlock()
	if len(want) == 0 || len(wasAcked) == 0 {
		t.Fatalf("nothing to check: %d answered and not acked, %d acked before the backup", len(want), len(wasAcked))
	}

	if out, err := runBin(t, nil, "inspect", "verify", "--data-dir", copyDir); err != nil {
		t.Errorf("inspect verify of the copy: %v\n%s", err, out)
	}
	restored := start(t, copyDir, nil)
	got := map[string]int{}
	missing := func() int {
		n := 0
		for body := range want {
			if got[body] == 0 && !mayLack[body] {
				n++
			}
		}
		return n
	}
	// Every message is due 1.5 s after it was scheduled at most: receive
	// until each wanted one came, then for a second more (the latest due
	// of the others).
	var quiet time.Time
	for deadline := time.Now().Add(60 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("from the copy, %d of the %d messages answered before the backup and not acked before its end never came", missing(), len(want)-len(mayLack))
		}
		res, err := restored.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 100, WaitMs: 500, LeaseMs: 60_000}))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Msg.Messages {
			got[string(m.Body)]++
			if wasAcked[string(m.Body)] {
				t.Errorf("message %s (%s) was acked before the backup, and the copy delivered it again", m.Body, m.Id)
			}
			ack(t, restored.client, topic, m.Id)
		}
		if missing() == 0 && quiet.IsZero() {
			quiet = time.Now().Add(2 * time.Second)
		}
		if !quiet.IsZero() && time.Now().After(quiet) {
			break
		}
	}
	lacked := 0
	for body := range mayLack {
		if got[body] == 0 {
			lacked++
		}
	}
	t.Logf("the copy delivered %d distinct messages: all %d answered before the backup and not acked before its end, %d of %d acked while it was taken; none of the %d acked before it",
		len(got), len(want)-len(mayLack), len(mayLack)-lacked, len(mayLack), len(wasAcked))
	restored.stop(syscall.SIGTERM)
}

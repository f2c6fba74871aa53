package crashtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestScratchCancelAfterRestart: deliver and ack messages, kill, restart,
// cancel them.
func TestScratchCancelAfterRestart(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	work := t.TempDir()
	bin := "/tmp/hg"
	data := filepath.Join(work, "data")
	cfg := Config{SegmentDuration: 2 * time.Second}
	cfg.fill()
	w := newWorkload(&cfg, &History{})
	r := &runner{cfg: cfg}
	args := r.serverArgs()
	for round := 0; round < 8; round++ {
		s, err := startServer(bin, data, filepath.Join(work, "log"), args, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.waitReady(time.Minute); err != nil {
			t.Fatal(err)
		}
		u := connectUnary{w.client(s.addr)}
		ctx := context.Background()
		// Wait until a bucket boundary minus d.
		seg := int64(2000)
		now := time.Now().UnixMilli()
		edge := (now/seg + 1) * seg
		if edge-now < 1200 {
			edge += seg
		}
		killAt := time.UnixMilli(edge).Add(time.Duration(round%4*10) * time.Millisecond)
		// schedule until 500ms before the edge
		var ids []string
		for time.Until(killAt) > 500*time.Millisecond {
			res, err := u.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "x", Body: []byte("b"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 0}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.Id)
			rr, err := u.Receive(ctx, &hourglassv1.ReceiveRequest{Topic: "x", MaxMessages: 100, WaitMs: 100, LeaseMs: 5000})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range rr.Messages {
				if err := u.Ack(ctx, &hourglassv1.AckRequest{Topic: "x", Receipt: m.Receipt}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		// drain all
		for {
			rr, err := u.Receive(ctx, &hourglassv1.ReceiveRequest{Topic: "x", MaxMessages: 100, WaitMs: 50, LeaseMs: 5000})
			if err != nil {
				t.Fatal(err)
			}
			if len(rr.Messages) == 0 {
				break
			}
			for _, m := range rr.Messages {
				u.Ack(ctx, &hourglassv1.AckRequest{Topic: "x", Receipt: m.Receipt})
			}
		}
		time.Sleep(time.Until(killAt))
		s.kill()
		s, err = startServer(bin, data, filepath.Join(work, "log"), args, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.waitReady(time.Minute); err != nil {
			t.Fatal(err)
		}
		u = connectUnary{w.client(s.addr)}
		counts := map[string]int{}
		for i, id := range ids {
			if i%4 != 0 {
				continue
			}
			res, err := u.Cancel(ctx, &hourglassv1.CancelRequest{Id: id})
			if err != nil {
				t.Fatal(err)
			}
			counts[res.Result.String()]++
		}
		fmt.Printf("round %d: kill at edge+%dms: %d scheduled; cancels after restart: %v\n", round, round%4*10, len(ids), counts)
		s.terminate(10 * time.Second)
	}
}

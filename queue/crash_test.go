package queue

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

var crashRuns = flag.Int("crash.runs", 10, "number of SIGKILL runs in TestCrashKill")

// crashOpts are the child's and the checker's options: tiny segments and
// frequent checkpoints so that rotation, retention and checkpoint replay
// all happen within a run; three attempts, so that short leases send
// messages to the dead-letter topic.
func crashOpts(dir string) Options {
	return Options{Dir: dir, SegmentSize: 16 << 10, AckSegmentSize: 4096, checkpointEvery: 16, MaxAttempts: 3, Logger: quiet}
}

// TestCrashKill runs Deliver, Receive, Ack and Nack at random in a child
// process, kills it with SIGKILL at a random moment, reopens the queue and
// checks: no message whose Ack returned is received again, and every
// message whose Deliver returned is received (from the topic or its
// dead-letter topic) unless an Ack of it was called (one in flight at the
// kill may or may not have taken effect). Each run continues on the data
// directory the previous one left.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes; skipped with -short")
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	delivered := map[uint64]bool{} // Deliver returned
	acked := map[uint64]bool{}     // Ack returned (in a child, or here)
	tried := map[uint64]bool{}     // Ack called: it may have taken effect
	next := uint64(1)
	for run := range *crashRuns {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), "HG_QUEUE_CRASH_DIR="+dir,
			fmt.Sprintf("HG_QUEUE_CRASH_FROM=%d", next), fmt.Sprintf("HG_QUEUE_CRASH_SEED=%d", rng.Uint64()))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 50 + rng.IntN(1500)
		var once sync.Once
		kill := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGKILL) }) }
		sc := bufio.NewScanner(out)
		lines := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "D": // D from to: Deliver of [from, to) returned
				from, _ := strconv.ParseUint(f[1], 10, 64)
				to, _ := strconv.ParseUint(f[2], 10, 64)
				for s := from; s < to; s++ {
					delivered[s] = true
				}
				next = max(next, to)
			case "A": // A seq: Ack returned
				s, _ := strconv.ParseUint(f[1], 10, 64)
				acked[s] = true
			case "a": // a seq: Ack called
				s, _ := strconv.ParseUint(f[1], 10, 64)
				tried[s] = true
			case "X": // X seq: the child received a message acked before
				t.Fatalf("run %d: child received acked message %s", run, f[1])
			default:
				continue
			}
			if lines++; lines == killAfter {
				kill()
			}
		}
		kill()
		cmd.Wait()
		// Sequence numbers of Delivers that did not return may be in the
		// log; the next child starts above them.
		next += 100
		img := t.TempDir()
		copyDir(t, dir, img)

		q, err := Open(crashOpts(dir))
		if err != nil {
			t.Fatalf("run %d: reopen: %v", run, err)
		}
		got := map[uint64]bool{}
		var toAck []Message
		for _, topic := range []string{"t", "t.dlq"} {
			for _, m := range drain(t, q, topic) {
				s := m.ID.Seq
				if acked[s] {
					t.Fatalf("run %d: message %d received from %s after its Ack returned", run, s, topic)
				}
				if got[s] && topic == "t" {
					t.Fatalf("run %d: message %d received twice", run, s)
				}
				got[s] = true
				toAck = append(toAck, m)
			}
		}
		ackAll(t, q, toAck)
		missing := 0
		for s := range delivered {
			if !acked[s] && !got[s] && !tried[s] {
				if missing++; missing < 3 {
					t.Errorf("run %d: message %d was delivered and never acked, but is gone", run, s)
					explain(t, img, "t", s)
					explain(t, img, "t.dlq", s)
				}
			}
		}
		if missing > 0 {
			t.Fatalf("run %d: %d messages lost", run, missing)
		}
		for s := range got {
			acked[s] = true
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d: killed after %d lines; %d delivered, %d acked so far, %d received after the restart", run, lines, len(delivered), len(acked), len(got))
	}
	if len(delivered) == 0 {
		t.Fatal("no Deliver ever returned")
	}
}

// TestCrashChild is the process TestCrashKill kills. It does nothing unless
// started by it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("HG_QUEUE_CRASH_DIR")
	if dir == "" {
		t.Skip("helper process for TestCrashKill")
	}
	from, _ := strconv.ParseUint(os.Getenv("HG_QUEUE_CRASH_FROM"), 10, 64)
	seed, _ := strconv.ParseUint(os.Getenv("HG_QUEUE_CRASH_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 3))
	q, err := Open(crashOpts(dir))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(w, format+"\n", args...)
		w.Flush()
	}
	ctx := context.Background()
	// acked: the number of Acks that had returned when each message's Ack
	// returned (1 for the first); a Receive that began after it must not
	// hand the message out. One that began before may: an Ack by ID acks
	// whichever lease the message has, the one that Receive just took too.
	acked := map[uint64]int{}
	acks := 0
	var held []Message
	seq := from
	var mu sync.Mutex
	// A second goroutine acks concurrently, so that acks share fsyncs and
	// race with checkpoints.
	go func() {
		for {
			mu.Lock()
			var m Message
			if len(held) > 0 {
				i := rand.IntN(len(held))
				m = held[i]
				held = append(held[:i], held[i+1:]...)
			}
			mu.Unlock()
			if m.Topic == "" {
				time.Sleep(time.Millisecond)
				continue
			}
			mu.Lock()
			say("a %d", m.ID.Seq)
			mu.Unlock()
			err := q.Ack(ctx, m.Topic, m.ID)
			mu.Lock()
			if err == nil {
				acks++
				acked[m.ID.Seq] = acks
				say("A %d", m.ID.Seq)
			}
			mu.Unlock()
		}
	}()
	for {
		switch op := rng.IntN(10); {
		case op < 3:
			n := 1 + rng.IntN(20)
			batch := make([]engine.Delivery, n)
			for i := range batch {
				s := seq + uint64(i)
				batch[i] = engine.Delivery{ID: message.ID{DeliverAt: int64(s), Seq: s},
					Message: &message.Message{DeliverAt: int64(s), Body: []byte(strconv.FormatUint(s, 10))}}
			}
			if err := q.Deliver(ctx, "t", batch); err != nil {
				fmt.Println("deliver:", err)
				os.Exit(2)
			}
			mu.Lock()
			say("D %d %d", seq, seq+uint64(n))
			mu.Unlock()
			seq += uint64(n)
		case op < 8:
			topic := "t"
			if op == 7 {
				topic = "t.dlq"
			}
			lease := time.Duration(1+rng.IntN(50)) * time.Millisecond
			if rng.IntN(2) == 0 {
				lease = time.Hour
			}
			mu.Lock()
			began := acks
			mu.Unlock()
			ms, err := q.Receive(ctx, topic, 1+rng.IntN(30), 0, lease)
			if err != nil {
				fmt.Println("receive:", err)
				os.Exit(2)
			}
			mu.Lock()
			for _, m := range ms {
				if n, ok := acked[m.ID.Seq]; ok && n <= began {
					say("X %d", m.ID.Seq)
				}
				if rng.IntN(4) > 0 {
					held = append(held, m)
				}
			}
			mu.Unlock()
		default:
			mu.Lock()
			var m Message
			if len(held) > 0 {
				m, held = held[len(held)-1], held[:len(held)-1]
			}
			mu.Unlock()
			if m.Topic != "" {
				if err := q.Nack(ctx, m.Topic, m.ID, NackOptions{}); err != nil && !errors.Is(err, ErrNotLeased) {
					fmt.Println("nack:", err)
					os.Exit(2)
				}
			}
		}
	}
}

// explain logs what the logs of topic in dir say about the message with
// sequence number seq: where it is in the queue log, and every ack-log
// record that names its offset.
func explain(t *testing.T, dir, topic string, seq uint64) {
	base := dir + "/topics/" + topic
	ql, _, err := commitlog.Open(commitlog.Options{Dir: base + "/log", ReadOnly: true})
	if err != nil {
		t.Logf("%s: %v", topic, err)
		return
	}
	defer ql.Close()
	it, _ := ql.NewIterator(ql.FirstOffset())
	var offs []int64
	for it.Next() {
		var id message.ID
		var m message.Message
		if decodeMessage(it.Record().Payload, &id, &m) == nil && id.Seq == seq {
			offs = append(offs, it.Offset())
		}
	}
	it.Close()
	t.Logf("%s: message %d at queue-log offsets %v (log %d..%d)", topic, seq, offs, ql.FirstOffset(), ql.EndOffset())
	al, _, err := commitlog.Open(commitlog.Options{Dir: base + "/acks", ReadOnly: true})
	if err != nil {
		t.Logf("%s acks: %v", topic, err)
		return
	}
	defer al.Close()
	it, _ = al.NewIterator(al.FirstOffset())
	for it.Next() {
		r := it.Record()
		switch r.Type {
		case typeAck:
			a, _ := decodeAck(nil, r.Payload)
			for _, o := range a {
				if slices.Contains(offs, o) {
					t.Logf("  ack-log %d: ack %d", it.Offset(), o)
				}
			}
		case typeCheckpoint:
			ck, n, _ := decodeHead(r.Payload)
			t.Logf("  ack-log %d: checkpoint lwm %d cursor %d end %d unread %d entries %d", it.Offset(), ck.lwm, ck.cursor, ck.end, ck.unread, n)
		case typeEntries:
			es, _ := decodeEntries(nil, r.Payload)
			for _, e := range es {
				if slices.Contains(offs, e.off) {
					t.Logf("  ack-log %d: entry %d attempt %d", it.Offset(), e.off, e.attempt)
				}
			}
		}
	}
	it.Close()
}

// ackAll acks ms from 32 goroutines, so that the acks share fsyncs.
func ackAll(t *testing.T, q *Queue, ms []Message) {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < len(ms); i += 32 {
				if err := q.Ack(context.Background(), ms[i].Topic, ms[i].ID); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

package queue

import (
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestHealth: a failing stage is reported once it has failed for
// StallAfter, naming the topic and the stage, and no longer once it works.
func TestHealth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		age     time.Duration
		ok      bool // the stage worked again
		wantErr bool
	}{
		{"young_failure_not_reported", time.Second, false, false},
		{"old_failure_reported", 3 * time.Second, false, true},
		{"recovered_failure_cleared", 3 * time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c stepClock
			q := openQ(t, t.TempDir(), c.opts)
			defer q.Close()
			q.fail("orders", StageAppend, syscall.ENOSPC)
			q.fail("orders", StageAppend, syscall.ENOSPC)
			c.step(tc.age, tc.age)
			if tc.ok {
				q.ok("orders", StageAppend)
			}
			err := q.Health()
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Health: %v, want nil", err)
				}
				return
			}
			se, ok := errors.AsType[*StallError](err)
			if !ok || se.Topic != "orders" || se.Stage != StageAppend || se.Attempts != 2 || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Health: %#v, want the append stage of orders failing twice with ENOSPC", err)
			}
			if !strings.Contains(err.Error(), `topic "orders": append failing since`) {
				t.Fatalf("Health's text does not say which topic and stage, since when: %v", err)
			}
		})
	}
}

// TestBrokenTopicReopens: a topic whose log failed for good (a sticky
// write or fsync error) is closed and opened again by itself, and then
// works: what it leased is receivable again (at least once), and Health
// clears.
func TestBrokenTopicReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		deliver(t, q, "t", "a", "b")
		leased := recv(t, q, "t", 1, time.Hour)
		tp := topicOf(t, q, "t")
		q.release(tp)
		tp.broke(StageAck, errors.New("commitlog: fsync: input/output error"))
		time.Sleep(time.Second) // the reopening's backoff, on the bubble's clock
		synctest.Wait()
		q.mu.Lock()
		now := q.mu.topics["t"].t
		q.mu.Unlock()
		if now == nil || now == tp {
			t.Fatalf("the broken topic was not opened again (slot holds %p, broken %p)", now, tp)
		}
		ms := recv(t, q, "t", 10, time.Hour)
		if !slices.Equal(bodies(ms), []string{bodies(leased)[0], "b"}) && !slices.Equal(bodies(ms), []string{"a", "b"}) {
			t.Fatalf("after reopening received %q, want a (its lease ended with the broken log) and b", bodies(ms))
		}
		ackAll(t, q, ms)
		if err := q.Health(); err != nil {
			t.Fatalf("Health after recovery: %v", err)
		}
	})
}

// TestReopenResumesAfterEMFILE: a retired topic that cannot be opened
// again because the process is out of descriptors (EMFILE) is reported by
// Health, naming the topic and the stage, and opened again by the queue
// itself, with no caller retrying, once descriptors are free.
func TestReopenResumesAfterEMFILE(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	deliver(t, q, "t", "a")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, func(o *Options) { o.stallAfter = time.Nanosecond })
	defer q.Close()
	if !retired(q, "t") {
		t.Fatal("Open left the recovered topic's files open")
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Lower the soft limit until no descriptor can be opened.
	low := old
	low.Cur = 64
	for ; ; low.Cur-- {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Skip("cannot lower RLIMIT_NOFILE:", err)
		}
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err == nil {
			f.Close()
		}
		if low.Cur == 3 {
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
			t.Skip("could not exhaust the descriptors")
		}
	}
	ms, rerr := q.Receive(ctx(), "t", 1, 0, time.Minute)
	herr := q.Health()
	if len(ms) > 0 {
		t.Fatalf("received %d messages with no descriptor free", len(ms))
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rerr, syscall.EMFILE) {
		t.Fatalf("Receive out of descriptors: %v, want EMFILE", rerr)
	}
	se, ok := errors.AsType[*StallError](herr)
	if !ok || se.Topic != "t" || se.Stage != StageOpen || !errors.Is(herr, syscall.EMFILE) {
		t.Fatalf("Health out of descriptors: %v, want topic t's open stage failing with EMFILE", herr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.Health() != nil || retired(q, "t") {
		if time.Now().After(deadline) {
			t.Fatalf("the topic was not opened again by itself 10 s after descriptors were freed: %v", q.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := bodies(recv(t, q, "t", 10, time.Minute)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("after it resumed: received %q, want a", got)
	}
}

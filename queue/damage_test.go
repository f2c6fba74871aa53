package queue

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// recPos is where one record of a log lies on disk.
type recPos struct {
	path string // segment file
	pos  int64  // file position of the record's first byte
	size int64  // framed size
	typ  uint8
}

// recordsOf lists the records of the log in dir, oldest first.
func recordsOf(t testing.TB, dir string) []recPos {
	t.Helper()
	l, _, err := commitlog.Open(commitlog.Options{Dir: dir, ReadOnly: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bases := l.SegmentBases()
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []recPos
	for it.Next() {
		off := it.Offset()
		i := len(bases) - 1
		for bases[i] > off {
			i--
		}
		out = append(out, recPos{
			path: filepath.Join(dir, fmt.Sprintf("%020d.log", bases[i])),
			pos:  32 + off - bases[i], size: it.Pos() - off, typ: it.Record().Type,
		})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// flip inverts one byte in the middle of record r.
func flip(t testing.TB, r recPos) {
	t.Helper()
	f, err := os.OpenFile(r.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	at := r.pos + r.size/2
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// snapshotFiles reads every file under dir.
func snapshotFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.HasSuffix(p, ".tmp") {
			b, rerr := os.ReadFile(p)
			if rerr != nil {
				t.Fatal(rerr)
			}
			out[p] = b
		}
		return nil
	})
	return out
}

// lastAck picks the last ack record after the last checkpoint head that
// has a record after it. (A damaged last record of a log cannot be told
// from a write cut short by a crash, which the caller was not answered
// for: Open drops it as a torn tail and the queue logs a warning.)
func lastAck(t testing.TB, recs []recPos) recPos {
	t.Helper()
	for i := len(recs) - 2; i >= 0 && recs[i].typ != typeCheckpoint; i-- {
		if recs[i].typ == typeAck {
			return recs[i]
		}
	}
	t.Fatal("no ack after the last checkpoint")
	return recPos{}
}

// TestDamagedLogs damages a stopped queue's files in the ways bit rot and
// operators do, and checks that Open either refuses with a
// *segfile.CorruptionError that names the damaged log, says what is at
// stake and names `hourglass repair`, changing no file, or serves the
// topic without handing out an acked message again.
func TestDamagedLogs(t *testing.T) {
	type dmg func(t *testing.T, topic string)
	flipAt := func(sub string, pick func(n int) int) dmg {
		return func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, sub))
			flip(t, recs[pick(len(recs))])
		}
	}
	for _, tc := range []struct {
		name   string
		damage dmg
		// refuse: Open must fail, naming a file in this log ("" if Open
		// may also succeed).
		refuse string
		stake  string // in the error: what is lost
		crash  bool   // damage a crash image (acks after the last checkpoint)
	}{
		{"ack_log_first_record", flipAt("acks", func(n int) int { return 0 }), "acks", "acked could be handed out again", false},
		{"ack_log_middle_record", flipAt("acks", func(n int) int { return n / 2 }), "acks", "acked could be handed out again", false},
		{"ack_log_last_record", flipAt("acks", func(n int) int { return n - 1 }), "", "", false},
		{"ack_log_ack_after_checkpoint", func(t *testing.T, topic string) {
			flip(t, lastAck(t, recordsOf(t, filepath.Join(topic, "acks"))))
		}, "acks", "acked could be handed out again", true},
		{"queue_log_last_record_of_active", flipAt("log", func(n int) int { return n - 2 }), "log", "would be lost", false},
		{"queue_log_active_segment_deleted", func(t *testing.T, topic string) {
			segs, _ := filepath.Glob(filepath.Join(topic, "log", "*.log"))
			for _, s := range segs[1:] {
				os.Remove(s)
			}
		}, "log", "would be lost", false},
		{"queue_log_zeroed_tail", func(t *testing.T, topic string) {
			// Zeros over the last acked records and what follows: a
			// truncation, not a torn write, since acks name them.
			recs := recordsOf(t, filepath.Join(topic, "log"))
			last, from := recs[len(recs)-1], recs[len(recs)-40]
			for i := len(recs) - 40; from.path != last.path; i++ {
				from = recs[i]
			}
			f, _ := os.OpenFile(last.path, os.O_RDWR, 0)
			f.WriteAt(make([]byte, last.pos+last.size-from.pos), from.pos)
			f.Close()
		}, "log", "would be lost", false},
		{"queue_log_all_segments_deleted", func(t *testing.T, topic string) {
			segs, _ := filepath.Glob(filepath.Join(topic, "log", "*.log"))
			for _, s := range segs {
				os.Remove(s)
			}
		}, "log", "would be lost", false},
		{"ack_log_all_segments_deleted_after_retention", func(t *testing.T, topic string) {
			segs, _ := filepath.Glob(filepath.Join(topic, "acks", "*.log"))
			for _, s := range segs {
				os.Remove(s)
			}
		}, "acks", "acked could be handed out again", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, acked := ackedQueue(t, tc.crash)
			topic := filepath.Join(dir, "topics", "t")
			tc.damage(t, topic)
			before := snapshotFiles(t, dir)
			q, err := Open(smallOpts(dir))
			if err != nil {
				ce, ok := errors.AsType[*segfile.CorruptionError](err)
				if !ok || !isUnder(ce.Path, filepath.Join(topic, tc.refuse)) {
					t.Fatalf("Open: %v\nwant a *segfile.CorruptionError in %s", err, filepath.Join(topic, tc.refuse))
				}
				for _, want := range []string{tc.stake, "hourglass repair"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Open's error does not say %q: %v", want, err)
					}
				}
				after := snapshotFiles(t, dir)
				for p, b := range before {
					if !bytes.Equal(after[p], b) {
						t.Errorf("the failed Open changed %s", p)
					}
				}
				return
			}
			defer q.Close()
			if tc.refuse != "" {
				t.Fatalf("Open succeeded on damage in %s", tc.refuse)
			}
			var again []string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				ms, err := q.Receive(ctx(), "t", 1000, 0, time.Hour)
				if err != nil || len(ms) == 0 {
					break
				}
				for _, m := range ms {
					if acked[m.ID] {
						again = append(again, m.ID.String())
					}
				}
			}
			if len(again) > 0 {
				t.Fatalf("%d acked messages handed out again after the damage, silently: %v", len(again), again[:min(5, len(again))])
			}
		})
	}
}

// smallOpts are the options of ackedQueue's queue.
func smallOpts(dir string) Options {
	o := testOpts(dir)
	// No fsyncs: Close and the crash image's copy see what the page
	// cache holds, which is all these tests need.
	o.checkpointEvery, o.dedupWindow, o.Fsync = 64, -1, commitlog.SyncNone
	return o
}

// ackedQueue makes a stopped queue whose topic "t" holds 900 messages in
// two queue-log segments, all acked but the last 20, one ack record each,
// with checkpoints every 64 acks. It returns the directory and the acked
// IDs.
//
// With crash the directory is a copy taken before Close, as kill -9
// leaves it, and no checkpoint was asked for by the acks: they all follow
// the last checkpoint, if any.
func ackedQueue(t *testing.T, crash bool) (string, map[message.ID]bool) {
	t.Helper()
	dir := t.TempDir()
	opts := smallOpts(dir)
	if crash {
		opts.checkpointEvery = 1 << 20 // every ack follows the last checkpoint
	}
	q, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	var all []message.ID
	for i := range 30 {
		all = append(all, deliver(t, q, "t", strings.Split(strings.Repeat(fmt.Sprintf("m%d,", i), 30), ",")[:30]...)...)
	}
	acked := map[message.ID]bool{}
	for _, m := range drain(t, q, "t") {
		if len(acked) < len(all)-20 {
			if err := q.AckReceipt(ctx(), "t", m.Receipt); err != nil {
				t.Fatal(err)
			}
			acked[m.ID] = true
		}
	}
	if crash {
		img := t.TempDir()
		copyDir(t, dir, img)
		q.Close()
		return img, acked
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, acked
}

// receiveAll receives everything q hands out now, with long leases.
func receiveAll(t *testing.T, q *Queue) []Message {
	t.Helper()
	var out []Message
	for range 100 {
		ms, err := q.Receive(ctx(), "t", 1000, 0, time.Hour)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if len(ms) == 0 {
			break
		}
		out = append(out, ms...)
	}
	return out
}

// TestRepair damages a stopped queue's logs, repairs them and checks that
// the queue opens again and hands out no acked message again unless
// Repair said so and was told to accept it; that every file it changes is
// kept first; and that a dry run changes nothing.
func TestRepair(t *testing.T) {
	for _, tc := range []struct {
		name       string
		damage     func(t *testing.T, topic string)
		crash      bool // damage a crash image (acks after the last checkpoint)
		acksLost   bool // Repair needs AcceptRedelivery
		lostBytes  bool // queue-log records are lost
		maxMissing int  // unacked messages that may be lost
	}{
		{"queue_log_record_of_active", func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, "log"))
			flip(t, recs[len(recs)-5])
		}, false, false, true, 1},
		{"queue_log_zeroed_tail", func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, "log"))
			last, from := recs[len(recs)-1], recs[len(recs)-40]
			for i := len(recs) - 40; from.path != last.path; i++ {
				from = recs[i]
			}
			f, _ := os.OpenFile(last.path, os.O_RDWR, 0)
			f.WriteAt(make([]byte, last.pos+last.size-from.pos), from.pos)
			f.Close()
		}, false, false, true, 20},
		{"ack_log_deleted", func(t *testing.T, topic string) {
			segs, _ := filepath.Glob(filepath.Join(topic, "acks", "*.log"))
			for _, s := range segs {
				os.Remove(s)
			}
		}, false, true, false, 0},
		{"ack_log_last_checkpoint_head", func(t *testing.T, topic string) {
			// The head of the final checkpoint, whose entries follow it.
			recs := recordsOf(t, filepath.Join(topic, "acks"))
			i := len(recs) - 1
			for recs[i].typ != typeCheckpoint {
				i--
			}
			if i == len(recs)-1 {
				t.Fatal("the last checkpoint has no entry records")
			}
			flip(t, recs[i])
		}, false, true, false, 0},
		{"ack_log_flip_before_last_checkpoint", func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, "acks"))
			flip(t, recs[len(recs)-3])
		}, false, false, false, 0},
		{"ack_log_flip_in_acks_after_checkpoint", func(t *testing.T, topic string) {
			flip(t, lastAck(t, recordsOf(t, filepath.Join(topic, "acks"))))
		}, true, true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, acked := ackedQueue(t, tc.crash)
			topic := filepath.Join(dir, "topics", "t")
			tc.damage(t, topic)
			before := snapshotFiles(t, dir)
			dry, err := Repair(dir, RepairOptions{DryRun: true})
			if (err != nil) != tc.acksLost || tc.acksLost && !errors.Is(err, ErrRedelivery) {
				t.Fatalf("dry run: %v; want ErrRedelivery: %v", err, tc.acksLost)
			}
			if len(dry) != 1 || dry[0].AcksLost != tc.acksLost || (dry[0].LostBytes > 0) != tc.lostBytes {
				t.Fatalf("dry run found %+v", dry)
			}
			kept := map[string][]byte{}
			keep := func(p string) error {
				b, err := os.ReadFile(p)
				kept[p] = b
				return err
			}
			_, err = Repair(dir, RepairOptions{Keep: keep})
			if tc.acksLost && !errors.Is(err, ErrRedelivery) || !tc.acksLost && err != nil {
				t.Fatalf("Repair: %v", err)
			}
			for p, b := range snapshotFiles(t, dir) {
				if tc.acksLost && !bytes.Equal(before[p], b) {
					t.Fatalf("the refused repair or the dry run changed %s", p)
				}
			}
			var rep []TopicRepair
			if tc.acksLost {
				if rep, err = Repair(dir, RepairOptions{Keep: keep, AcceptRedelivery: true}); err != nil {
					t.Fatalf("Repair with AcceptRedelivery: %v", err)
				}
			}
			for p, b := range before {
				now, _ := os.ReadFile(p)
				if !bytes.Equal(now, b) && !bytes.Equal(kept[p], b) {
					t.Errorf("Repair changed %s without keeping a copy of it first (kept: %v)", p, slices.Collect(maps.Keys(kept)))
				}
			}
			q, err := Open(smallOpts(dir))
			if err != nil {
				t.Fatalf("Open after Repair: %v", err)
			}
			defer q.Close()
			again, unacked := 0, 0
			for _, m := range receiveAll(t, q) {
				if acked[m.ID] {
					again++
				} else {
					unacked++
				}
			}
			allowed := 0
			if tc.acksLost {
				allowed = int(rep[0].Redeliver)
			}
			if again > allowed {
				t.Fatalf("%d acked messages handed out again; Repair said %d", again, allowed)
			}
			if unacked < 20-tc.maxMissing {
				t.Fatalf("%d of the 20 unacked messages handed out; at most %d may be lost", unacked, tc.maxMissing)
			}
		})
	}
}

// TestVerifyTopic: VerifyTopic finds what the two logs say against each
// other, and nothing in a clean topic.
func TestVerifyTopic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, topic string)
		in     string // the log a finding names; "" for none
	}{
		{"clean", func(*testing.T, string) {}, ""},
		{"ack_log_deleted", func(t *testing.T, topic string) {
			segs, _ := filepath.Glob(filepath.Join(topic, "acks", "*.log"))
			for _, s := range segs {
				os.Remove(s)
			}
		}, "acks"},
		{"queue_log_zeroed_tail", func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, "log"))
			last := recs[len(recs)-1]
			f, _ := os.OpenFile(last.path, os.O_RDWR, 0)
			f.WriteAt(make([]byte, last.size), last.pos)
			f.Close()
		}, "log"},
		{"queue_log_active_segment_deleted", func(t *testing.T, topic string) {
			recs := recordsOf(t, filepath.Join(topic, "log"))
			os.Remove(recs[len(recs)-1].path)
		}, "log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := ackedQueue(t, false)
			topic := filepath.Join(dir, "topics", "t")
			tc.damage(t, topic)
			found, err := VerifyTopic(topic)
			if err != nil {
				t.Fatal(err)
			}
			if tc.in == "" {
				if len(found) > 0 {
					t.Fatalf("findings in a clean topic: %v", found)
				}
				return
			}
			if len(found) == 0 {
				t.Fatal("nothing found")
			}
			for _, f := range found {
				ce, ok := errors.AsType[*segfile.CorruptionError](f)
				if !ok || !isUnder(ce.Path, filepath.Join(topic, tc.in)) {
					t.Errorf("finding %v: want a *segfile.CorruptionError in %s", f, tc.in)
				}
			}
		})
	}
}

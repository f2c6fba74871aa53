package queue

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

type rec struct {
	typ uint8
	p   []byte
}

func ckRecs(ck checkpoint, perPart int) []rec {
	var out []rec
	for _, r := range encodeCheckpoint(&ck, perPart) {
		out = append(out, rec{r.Type, r.Payload})
	}
	return out
}

func TestReplayer(t *testing.T) {
	ck1 := checkpoint{lwm: 10, cursor: 100, end: 120, unread: 1, entries: []entry{{10, 2}, {40, 0}, {110, 0}}}
	ck2 := checkpoint{lwm: 100, cursor: 200, end: 200}
	c1 := ckRecs(ck1, 1) // head and three entry records
	cat := func(parts ...[]rec) []rec { return slices.Concat(parts...) }
	ack := func(offs ...int64) []rec { return []rec{{typeAck, appendAck(nil, offs...)}} }
	for _, tc := range []struct {
		name      string
		recs      []rec
		have      bool
		ck        checkpoint
		acks      []int64
		discarded int
		bad       bool
	}{
		{"empty", nil, false, checkpoint{}, nil, 0, false},
		{"acks_only", cat(ack(5), ack(7, 9)), false, checkpoint{}, []int64{5, 7, 9}, 0, false},
		{"checkpoint_then_acks", cat(ack(1), c1, ack(40)), true, ck1, []int64{40}, 0, false},
		{"later_checkpoint_wins", cat(c1, ack(40), ckRecs(ck2, 4), ack(150)), true, ck2, []int64{150}, 0, false},
		{"torn_at_end", cat(c1, ack(40), c1[:2]), true, ck1, []int64{40}, 1, false},
		{"torn_then_ack", cat(c1, c1[:3], ack(40)), true, ck1, []int64{40}, 1, false},
		{"torn_then_checkpoint", cat(c1[:2], ckRecs(ck2, 4)), true, ck2, nil, 1, false},
		{"orphans_at_start", cat(c1[2:], ack(3), ckRecs(ck2, 4)), true, ck2, nil, 0, false},
		{"orphans_without_checkpoint", cat(c1[2:], ack(3)), false, checkpoint{}, nil, 0, true},
		{"entries_mid_log", cat(ack(3), c1[2:3]), false, checkpoint{}, nil, 0, true},
		{"too_many_entries", cat(c1, c1[3:]), false, checkpoint{}, nil, 0, true},
		{"unordered_entries", cat(c1[:1], c1[2:3], c1[1:2]), false, checkpoint{}, nil, 0, true},
		{"unknown_type", []rec{{'Z', []byte{1}}}, false, checkpoint{}, nil, 0, true},
		{"bad_version", []rec{{typeAck, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}}}, false, checkpoint{}, nil, 0, true},
		{"head_cursor_past_end", ckRecs(checkpoint{lwm: 0, cursor: 9, end: 8}, 1), false, checkpoint{}, nil, 0, true},
		{"attempt_past_cursor", ckRecs(checkpoint{cursor: 9, end: 9, entries: []entry{{9, 1}}}, 1), false, checkpoint{}, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r replayer
			var err error
			for _, x := range tc.recs {
				if err = r.add(x.typ, x.p); err != nil {
					break
				}
			}
			if err == nil {
				err = r.finish()
			}
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want bad=%v", err, tc.bad)
			}
			if tc.bad {
				return
			}
			if r.have != tc.have || r.discarded != tc.discarded || !slices.Equal(r.acks, tc.acks) {
				t.Fatalf("have %v discarded %d acks %v, want %v %d %v", r.have, r.discarded, r.acks, tc.have, tc.discarded, tc.acks)
			}
			if r.have && (r.ck.key() != tc.ck.key() || !slices.Equal(r.ck.entries, tc.ck.entries)) {
				t.Fatalf("checkpoint %+v, want %+v", r.ck, tc.ck)
			}
		})
	}
}

// TestCorruption writes records that pass their checksums but make no
// sense, and checks that they are reported as *segfile.CorruptionError, never
// served.
func TestCorruption(t *testing.T) {
	msg := func() []byte {
		return appendMessage(nil, message.ID{DeliverAt: 1, Seq: 1}, &message.Message{Body: []byte("x")})
	}
	for _, tc := range []struct {
		name    string
		queue   []commitlog.Record // appended to the queue log
		acks    []commitlog.Record // appended to the ack log
		openErr bool               // else the first Receive fails
	}{
		{"unknown_ack_record", nil, []commitlog.Record{{Type: 'Z', Payload: []byte{1}}}, true},
		{"checkpoint_beyond_queue_log", nil, encodeCheckpoint(&checkpoint{cursor: 1 << 20, end: 1 << 20}, 10), true},
		{"unknown_queue_record", []commitlog.Record{{Type: typeMessage, Payload: msg()}, {Type: 'Z', Payload: msg()}}, nil, false},
		{"bad_message_payload", []commitlog.Record{{Type: typeMessage, Payload: msg()}, {Type: typeMessage, Payload: msg()[:5]}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOpts(dir)
			for sub, recs := range map[string][]commitlog.Record{"log": tc.queue, "acks": tc.acks} {
				l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "topics", "t", sub), SegmentSize: 64 << 10})
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) > 0 {
					if _, err := l.Append(nil, recs...); err != nil {
						t.Fatal(err)
					}
				}
				l.Close()
			}
			q, err := Open(opts)
			if tc.openErr {
				var ce *segfile.CorruptionError
				if !errors.As(err, &ce) || !strings.HasPrefix(ce.Path, filepath.Join(dir, "topics", "t")+string(filepath.Separator)) {
					t.Fatalf("Open: %v, want a *segfile.CorruptionError in topic t's logs", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			// The good message before the damaged one is served, then the
			// damage is reported, every time, and the reader stays there.
			ms, err := q.Receive(context.Background(), "t", 10, 0, 0)
			if err != nil || len(ms) != 1 {
				t.Fatalf("first Receive: %v %v, want the good message", ms, err)
			}
			bad := ms[0].Offset + int64(len(msg())) + 16
			for range 2 {
				ms, err := q.Receive(context.Background(), "t", 10, 0, 0)
				// The queue log's first segment starts at offset 0, after
				// its 32-byte header.
				var ce *segfile.CorruptionError
				if !errors.As(err, &ce) || filepath.Dir(ce.Path) != filepath.Join(dir, "topics", "t", "log") || ce.Offset != 32+bad || len(ms) != 0 {
					t.Fatalf("Receive: %v %v, want a *segfile.CorruptionError at queue-log offset %d", ms, err, bad)
				}
			}
			tp := topicOf(t, q, "t")
			tp.mu.Lock()
			ck := tp.snapshotLocked()
			tp.mu.Unlock()
			if ck.cursor != bad {
				t.Fatalf("checkpoint cursor %d: it must not pass the damaged record at %d", ck.cursor, bad)
			}
		})
	}
}

package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/server"
)

func TestIDRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    int
		seq  uint64
		idx  int
		at   int64
	}{
		{"first", 0, 1, 0, 1_700_000_000_000},
		{"last_partition", MaxPartitions - 1, 42, 3, 1},
		{"max_seq", 7, MaxSeq, 0, 1_800_000_000_000},
		{"max_index", 1, 1, MaxBatch - 1, 2},
		{"all_max", MaxPartitions - 1, MaxSeq, MaxBatch - 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := MakeID(tc.p, tc.seq, tc.idx, tc.at)
			p, seq, idx := SplitID(id)
			if p != tc.p || seq != tc.seq || idx != tc.idx || id.DeliverAt != tc.at {
				t.Fatalf("MakeID(%d, %d, %d, %d) = %v splits into (%d, %d, %d)", tc.p, tc.seq, tc.idx, tc.at, id, p, seq, idx)
			}
			back, err := message.ParseID(id.String())
			if err != nil || back != id {
				t.Fatalf("ParseID(%q) = %v, %v; want %v", id.String(), back, err, id)
			}
			b, ok := idFromBytes(appendIDBytes(nil, id))
			if !ok || b != id {
				t.Fatalf("header bytes round trip: %v, %v", b, ok)
			}
		})
	}
}

func TestKeyPartition(t *testing.T) {
	const parts = 8
	seen := map[int]int{}
	for i := range 1000 {
		key := "order-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		p := KeyPartition("orders", key, parts)
		if p < 0 || p >= parts {
			t.Fatalf("partition %d out of [0,%d)", p, parts)
		}
		if again := KeyPartition("orders", key, parts); again != p {
			t.Fatalf("key %q: partition %d then %d", key, p, again)
		}
		seen[p]++
	}
	for p := range parts {
		if seen[p] < 60 { // 125 expected; far below means a bad spread
			t.Errorf("partition %d got %d of 1000 keys: %v", p, seen[p], seen)
		}
	}
	// The topic is part of the hash: ("a", "bc") and ("ab", "c") differ.
	if msgID("a", "bc") == msgID("ab", "c") {
		t.Fatal("msgID does not separate topic and key")
	}
}

func TestBatchMsgID(t *testing.T) {
	two := batchMsgID([]string{"t", "t"}, []string{"a", "b"})
	for _, tc := range []struct {
		name          string
		topics, keys  []string
		want, notWant string
	}{
		{"single_keyed_is_the_schedule_id", []string{"t"}, []string{"k"}, msgID("t", "k"), ""},
		{"single_unkeyed", []string{"t"}, []string{""}, "", ""},
		{"one_unkeyed_in_batch", []string{"t", "t"}, []string{"a", ""}, "", ""},
		{"same_batch_same_id", []string{"t", "t"}, []string{"a", "b"}, two, ""},
		{"order_matters", []string{"t", "t"}, []string{"b", "a"}, "", two},
		{"boundaries_matter", []string{"t", "t"}, []string{"ab", ""}, "", two},
		{"topic_matters", []string{"t", "u"}, []string{"a", "b"}, "", two},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := batchMsgID(tc.topics, tc.keys)
			if tc.notWant != "" {
				if got == tc.notWant {
					t.Fatalf("batchMsgID = %q, the same as another batch's", got)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("batchMsgID = %q, want %q", got, tc.want)
			}
		})
	}
	if two == "" || two == msgID("t", "a") {
		t.Fatalf("a keyed batch of two has Nats-Msg-Id %q", two)
	}
}

// The index field holds the server's largest batch.
func TestMaxBatchHoldsTheServers(t *testing.T) {
	if server.MaxBatch > MaxBatch {
		t.Fatalf("server.MaxBatch %d does not fit the ID's index field (%d)", server.MaxBatch, MaxBatch)
	}
}

// Setup waits out "no suitable peers" (a NATS server still starting) but
// not other JetStream answers.
func TestNoPeersYet(t *testing.T) {
	noPeers := fmt.Errorf("creating: %w", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"})
	if !noPeersYet(noPeers) {
		t.Fatal("err_code 10005 not recognised")
	}
	if noPeersYet(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}) || noPeersYet(errors.New("timeout")) {
		t.Fatal("another error taken for 10005")
	}
}

// TestReservedHeadersHavePrefix: the cluster's own headers carry the
// prefix the server refuses from clients (message.Reserved), besides the
// check ScheduleBatch makes of them.
func TestReservedHeadersHavePrefix(t *testing.T) {
	for _, k := range []string{idHeader, replacesHeader, recurPutHeader, recurDeleteHeader, recurOriginHeader} {
		if !message.Reserved(k) || !reservedHeader(k) {
			t.Errorf("header %q: message.Reserved %v, reservedHeader %v; want both", k, message.Reserved(k), reservedHeader(k))
		}
	}
}

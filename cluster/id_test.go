package cluster

import (
	"testing"

	"github.com/hourglassmq/hourglass/message"
)

func TestIDRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    int
		seq  uint64
		at   int64
	}{
		{"first", 0, 1, 1_700_000_000_000},
		{"last_partition", MaxPartitions - 1, 42, 1},
		{"max_seq", 7, MaxSeq, 1_800_000_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := MakeID(tc.p, tc.seq, tc.at)
			p, seq := SplitID(id)
			if p != tc.p || seq != tc.seq || id.DeliverAt != tc.at {
				t.Fatalf("MakeID(%d, %d, %d) = %v splits into (%d, %d)", tc.p, tc.seq, tc.at, id, p, seq)
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

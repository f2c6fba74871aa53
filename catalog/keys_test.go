package catalog

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hourglassmq/hourglass/message"
)

// TestKeysPagesFilled: keys committed in the order they grow, a commit
// per batch as reput does, fill the Keys table's leaf pages (bbolt's
// default fill half-filled every page split among them), whether they sort
// in that order (order-000001, order-000002, ...) or not (order-9 after
// order-10: numbers without leading zeros); keys in random order fill
// them as well as at bbolt's default (about 0.7; 0.44 at 0.9).
func TestKeysPagesFilled(t *testing.T) {
	inOrder := func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		return o
	}
	padded := func(i int) string { return fmt.Sprintf("order-%06d", i) }
	for _, tc := range []struct {
		name    string
		order   func(n int) []int
		key     func(i int) string
		minFill float64
	}{
		{"in_order", inOrder, padded, 0.8},
		{"numbers_in_order", inOrder, func(i int) string { return "order-" + strconv.Itoa(i) }, 0.8},
		{"random", func(n int) []int { return rand.New(rand.NewPCG(1, 2)).Perm(n) }, padded, 0.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, filepath.Join(t.TempDir(), FileName))
			defer c.Close()
			const n, batch = 100_000, 5_000
			order := tc.order(n)
			for len(order) > 0 {
				pairs := make([]KeyID, 0, batch)
				for _, i := range order[:batch] {
					pairs = append(pairs, KeyID{Key: string(KeyOf("jobs", tc.key(i))), ID: message.ID{DeliverAt: int64(i), Seq: uint64(i)}, At: 1})
				}
				order = order[batch:]
				c.PutKeys(pairs)
				if err := c.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			var st bolt.BucketStats
			if err := c.db.View(func(tx *bolt.Tx) error { st = tx.Bucket([]byte(Keys)).Stats(); return nil }); err != nil {
				t.Fatal(err)
			}
			if st.KeyN != n {
				t.Fatalf("%d keys, want %d", st.KeyN, n)
			}
			if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < tc.minFill {
				t.Fatalf("leaf pages %.2f full (%d of %d bytes), want at least %.2f", fill, st.LeafInuse, st.LeafAlloc, tc.minFill)
			}
		})
	}
}

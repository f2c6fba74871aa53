package catalog

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/message"
)

// BenchmarkCommitKeys measures Commit of a checkpoint's worth of keys (a
// second of keyed Schedules at 100,000/s) into a catalog that already
// holds a million: the time reput's checkpoint spends on the catalog.
func BenchmarkCommitKeys(b *testing.B) {
	c, err := Open(filepath.Join(b.TempDir(), FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const held, batch = 1_000_000, 100_000
	for i := range held / batch {
		for j := range batch {
			k := i*batch + j
			c.Put(Keys, KeyOf("orders", fmt.Sprintf("order-%d", k)), EncodeID(message.ID{DeliverAt: int64(k), Seq: uint64(k)}))
		}
		if err := c.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	n := held
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		for range batch {
			c.Put(Keys, KeyOf("orders", fmt.Sprintf("order-%d", n)), EncodeID(message.ID{DeliverAt: int64(n), Seq: uint64(n)}))
			n++
		}
		b.StartTimer()
		if err := c.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch), "keys/commit")
}

package crashtest

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScanNodeStages reads a forged serve log: the lease losses, starts,
// failed starts and remade readers from the kill until the next kill are
// counted at their ms after the kill; lines before the kill, at or after
// the next one, and other messages are not.
func TestScanNodeStages(t *testing.T) {
	const log = `time=2030-01-01T00:00:00.500Z level=INFO msg="cluster: partition taken" partition=1 done_records=0 after=5ms
time=2030-01-01T00:00:02.900Z level=WARN msg="cluster: lease lost; stopping partition" partition=7
time=2030-01-01T00:00:03.000Z level=WARN msg="engine: sink failed; retrying" partition=6 err="cluster: lease of the partition lost; its new owner delivers"
time=2030-01-01T00:00:04.100Z level=WARN msg="cluster: lease lost; stopping partition" partition=0
time=2030-01-01T00:00:06.000Z level=INFO msg="cluster: partition taken" partition=7 done_records=328 after=27ms
time=2030-01-01T00:00:11.000Z level=ERROR msg="cluster: partition stopped" partition=6 err="cluster: done stream of partition 6: context deadline exceeded"
time=2030-01-01T00:00:14.000Z level=WARN msg="cluster: reading the intake stream; resuming" partition=6 stream=HG_IN_6 next_seq=147 err="x"
not a log line
time=2030-01-01T00:00:21.000Z level=INFO msg="cluster: partition taken" partition=6 done_records=1 after=1ms
`
	t0 := time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)
	var st NodeStages
	if err := scanNodeStages(strings.NewReader(log), t0, t0.Add(20*time.Second), &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.LeasesLost, []float64{1900, 3100}) || !slices.Equal(st.Started, []float64{5000}) ||
		!slices.Equal(st.StartsFailed, []float64{10000}) || !slices.Equal(st.ReadersRemade, []float64{13000}) {
		t.Errorf("stages %+v; want leases lost at 1900 and 3100 ms, started at 5000, failed at 10000, reader remade at 13000", st)
	}
	want := "leases lost 2 (1900-3100 ms); partitions started 1 (5000 ms); starts failed 1 (10000 ms); intake readers remade 1 (13000 ms)"
	if got := st.stagesLine(); got != want {
		t.Errorf("line %q; want %q", got, want)
	}
	if got := (&NodeStages{}).stagesLine(); got != "leases lost 0; partitions started 0; starts failed 0; intake readers remade 0" {
		t.Errorf("empty line %q", got)
	}
}

package workload

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/peers"
)

// W5 (cost at steady load): messages produced steadily at W5Rate a second
// for W5Duration, each due W5MinDelay to W5MaxDelay after it is produced,
// consumed and acked. What it measures is the server's CPU time and the
// disk's flushes over the run, from the first produce until every message
// was delivered.
const (
	W5MinDelay = time.Second
	W5MaxDelay = 20 * time.Second
)

// DefaultW5Rates are the rates W5 runs at (messages a second).
var DefaultW5Rates = []int{2000, 20000}

// runSteady is W5 at o.W5Rate.
func runSteady(ctx context.Context, res *Result, srv *peers.Server, d peers.Driver, o Options) {
	n := max(1, int(float64(o.W5Rate)*o.W5Duration.Seconds()))
	res.Rate = o.W5Rate
	run := startDelivering(ctx, res, d, o, n)
	if run == nil {
		return
	}
	cpu0, err := cpuSeconds(srv.PIDs())
	if err != nil {
		res.End = err.Error()
		run.stop()
		return
	}
	flush0, flushErr := diskFlushes(srv.Dir)
	start := time.Now()
	deadline := start.Add(o.W5Duration + W5MaxDelay + o.RunTimeout)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	seed := uint64(start.UnixNano())
	interval := time.Second / time.Duration(o.W5Rate)
	// Message i is made at start + i/rate (each producer waits for its
	// next one's time), due 1 to 20 s after that.
	due := func(i int, _ time.Time) time.Time {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			select {
			case <-time.After(w):
			case <-rctx.Done():
			}
		}
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		return time.Now().Add(W5MinDelay + time.Duration(r.Int64N(int64(W5MaxDelay-W5MinDelay))))
	}
	if err := run.produce(rctx, res, d, o, start, due, nil); err != nil {
		res.End = "producing: " + err.Error()
	} else {
		res.End = waitAll(ctx, run.tr, deadline, 0)
	}
	elapsed := time.Since(start)
	cpu1, err := cpuSeconds(srv.PIDs())
	if err == nil {
		res.ServerCPUSeconds = cpu1 - cpu0
		res.CPUSecondsPer100k = res.ServerCPUSeconds / float64(n) * 100_000
	} else {
		o.logf("W5: the server's CPU time: %v", err)
	}
	if flushErr == nil {
		if flush1, err := diskFlushes(srv.Dir); err == nil {
			res.FlushesPerSec = float64(flush1-flush0) / elapsed.Seconds()
		}
	} else {
		o.logf("W5: the disk's flushes: %v", flushErr)
	}
	res.SteadySeconds = elapsed.Seconds()
	run.finish(res)
}

// cpuSeconds is the user and system CPU time of pids (utime and stime in
// /proc/PID/stat), in seconds.
func cpuSeconds(pids []int) (float64, error) {
	if len(pids) == 0 {
		return 0, fmt.Errorf("W5: the server is not running")
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited meanwhile
		}
		// The fields after the command name, which may hold spaces.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0, fmt.Errorf("W5: /proc/%d/stat has %d fields after the name", pid, len(f))
		}
		for _, k := range []int{11, 12} { // utime, stime (fields 14 and 15)
			v, err := strconv.ParseInt(f[k], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("W5: /proc/%d/stat: %v", pid, err)
			}
			ticks += v
		}
	}
	return float64(ticks) / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times
// (100 on Linux for every architecture Go supports).
const clockTicks = 100

// diskFlushes is the flush requests completed by the block device that
// holds dir (/proc/diskstats, the 16th statistic; Linux 5.5 and later):
// the machine's, not one process's, so it counts the server's fsyncs only
// on an otherwise quiet machine. A partition's flushes are counted on its
// disk, which is used when the partition has none.
func diskFlushes(dir string) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("W5: %v", err)
	}
	major, minor := uint64(st.Dev>>8)&0xfff, uint64(st.Dev&0xff)|uint64(st.Dev>>12)&^0xff
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return 0, fmt.Errorf("W5: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var name string
	byName := map[string]int64{}
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 19 {
			continue // a kernel before 5.5: no flush counts
		}
		v, _ := strconv.ParseInt(fs[18], 10, 64)
		byName[fs[2]] = v
		if fs[0] == strconv.FormatUint(major, 10) && fs[1] == strconv.FormatUint(minor, 10) {
			name = fs[2]
		}
	}
	if name == "" {
		return 0, fmt.Errorf("W5: no /proc/diskstats line with flush counts for device %d:%d (of %s)", major, minor, dir)
	}
	if v := byName[name]; v > 0 {
		return v, nil
	}
	for disk, v := range byName { // the partition's disk: its name is a prefix
		if disk != name && strings.HasPrefix(name, disk) && v > 0 {
			return v, nil
		}
	}
	return 0, nil
}

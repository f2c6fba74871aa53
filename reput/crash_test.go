package reput

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

var (
	crashRuns = flag.Int("reput.crashruns", 200, "SIGKILL runs in TestReputCrashKill")
	crashSeed = flag.Uint64("reput.seed", 0, "first seed of TestReputCrashKill (0: from the clock)")
)

// TestReputCrashKill runs producers, the commitlog and reput in a child
// process, SIGKILLs it at a seeded random moment, and checks that every
// acknowledged schedule record is in the schedule segments exactly once
// (I1, I2) once a fresh reput has caught up. The same directory goes through
// every run, so later runs restart on what earlier crashes left.
func TestReputCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes; skipped with -short")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -reput.seed=%d)", seed, seed)
	dir := t.TempDir()
	acked := map[uint64]bool{}
	for run := range *crashRuns {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		cmd := exec.Command(os.Args[0], "-test.run=^TestReputCrashChild$")
		cmd.Env = append(os.Environ(), "HG_REPUT_CHILD="+dir, fmt.Sprintf("HG_REPUT_SEED=%d", seed+uint64(run)))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := rng.IntN(600)
		var once sync.Once
		kill := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGKILL) }) }
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "ack" {
				seq, _ := strconv.ParseUint(f[1], 10, 64)
				acked[seq] = true
				if n++; n >= killAfter {
					kill()
				}
			}
		}
		kill()
		cmd.Wait()

		// Recover in this process and let reput catch up.
		e := newEnv(t, dir, nil)
		e.waitRouted()
		e.close()
		got := scan(t, e.opts.Dir) // fails on any duplicate (I2)
		for seq := range acked {
			if _, ok := got[seq]; !ok {
				t.Fatalf("run %d (seed %d): acknowledged seq %d missing from the schedule segments (I1)", run, seed, seq)
			}
		}
	}
	if len(acked) == 0 {
		t.Fatal("no record was ever acknowledged")
	}
	t.Logf("%d runs, %d acknowledged records checked", *crashRuns, len(acked))
}

// TestReputCrashChild is the process TestReputCrashKill kills.
func TestReputCrashChild(t *testing.T) {
	dir := os.Getenv("HG_REPUT_CHILD")
	if dir == "" {
		t.Skip("helper process for TestReputCrashKill")
	}
	seed, _ := strconv.ParseUint(os.Getenv("HG_REPUT_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 7))
	l, _, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(dir, "commitlog"), SegmentSize: 64 << 10})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	_, err = Start(Options{Log: l, Dir: filepath.Join(dir, "schedule"), SegmentDuration: time.Second,
		checkpointInterval: time.Duration(1+rng.IntN(5)) * time.Millisecond, maxOpenWriters: 1 + rng.IntN(4)})
	if err != nil {
		fmt.Println("reput:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; i < 100000; i++ {
		at := base + int64(rng.IntN(20))*1000 + int64(rng.IntN(1000))
		offs, err := l.Append(nil, schedRec(at, "crash"))
		if err != nil {
			fmt.Println("append:", err)
			os.Exit(2)
		}
		fmt.Fprintf(w, "ack %d\n", offs[0])
		w.Flush()
	}
	os.Exit(0)
}

// TestDropUnsyncedWrites simulates a machine crash: reput stops without
// syncing, and every schedule segment and dispatch log loses whatever was
// written after its last fsync (cut at a random length in between). The
// commitlog, under SyncAlways, keeps everything acknowledged. A fresh
// reput must route every record exactly once.
func TestDropUnsyncedWrites(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			dir := t.TempDir()
			var mu sync.Mutex
			synced := map[string]int64{}
			record := func(f *os.File) error {
				if err := f.Sync(); err != nil {
					return err
				}
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				mu.Lock()
				// A created file keeps the name of the temporary file it
				// was renamed from.
				synced[strings.TrimSuffix(f.Name(), ".tmp")] = fi.Size()
				mu.Unlock()
				return nil
			}
			e := newEnv(t, dir, func(o *Options) {
				o.checkpointInterval = time.Duration(rng.IntN(3)) * time.Millisecond
				o.schedule.SyncFile = record
				o.dispatch.SyncFile = record
			})
			var ids []message.ID
			for range 5 {
				ids = append(ids, e.schedule(200, 6, "d")...)
				e.log.Append(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, ids[rng.IntN(len(ids))])})
				e.waitRouted()
			}
			e.r.abandon()
			e.log.Close()
			files, _ := filepath.Glob(filepath.Join(e.opts.Dir, "*Z.*"))
			for _, f := range files {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				keep, ok := synced[f]
				mu.Unlock()
				if !ok {
					keep = segfile.HeaderSize // created durably, never synced since
				}
				if keep < fi.Size() {
					keep += rng.Int64N(fi.Size() - keep + 1)
				}
				if err := os.Truncate(f, keep); err != nil {
					t.Fatal(err)
				}
			}
			e = newEnv(t, dir, nil)
			e.waitRouted()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e.r.WaitRouted(ctx, e.log.EndOffset())
			e.close()
			got := scan(t, e.opts.Dir)
			for _, id := range ids {
				if _, ok := got[id.Seq]; !ok {
					t.Fatalf("seq %d lost", id.Seq)
				}
			}
		})
	}
}

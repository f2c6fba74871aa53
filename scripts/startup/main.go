// Command startup measures how long `hourglass serve` takes to become
// ready against the number of future schedule segments in its data
// directory (invariant I5: it must not grow with them). It is run by
// scripts/bench-startup.sh, which has the usage; on its own:
//
//	go run ./scripts/startup gen  -data-dir D -n 100000   # add N future one-hour segments to D
//	go run ./scripts/startup fill -data-dir D -mib 250    # fill D's commitlog with small keyed messages
//	go run ./scripts/startup time -bin ./hourglass -data-dir D -runs 3
//
// fill schedules keyed messages (64-byte bodies, a day ahead, each with
// its own idempotency key) through an engine in this process, without
// fsync, until the commitlog holds -mib MiB, and waits until they are
// routed: a restart then checks every record the commitlog retains (the
// newest sealed segment and the active one, up to 256 MiB) before Ready
// (engine checkRetained), the most there is to check.
//
// gen writes each segment as schedulelog writes a new, empty one (its
// header only), one hour apart from the next full hour on, without an
// fsync per file (one for the directory at the end): the point is the
// count of files, not their content, and writing them through the server
// would take an fsync pair per segment. The data directory must have been
// created by a server (serve, then stop), so that its checkpoint and
// retired log exist.
//
// time starts `serve` on 127.0.0.1 with a free port, polls /readyz every
// millisecond and reports the time from starting the process to the first
// 200, then stops it with SIGTERM; -runs times, printing each and the
// median.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: startup gen|fill|time [flags] (see go doc ./scripts/startup)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "time":
		err = timeServe(os.Args[2:])
	case "fill":
		err = fill(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: gen, fill or time", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(1)
	}
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "data directory made by a server (required)")
	n := fs.Int("n", 100, "future segments to add")
	dur := fs.Duration("duration", time.Hour, "bucket length of the segments")
	fs.Parse(args)
	if *dataDir == "" {
		return errors.New("gen: -data-dir is required")
	}
	dir := filepath.Join(*dataDir, "schedule")
	if _, err := os.Stat(filepath.Join(dir, "reput.checkpoint")); err != nil {
		return fmt.Errorf("gen: %s is not a data directory a server made (start and stop `hourglass serve` on it first): %w", *dataDir, err)
	}
	if err := schedulelog.ValidateDuration(*dur); err != nil {
		return err
	}
	d := dur.Milliseconds()
	first := schedulelog.BucketStart(time.Now().UnixMilli(), *dur) + 2*d
	for i := range *n {
		start := first + int64(i)*d
		h := segfile.EncodeHeader(segfile.Header{Magic: schedulelog.Magic, Start: start, Duration: d})
		if err := os.WriteFile(filepath.Join(dir, schedulelog.Name(start)), h, 0o644); err != nil {
			return err
		}
	}
	if err := segfile.SyncDir(dir); err != nil {
		return err
	}
	fmt.Printf("added %d segments of %v to %s, from %s\n", *n, *dur, dir, time.UnixMilli(first).UTC().Format(time.RFC3339))
	return nil
}

func fill(args []string) error {
	fs := flag.NewFlagSet("fill", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "data directory (required; created if missing)")
	mib := fs.Int64("mib", 250, "fill the commitlog up to this many MiB")
	fs.Parse(args)
	if *dataDir == "" {
		return errors.New("fill: -data-dir is required")
	}
	e, err := engine.Open(engine.Options{Dir: *dataDir, Fsync: commitlog.SyncNone, IdempotencyWindow: 10 * time.Minute,
		Sink: engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })})
	if err != nil {
		return err
	}
	ctx := context.Background()
	body := make([]byte, 64)
	n := 0
	for end := int64(0); end < *mib<<20; {
		reqs := make([]engine.Request, 1000)
		for i := range reqs {
			reqs[i] = engine.Request{Topic: "keys", Body: body, Delay: 24 * time.Hour, IdempotencyKey: fmt.Sprintf("key-%012d", n)}
			n++
		}
		ids, err := e.ScheduleBatch(ctx, reqs)
		if err != nil {
			e.Close()
			return err
		}
		end = int64(ids[len(ids)-1].Seq) // an ID's seq is its record's commitlog offset
	}
	if err := e.WaitRouted(ctx); err != nil {
		e.Close()
		return err
	}
	if err := e.Close(); err != nil {
		return err
	}
	fmt.Printf("scheduled %d keyed messages into %s\n", n, *dataDir)
	return nil
}

var listenRE = regexp.MustCompile(`listening on (\S+)`)

func timeServe(args []string) error {
	fs := flag.NewFlagSet("time", flag.ExitOnError)
	bin := fs.String("bin", "hourglass", "the hourglass binary")
	dataDir := fs.String("data-dir", "", "data directory (required)")
	runs := fs.Int("runs", 3, "runs")
	dropCaches := fs.Bool("cold", false, "drop the page cache before each run (needs root and a writable /proc/sys/vm/drop_caches)")
	logTo := fs.String("log", "", "append serve's log (at --log-level info) to this file, to see where start-up went")
	fs.Parse(args)
	if *dataDir == "" {
		return errors.New("time: -data-dir is required")
	}
	var got []time.Duration
	for run := range *runs {
		if *dropCaches {
			syscall.Sync()
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
				return fmt.Errorf("time: cold runs need to drop the page cache: %w", err)
			}
		}
		d, err := once(*bin, *dataDir, *logTo)
		if err != nil {
			return err
		}
		fmt.Printf("run %d: ready after %v\n", run+1, d.Round(100*time.Microsecond))
		got = append(got, d)
	}
	slices.Sort(got)
	fmt.Printf("median %v of %d runs\n", got[len(got)/2].Round(100*time.Microsecond), len(got))
	return nil
}

// once starts serve, times it to the first /readyz 200, and stops it.
// With logTo, serve logs at info level and its log is appended there.
func once(bin, dataDir, logTo string) (time.Duration, error) {
	level := "warn"
	var logFile *os.File
	if logTo != "" {
		f, err := os.OpenFile(logTo, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		level, logFile = "info", f
	}
	cmd := exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--log-level", level)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if logFile != nil {
				fmt.Fprintln(logFile, sc.Text())
			}
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/readyz"
	case <-time.After(5 * time.Minute):
		return 0, errors.New("time: serve printed no address within 5 minutes")
	}
	client := &http.Client{Timeout: time.Second}
	deadline := t0.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(t0), nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0, errors.New("time: /readyz not 200 within 5 minutes")
}

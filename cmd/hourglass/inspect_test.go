package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/message"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const (
	testdata   = "../../testdata"
	goldenNow  = "2026-11-30T04:30:00Z"
	goldenDirs = "healthy torn-tail sched-bitflip done-bitflip"
)

// goldenCases are the inspect commands run on every testdata directory.
var goldenCases = []struct {
	name string
	args []string
}{
	{"segments", []string{"segments"}},
	{"segments-json", []string{"segments", "--json"}},
	{"segments-later", []string{"segments", "--now", "2026-11-30T07:30:00Z"}},
	{"segments-lead", []string{"segments", "--preload-lead", "45m"}},
	{"dump-0400", []string{"dump", "--bucket", "2026-11-30T04:15:00Z"}},
	{"dump-0500-json", []string{"dump", "--json", "20261130T050000Z.sched"}},
	{"dump-0600-full", []string{"dump", "--full", "--bucket", "2026-11-30T06:00:00Z"}},
	{"dump-filtered", []string{"dump", "--topic", "orders", "--pending-only", "--limit", "2", "--bucket", "2026-11-30T04:00:00Z"}},
	{"commitlog", []string{"commitlog"}},
	{"commitlog-json", []string{"commitlog", "--json"}},
	{"commitlog-dump", []string{"commitlog", "--dump", "0", "--limit", "6"}},
	{"commitlog-dump-json", []string{"commitlog", "--dump", "1000", "--json"}},
	{"verify", []string{"verify"}},
	{"verify-json", []string{"verify", "--json"}},
	{"timeline", []string{"timeline", "--hours", "4"}},
	{"timeline-json", []string{"timeline", "--hours", "2", "--json"}},
}

// runInspect runs `hourglass inspect args...` in-process and returns its
// stdout, and its exit status and error message as the binary would end.
func runInspect(t *testing.T, args ...string) (string, int, string) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	code := -1
	app.ExitErrHandler = func(_ *cli.Context, err error) {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
	}
	err := app.RunContext(context.Background(), append([]string{"hourglass", "inspect"}, args...))
	msg := ""
	switch {
	case code >= 0:
		msg = err.Error()
	case err != nil:
		code, msg = 1, "hourglass: "+err.Error()
	default:
		code = 0
	}
	return out.String(), code, msg
}

// TestInspectGolden runs each inspect command on each testdata directory
// and compares stdout, exit status and error with testdata/golden
// (rewritten by go test ./cmd/hourglass -run TestInspectGolden -update).
func TestInspectGolden(t *testing.T) {
	for _, dir := range strings.Fields(goldenDirs) {
		for _, tc := range goldenCases {
			t.Run(dir+"/"+tc.name, func(t *testing.T) {
				args := append([]string{tc.args[0], "--data-dir", filepath.Join(testdata, dir)}, tc.args[1:]...)
				if !hasFlag(args, "--now") {
					args = append(args[:1], append([]string{"--now", goldenNow}, args[1:]...)...)
				}
				out, code, msg := runInspect(t, args...)
				got := fmt.Sprintf("$ hourglass inspect %s\n%s--- exit %d\n%s", strings.Join(relArgs(args), " "), out, code, msg)
				if msg != "" {
					got += "\n"
				}
				path := filepath.Join(testdata, "golden", dir, tc.name+".txt")
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if got != string(want) {
					t.Errorf("output differs from %s (run with -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
				}
			})
		}
	}
}

func hasFlag(args []string, f string) bool {
	for _, a := range args {
		if a == f {
			return true
		}
	}
	return false
}

// relArgs shows the data directory as the golden files' readers see it.
func relArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.TrimPrefix(a, testdata+"/")
	}
	return out
}

// TestInspectChangesNothing runs every inspect command on the testdata
// directories themselves and checks that not a byte, file or mode changed.
func TestInspectChangesNothing(t *testing.T) {
	for _, dir := range strings.Fields(goldenDirs) {
		path := filepath.Join(testdata, dir)
		before := snapshot(t, path)
		for _, tc := range goldenCases {
			runInspect(t, append([]string{tc.args[0], "--data-dir", path}, tc.args[1:]...)...)
		}
		if after := snapshot(t, path); after != before {
			t.Errorf("%s changed while being inspected:\nbefore %s\nafter  %s", dir, before, after)
		}
	}
}

// snapshot hashes every file's name, mode and content under dir.
func snapshot(t *testing.T, dir string) string {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d\n", path, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestInspectErrors(t *testing.T) {
	healthy := filepath.Join(testdata, "healthy")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing_dir", []string{"segments", "--data-dir", filepath.Join(t.TempDir(), "nope")}, 1, "no such file or directory"},
		{"bad_now", []string{"segments", "--data-dir", healthy, "--now", "yesterday"}, 1, "--now \"yesterday\": want an RFC 3339 time"},
		{"dump_needs_segment", []string{"dump", "--data-dir", healthy}, 1, "dump needs --bucket TIME or a segment FILE"},
		{"dump_both", []string{"dump", "--data-dir", healthy, "--bucket", goldenNow, "20261130T040000Z.sched"}, 1, "not both"},
		{"dump_no_bucket", []string{"dump", "--data-dir", healthy, "--bucket", "2030-01-01T00:00:00Z"}, 1, "no schedule segment holds 2030-01-01T00:00:00Z; there are 4"},
		{"dump_bad_name", []string{"dump", "--data-dir", healthy, "orders.sched"}, 1, "want a name like 20261130T050000Z.sched"},
		{"dump_no_file", []string{"dump", "--data-dir", healthy, "20301130T050000Z.sched"}, 1, "no segment 20301130T050000Z.sched"},
		{"commitlog_past_end", []string{"commitlog", "--data-dir", healthy, "--dump", "999999"}, 1, "past the end of the commitlog: its records are in [0, "},
		{"timeline_hours", []string{"timeline", "--data-dir", healthy, "--hours", "0"}, 1, "--hours 0: from 1 to 8784"},
		{"verify_missing_dir", []string{"verify", "--data-dir", filepath.Join(t.TempDir(), "nope")}, 2, "could not"},
		{"verify_not_data_dir", []string{"verify", "--data-dir", t.TempDir()}, 2, "not an Hourglass data directory"},
		{"verify_bad_flag", []string{"verify", "--bogus"}, 2, "inspect verify: no flag --bogus (see"},
		{"verify_near_flag", []string{"verify", "--data-dri", healthy}, 2, "no flag --data-dri; did you mean --data-dir?"},
		{"verify_args", []string{"verify", "--data-dir", healthy, "extra"}, 2, "verify takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, code, msg := runInspect(t, tc.args...)
			if tc.name == "verify_missing_dir" {
				tc.want = "no such file or directory"
			}
			if code != tc.code || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, %q; want exit %d and %q", code, msg, tc.code, tc.want)
			}
		})
	}
}

func TestInspectHelp(t *testing.T) {
	out, _, err := runApp(t, "inspect", "verify", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Exit status: 0 when clean, 1 when damaged, 2 when the check could not run", "torn-tail", "--data-dir", "--json", "--now"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect verify --help lacks %q", w)
		}
	}
	out, _, err = runApp(t, "inspect", "segments", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"now >= start - preload lead", "overdue", "--preload-lead"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect segments --help lacks %q", w)
		}
	}
}

// TestVerifyExitStatus runs the real binary: verify's exit status is what
// scripts see, and only a real process has one.
func TestVerifyExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "hourglass")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		dir  string
		args []string
		code int
	}{
		{"healthy", nil, 0},
		{"torn-tail", nil, 1},
		{"sched-bitflip", nil, 1},
		{"done-bitflip", []string{"--json"}, 1},
		{"no-such-dir", nil, 2},
		{"healthy", []string{"--now", "soon"}, 2},
	} {
		args := append([]string{"inspect", "verify", "--data-dir", filepath.Join(testdata, tc.dir)}, tc.args...)
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, tc.code, stdout.String(), stderr.String())
		}
		if code == 2 && !strings.Contains(stderr.String(), "hourglass: inspect verify:") {
			t.Errorf("%v: exit 2 without a reason on stderr: %q", args, stderr.String())
		}
		if code == 1 && !strings.Contains(stdout.String(), "DAMAGED") && !strings.Contains(stdout.String(), `"clean":false`) {
			t.Errorf("%v: exit 1 but stdout does not say damaged: %s", args, stdout.String())
		}
	}
}

// TestInspectDumpByID: --bucket takes a message ID for its delivery time.
func TestInspectDumpByID(t *testing.T) {
	dir := filepath.Join(testdata, "healthy")
	at := time.Date(2026, 11, 30, 4, 15, 0, 0, time.UTC)
	id := message.ID{DeliverAt: at.UnixMilli(), Seq: 7}.String()
	byID, code, msg := runInspect(t, "dump", "--data-dir", dir, "--now", goldenNow, "--bucket", id)
	byTime, _, _ := runInspect(t, "dump", "--data-dir", dir, "--now", goldenNow, "--bucket", at.Format(time.RFC3339))
	if code != 0 || byID != byTime || byID == "" {
		t.Errorf("dump --bucket %s: exit %d %s\n%s\nwant what --bucket %s prints:\n%s", id, code, msg, byID, at.Format(time.RFC3339), byTime)
	}
}

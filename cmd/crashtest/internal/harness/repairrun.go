package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
)

// RepairTimeout bounds one run of `hourglass repair`.
const RepairTimeout = 2 * time.Minute

var repairCmdRE = regexp.MustCompile(`(?m)^\s+repair\b`)

// hasRepair reports whether bin has a repair command (`bin --help` lists
// it among its commands).
func hasRepair(bin string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return repairCmdRE.Match(out)
}

// fileSum identifies a file's content.
type fileSum struct {
	size int64
	sum  uint64
}

// sumTree returns the content sums of the regular files under dir by path
// relative to dir, leaving out the subtree skip (relative; "" for none),
// LOCK and *.tmp.
func sumTree(dir, skip string) (map[string]fileSum, error) {
	out := map[string]fileSum{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if skip != "" && rel == skip {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || rel == "LOCK" || strings.HasSuffix(rel, ".tmp") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := xxhash.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		out[rel] = fileSum{size: n, sum: h.Sum64()}
		return nil
	})
	return out, err
}

// uncopied returns the files of pre (sorted) that post lacks or holds
// changed, and of them those whose content is nowhere in quarantine.
func uncopied(pre, post, quarantine map[string]fileSum) (changed, noCopy []string) {
	have := map[fileSum]bool{}
	for _, s := range quarantine {
		have[s] = true
	}
	for rel, s := range pre {
		if p, ok := post[rel]; ok && p == s {
			continue
		}
		changed = append(changed, rel)
		if !have[s] {
			noCopy = append(noCopy, rel)
		}
	}
	slices.Sort(changed)
	slices.Sort(noCopy)
	return changed, noCopy
}

// runRepair runs `bin repair --data-dir dataDir`, and checks that every
// file it changed or removed has a byte-identical copy under
// dataDir/quarantine/. When repair stops for a decision about entries
// whose dispatch log is lost (it names --assume-pending), it runs again
// with --assume-pending: every undecided entry is delivered, at least once,
// rather than dropped; what it then hands out again is allowed, up to the
// number repair named (parseRepair). Its error is the harness's (it could
// not list or read the directory).
func runRepair(ctx context.Context, bin, dataDir string) (*RepairResult, error) {
	pre, err := sumTree(dataDir, "quarantine")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, RepairTimeout)
	defer cancel()
	run := func(args ...string) (string, int) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append([]string{"repair", "--data-dir", dataDir}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), "HOURGLASS_AUTH_TOKEN=")
		werr := cmd.Run()
		code := exitCode(werr)
		if werr != nil && code == 0 {
			code = -1
		}
		return out.String(), code
	}
	text, code := run()
	res := &RepairResult{ExitCode: code}
	if code != 0 && strings.Contains(text, "--assume-pending") {
		more, code2 := run("--assume-pending")
		text += "=== crashtest: again with --assume-pending\n" + more
		res.ExitCode, res.Decision = code2, "assume-pending"
	}
	res.Output = text[:min(len(text), 8192)]
	parsed := parseRepair(text)
	res.Lost, res.LostIDs, res.AgainIDs, res.AcksLost, res.BucketsAgain = parsed.Lost, parsed.LostIDs, parsed.AgainIDs, parsed.AcksLost, parsed.BucketsAgain
	post, err := sumTree(dataDir, "quarantine")
	if err != nil {
		return nil, err
	}
	q, err := sumTree(filepath.Join(dataDir, "quarantine"), "")
	if err != nil {
		return nil, err
	}
	res.Changed, res.NoCopy = uncopied(pre, post, q)
	return res, nil
}

package crashtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hourglassmq/hourglass/record"
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

// repairJournal is the report hourglass repair keeps in the data
// directory (internal/repair.JournalName): its own, not data it repairs.
const repairJournal = "repair.journal"

// sumTree returns the content sums of the regular files under dir by path
// relative to dir, leaving out the subtree skip (relative; "" for none),
// LOCK, the repair journal and *.tmp.
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
		if !d.Type().IsRegular() || rel == "LOCK" || rel == repairJournal || strings.HasSuffix(rel, ".tmp") {
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

// runRepair runs `bin repair --data-dir dataDir`, killing it at every
// step first, and checks that every file it changed or removed has a
// byte-identical copy under dataDir/quarantine/. The kills form a chain:
// run k is killed (HOURGLASS_REPAIR_KILL_AT=k) at its k-th point, until a
// run gets through (one whose work left has fewer points), so that each
// point of the repair is reached with what the runs before left: a plan
// recorded, a copy cut short, a skip record written and not reported.
// The run that gets through must name every skip record the chain wrote
// (its own findings, or the killed runs' reports read back from the
// journal). When repair stops for a decision about entries whose dispatch
// log is lost (it names --assume-pending), the chain goes on with
// --assume-pending: every undecided entry is delivered, at least once,
// rather than dropped; what it then hands out again is allowed, up to the
// number repair named (parseRepair). Once it got through, the harness
// acknowledges the reports (`repair --acknowledge`), as an operator
// would, so that the next repair's output is its own. Its error is the
// harness's (it could not list or read the directory).
func runRepair(ctx context.Context, bin, dataDir string) (*RepairResult, error) {
	pre, err := sumTree(dataDir, "quarantine")
	if err != nil {
		return nil, err
	}
	skipsBefore, err := skipSpans(dataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, RepairTimeout)
	defer cancel()
	run := func(killAt int, args ...string) (string, int, bool) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append([]string{"repair", "--data-dir", dataDir}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), "HOURGLASS_AUTH_TOKEN=")
		if killAt > 0 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("HOURGLASS_REPAIR_KILL_AT=%d", killAt))
		}
		werr := cmd.Run()
		code := exitCode(werr)
		if werr != nil && code == 0 {
			code = -1
		}
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		return out.String(), code, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	res := &RepairResult{}
	var text string
	var args []string
	for k := 1; ; k++ {
		out, code, killed := run(k, args...)
		if killed && k < maxRepairKills {
			res.Kills++
			continue
		}
		text, res.ExitCode = out, code
		if code != 0 && strings.Contains(out, "--assume-pending") && args == nil {
			args, res.Decision = []string{"--assume-pending"}, "assume-pending"
			continue
		}
		break
	}
	res.Output = text[:min(len(text), 8192)]
	parsed := parseRepair(text)
	res.Lost, res.LostIDs, res.AgainIDs, res.AcksLost, res.BucketsAgain = parsed.Lost, parsed.LostIDs, parsed.AgainIDs, parsed.AcksLost, parsed.BucketsAgain
	skipsAfter, err := skipSpans(dataDir)
	if err != nil {
		return nil, err
	}
	for _, sp := range skipsAfter {
		if slices.Contains(skipsBefore, sp) {
			continue
		}
		res.Skipped = append(res.Skipped, sp)
		if !strings.Contains(text, fmt.Sprintf("offsets %d..%d", sp.From, sp.To)) {
			res.Unnamed = append(res.Unnamed, sp)
		}
	}
	post, err := sumTree(dataDir, "quarantine")
	if err != nil {
		return nil, err
	}
	q, err := sumTree(filepath.Join(dataDir, "quarantine"), "")
	if err != nil {
		return nil, err
	}
	res.Changed, res.NoCopy = uncopied(pre, post, q)
	if res.ExitCode == 0 {
		run(0, "--acknowledge")
	}
	return res, nil
}

// maxRepairKills bounds the chain of killed repairs of one damage.
const maxRepairKills = 64

// skipRecords returns the skip records of data from start on, each with
// its span. A record that does not decode (damage repair has not covered
// yet) is passed over to the next that does, so that the skip records
// after it are listed too.
func skipRecords(data []byte, start int) []span {
	var out []span
	for pos := start; pos < len(data); {
		rec, n, err := record.Decode(data[pos:])
		if err != nil {
			if pos = nextRecord(data, pos+1); pos < 0 {
				break
			}
			continue
		}
		if rec.Type == typeSkip {
			if len(rec.Payload) >= 8 {
				sp := binary.LittleEndian.Uint64(rec.Payload)
				if sp < uint64(n) || sp > uint64(len(data)-pos) {
					break
				}
				n = int(sp)
			}
			out = append(out, span{int64(pos), int64(pos + n)})
		}
		pos += n
	}
	return out
}

// nextRecord returns the first position at or after from where a whole,
// valid record starts, or -1 (zeros to the end: the end of the data).
func nextRecord(data []byte, from int) int {
	for i := from; i+record.Overhead <= len(data); i++ {
		if data[i+4] == 0 || data[i+6] != 0 || data[i+7] != 0 {
			continue // no record header starts here
		}
		if _, _, err := record.Decode(data[i:]); err == nil {
			return i
		}
	}
	return -1
}

// skipSpans lists the skip records of the commitlog-format logs of
// dataDir (the commitlog, the queue topics' logs and acks): each one's
// file (relative to dataDir) and offsets.
func skipSpans(dataDir string) ([]LostSpan, error) {
	dirs := []string{filepath.Join(dataDir, "commitlog")}
	topics, _ := os.ReadDir(filepath.Join(dataDir, "queue", "topics"))
	for _, t := range topics {
		dirs = append(dirs, filepath.Join(dataDir, "queue", "topics", t.Name(), "log"), filepath.Join(dataDir, "queue", "topics", t.Name(), "acks"))
	}
	var out []LostSpan
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			base, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64)
			if err != nil || !strings.HasSuffix(e.Name(), ".log") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(dataDir, filepath.Join(dir, e.Name()))
			for _, sp := range skipRecords(data, commitlogHeader) {
				out = append(out, LostSpan{File: rel, From: base + sp.start - commitlogHeader, To: base + sp.end - commitlogHeader})
			}
		}
	}
	return out, nil
}

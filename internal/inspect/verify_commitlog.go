package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/reput"
)

// commitlogReachesCheckpoint reports a commitlog whose end lies below the
// reput checkpoint as damage of the commitlog, with the file and offset
// where its data ends: the records between were routed and are gone, and a
// server on it would reuse their offsets, so it refuses to start (hourglass
// repair skips the span). When the checkpoint lies beyond the last segment
// file, a segment is missing. A torn tail above the checkpoint is not this:
// commitlog.Verify reports it as a torn tail.
func (v *verifier) commitlogReachesCheckpoint() {
	if v.end < 0 {
		return
	}
	ckpt, ok, err := reput.ReadCheckpoint(v.o.schedDir())
	if err != nil || !ok || ckpt <= v.end {
		return // a damaged checkpoint is reported by the schedule checks
	}
	dir := filepath.Join(v.o.Dir, CommitlogDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var holder string
	var holderBase, lastEnd int64 = -1, -1
	for _, e := range ents {
		if !clName.MatchString(e.Name()) {
			continue
		}
		base, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64)
		fi, ierr := e.Info()
		if err != nil || ierr != nil {
			continue
		}
		end := base + fi.Size() - commitlog.SegmentHeaderSize
		if base <= v.end && v.end <= end && holderBase < base {
			holder, holderBase = filepath.Join(dir, e.Name()), base
		}
		lastEnd = max(lastEnd, end)
	}
	lost := fmt.Sprintf("offsets %d..%d (%d bytes, routed before the checkpoint) are gone from the commitlog, and a server would reuse them, so it refuses to start; run `hourglass repair`",
		v.end, ckpt, ckpt-v.end)
	if lastEnd >= 0 && ckpt > lastEnd {
		v.problem(filepath.Join(dir, commitlog.SegmentName(lastEnd)), -1, Missing,
			fmt.Sprintf("the commitlog's last segment file ends at offset %d, but the reput checkpoint names offset %d: a segment file is missing; %s", lastEnd, ckpt, lost))
		return
	}
	if holder == "" {
		return
	}
	v.problem(holder, commitlog.SegmentHeaderSize+v.end-holderBase, Corruption,
		fmt.Sprintf("the data ends at offset %d, below the reput checkpoint at offset %d: %s", v.end, ckpt, lost))
}

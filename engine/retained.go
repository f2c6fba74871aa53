package engine

import (
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/commitlog"
)

// checkRetained reads every record the commitlog retains below end (the
// newest sealed segment, from which damaged schedule entries of recent
// buckets are rebuilt, and the active one: up to 256 MiB) once at Open,
// beside routing and loading, checking its checksum: one of the start-up
// checks (startcheck.go), before which the driver fires nothing and Ready
// stays open. commitlog.Open scans only the
// active segment: damage in a sealed one would otherwise pass unseen until
// a rebuild met it. Damage refuses the start like any commitlog damage
// (Refused names the file, the offsets and `hourglass repair`). The spans
// an earlier repair skipped are logged: what they held is gone from the
// commitlog.
func (e *Engine) checkRetained(end int64) {
	log := e.opts.Logger
	skipped, err := readRetained(e.log, end)
	for i, sp := range skipped {
		if i == maxSkipsLogged {
			log.Warn("engine: more commitlog spans were given up by hourglass repair", "spans", len(skipped)-i)
			break
		}
		log.Warn(fmt.Sprintf("engine: commitlog offsets %d..%d were given up by hourglass repair (a skip record): damaged schedule entries of their messages cannot be rebuilt", sp.From, sp.To),
			"from", sp.From, "to", sp.To)
	}
	if err != nil {
		err = repairHint(fmt.Errorf("checking the commitlog's retained records: %w", err), e.opts.Dir)
		log.Error("engine: " + err.Error())
		e.refuse(err)
		return
	}
	e.d.passed()
}

// maxSkipsLogged bounds the skipped spans checkRetained logs one by one.
const maxSkipsLogged = 16

// readRetained reads every record of l below end, checking its checksum,
// and returns the spans of skip records it stepped over and the damage it
// stopped on. Segments retention deletes meanwhile are passed over.
func readRetained(l *commitlog.Log, end int64) ([]commitlog.Span, error) {
	var skipped []commitlog.Span
	from := l.FirstOffset()
	for {
		it, err := l.NewIterator(from)
		if err != nil {
			return skipped, err
		}
		more := it.Next()
		for ; more; more = it.Next() {
			skipped = appendBelow(skipped, it.Skipped(), end)
			if it.Offset() >= end {
				break
			}
		}
		if !more { // the last Next's skips are not taken yet
			skipped = appendBelow(skipped, it.Skipped(), end)
		}
		err, from = it.Err(), max(it.Pos(), l.FirstOffset())
		it.Close()
		if !errors.Is(err, commitlog.ErrOffsetTrimmed) {
			return skipped, err
		}
	}
}

// appendBelow appends to dst the spans of src that start below end.
func appendBelow(dst, src []commitlog.Span, end int64) []commitlog.Span {
	for _, sp := range src {
		if sp.From < end {
			dst = append(dst, sp)
		}
	}
	return dst
}

package queue

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/segfile"
)

// ErrRedelivery is wrapped by Repair's error when repairing a topic would
// let messages that were acked be handed out again, and
// RepairOptions.AcceptRedelivery is not set.
var ErrRedelivery = errors.New("queue: repair would let acked messages be handed out again")

// RepairOptions configure Repair.
type RepairOptions struct {
	// DryRun finds and reports what Repair would do, changing nothing.
	DryRun bool
	// AcceptRedelivery lets Repair go on with a topic whose acks or
	// checkpoint cannot be recovered, so that messages already acked may
	// be handed out again (at least once, instead of not at all). Without
	// it such a topic is left as it is and Repair's error says how many
	// messages are at stake.
	AcceptRedelivery bool
	// Keep is called with the path of every existing file before Repair
	// changes it, once per file, so that the caller keeps a copy (hourglass
	// repair copies it under <data-dir>/quarantine/<UTC time>/). An error
	// stops Repair before that file is changed. Required unless DryRun.
	Keep func(path string) error
	// Logf, if set, is told each finding and change, one line each.
	Logf func(format string, args ...any)
}

// TopicRepair is what Repair found, and did, in one topic.
type TopicRepair struct {
	Topic string
	// Fixes are the changes to the topic's ack log and queue log (torn
	// tails, which Open truncates by itself, are not listed).
	Fixes []commitlog.Fix
	// AcksLost: acks or a checkpoint could not be recovered. Redeliver
	// messages may then be handed out again though they were acked
	// (RedeliverAtLeast: the count stopped at damage and may be higher).
	AcksLost         bool
	Redeliver        int64
	RedeliverAtLeast bool
	// LostBytes is how much of the queue log cannot be read: the
	// messages there are lost.
	LostBytes int64
	// Checkpoint: a checkpoint was (or would be) appended to the ack log
	// that states the topic's repaired state (the messages it still holds
	// out, none inside a lost span).
	Checkpoint bool
}

// Repair makes every topic of the queue in dir (Options.Dir) open again
// after damage to its logs, without reusing an offset: commitlog.Repair
// covers damaged spans of each log with skip records, and a new
// checkpoint in the ack log drops what a lost span of the queue log held.
// A topic whose acks are lost is repaired only with AcceptRedelivery; its
// error (wrapping ErrRedelivery) says how many messages could be handed
// out again. The queue must not be open. It returns what it found and did
// for every topic that needed anything, and the errors of the topics it
// could not repair, joined.
func Repair(dir string, opts RepairOptions) ([]TopicRepair, error) {
	if !opts.DryRun && opts.Keep == nil {
		return nil, errors.New("queue: Repair needs RepairOptions.Keep to keep a copy of what it changes")
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if !opts.DryRun {
		kept := map[string]bool{}
		keep := opts.Keep
		opts.Keep = func(path string) error {
			if kept[path] {
				return nil // the copy kept is of the file before any change
			}
			kept[path] = true
			return keep(path)
		}
	}
	topics := filepath.Join(dir, "topics")
	ents, err := os.ReadDir(topics)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: repair: %w", err)
	}
	var out []TopicRepair
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || ValidateTopic(e.Name()) != nil {
			continue // Open reports it; nothing for repair to do
		}
		tr, err := repairTopic(filepath.Join(topics, e.Name()), e.Name(), &opts)
		if err != nil {
			errs = append(errs, err)
		}
		if len(tr.Fixes) > 0 || tr.AcksLost || tr.Checkpoint {
			out = append(out, tr)
		}
	}
	return out, errors.Join(errs...)
}

// repairTopic repairs the topic in tdir.
func repairTopic(tdir, name string, opts *RepairOptions) (TopicRepair, error) {
	tr := TopicRepair{Topic: name}
	acksDir, logDir := filepath.Join(tdir, "acks"), filepath.Join(tdir, "log")
	hadAcks, err := hasSegments(acksDir)
	if err != nil {
		return tr, err
	}
	hasLog, err := hasSegments(logDir)
	if err != nil {
		return tr, err
	}
	fail := func(err error) (TopicRepair, error) {
		return tr, fmt.Errorf("queue: repair topic %q: %w", name, err)
	}

	// The ack log: its fixes, and the state it replays to once fixed
	// (on a copy, so that a dry run and a refusal change nothing).
	var ackFixes []commitlog.Fix
	var r replayer
	r.at = -1
	if hadAcks {
		fixes, err := commitlog.Repair(acksDir, commitlog.RepairOptions{DryRun: true})
		if err != nil {
			return fail(err)
		}
		ackFixes = withoutTorn(fixes)
		src := acksDir
		if len(ackFixes) > 0 {
			tmp, err := os.MkdirTemp("", "hourglass-repair-acks-")
			if err != nil {
				return fail(err)
			}
			defer os.RemoveAll(tmp)
			if err := copyFiles(acksDir, tmp); err != nil {
				return fail(err)
			}
			if _, err := commitlog.Repair(tmp, commitlog.RepairOptions{}); err != nil {
				return fail(err)
			}
			src = tmp
		}
		alog, _, err := commitlog.Open(commitlog.Options{Dir: src, ReadOnly: true})
		if err != nil {
			return fail(err)
		}
		r, err = replayAcks(alog)
		alog.Close()
		if err != nil {
			// Records whose checksums hold but that make no sense, or a
			// checkpoint that is gone: no skip record fixes that.
			if ce, ok := errors.AsType[*segfile.CorruptionError](err); !ok || ce.Offset >= 0 {
				return fail(fmt.Errorf("the ack log cannot be replayed, and skipping damaged spans does not fix it (restore it from a backup): %w", err))
			}
			opts.Logf("topic %s: %v", name, err)
			tr.AcksLost = true // a checkpoint that is gone: the state is what the queue log holds
		}
	}
	tr.Fixes = append(tr.Fixes, ackFixes...)
	for _, f := range ackFixes {
		if f.To > r.at {
			tr.AcksLost = true // not all before the checkpoint that holds the state
		}
	}

	if !hasLog {
		if min := r.minEnd(); min > 0 {
			return fail(fmt.Errorf("the queue log has no segment files but the ack log names offset %d: the topic's messages are gone, which repair cannot undo; restore %s from a backup, or move the topic's directory %s aside to drop the topic", min, logDir, tdir))
		}
		return tr, nil
	}
	qlog, _, err := commitlog.Open(commitlog.Options{Dir: logDir, ReadOnly: true})
	if err != nil {
		return fail(err)
	}
	first, end := qlog.FirstOffset(), qlog.EndOffset()
	if !hadAcks && end > 0 || first > 0 && !r.have {
		tr.AcksLost = true // the ack log or its checkpoint is gone
	}
	if !r.have {
		r.ck = checkpoint{lwm: first, cursor: first, end: first}
	}
	if r.ck.lwm < first {
		qlog.Close()
		return fail(fmt.Errorf("the last checkpoint holds out messages from queue-log offset %d but the queue log starts at %d: the segments holding them are gone, which repair cannot undo (restore them from a backup)", r.ck.lwm, first))
	}
	fifo, skip := r.outstanding()
	if tr.AcksLost {
		tr.Redeliver, tr.RedeliverAtLeast = countReceivable(qlog, r.ck.cursor, fifo, skip)
	}
	qlog.Close()

	minEnd := r.minEnd()
	qfixes, err := commitlog.Repair(logDir, commitlog.RepairOptions{MinEnd: minEnd, DryRun: true})
	if err != nil {
		return fail(err)
	}
	qfixes = withoutTorn(qfixes)
	tr.Fixes = append(tr.Fixes, qfixes...)
	for _, f := range qfixes {
		tr.LostBytes += f.Bytes()
	}
	tr.Checkpoint = len(tr.Fixes) > 0 || tr.AcksLost
	for _, f := range tr.Fixes {
		opts.Logf("topic %s: %s", name, f)
	}
	if tr.LostBytes > 0 {
		opts.Logf("topic %s: %d bytes of the queue log cannot be read: the messages there are lost", name, tr.LostBytes)
	}
	if tr.AcksLost {
		more := "up to"
		if tr.RedeliverAtLeast {
			more = "at least"
		}
		err := fmt.Errorf("%w: topic %q: acks or the checkpoint in %s cannot be recovered, so %s %d messages the topic would hand out may have been acked already",
			ErrRedelivery, name, acksDir, more, tr.Redeliver)
		if !opts.AcceptRedelivery {
			opts.Logf("topic %s: not repaired: %v", name, err)
			return tr, fmt.Errorf("%w; repair with AcceptRedelivery to accept that, or restore the ack log from a backup", err)
		}
		opts.Logf("topic %s: %v; repaired anyway: they are handed out again (at least once)", name, err)
	}
	if opts.DryRun || !tr.Checkpoint {
		return tr, nil
	}

	if len(ackFixes) > 0 {
		if _, err := commitlog.Repair(acksDir, commitlog.RepairOptions{Keep: opts.Keep}); err != nil {
			return fail(err)
		}
	}
	if len(qfixes) > 0 {
		if _, err := commitlog.Repair(logDir, commitlog.RepairOptions{MinEnd: minEnd, Keep: opts.Keep}); err != nil {
			return fail(err)
		}
	}
	ck := repairedCheckpoint(r.ck.cursor, fifo, skip, qfixes)
	if err := appendCheckpoint(acksDir, &ck, opts.Keep); err != nil {
		return fail(err)
	}
	again := 0
	for _, e := range ck.entries {
		if e.off < ck.cursor {
			again++
		}
	}
	opts.Logf("topic %s: wrote a checkpoint stating the repaired state: reader at offset %d, %d messages to hand out again, %d acked past the reader",
		name, ck.cursor, again, len(ck.entries)-again)
	return tr, nil
}

// withoutTorn drops the torn tails from fixes: Open truncates those.
func withoutTorn(fixes []commitlog.Fix) []commitlog.Fix {
	return slices.DeleteFunc(fixes, func(f commitlog.Fix) bool { return f.Kind == commitlog.FixTornTail })
}

// countReceivable counts the messages a topic in the state (cursor, fifo,
// skip) hands out: fifo and the records from the cursor on not in skip.
// atLeast says the count stopped at damage.
func countReceivable(qlog *commitlog.Log, cursor int64, fifo []entry, skip []int64) (n int64, atLeast bool) {
	n = int64(len(fifo))
	it, err := qlog.NewIterator(cursor)
	if err != nil {
		return n, true
	}
	defer it.Close()
	for it.Next() {
		if _, acked := slices.BinarySearch(skip, it.Offset()); !acked {
			n++
		}
	}
	return n, it.Err() != nil
}

// repairedCheckpoint is the checkpoint that states a repaired topic: what
// it held out at cursor, fifo and skip, minus what lies in a lost span of
// the queue log; a cursor inside one moves to its end. Records from the
// cursor on are counted again by Open (end = cursor).
func repairedCheckpoint(cursor int64, fifo []entry, skip []int64, lost []commitlog.Fix) checkpoint {
	in := func(off int64) (int64, bool) {
		for _, f := range lost {
			if f.From <= off && off < f.To {
				return f.To, true
			}
		}
		return 0, false
	}
	if to, ok := in(cursor); ok {
		cursor = to
	}
	var ents []entry
	for _, e := range fifo {
		if _, ok := in(e.off); !ok && e.off < cursor {
			ents = append(ents, e)
		}
	}
	for _, off := range skip {
		if _, ok := in(off); !ok && off >= cursor {
			ents = append(ents, entry{off: off})
		}
	}
	slices.SortFunc(ents, func(a, b entry) int { return cmp.Compare(a.off, b.off) })
	ents = slices.CompactFunc(ents, func(a, b entry) bool { return a.off == b.off })
	ck := checkpoint{lwm: cursor, cursor: cursor, end: cursor, entries: ents}
	if len(ents) > 0 {
		ck.lwm = min(cursor, ents[0].off)
	}
	return ck
}

// appendCheckpoint appends ck to the ack log in dir, creating the log if
// it is gone, after keeping its segments.
func appendCheckpoint(dir string, ck *checkpoint, keep func(string) error) error {
	// The active segment is the last holding data, and Open may truncate
	// a torn tail in it: keep every segment (an ack log is a few small
	// ones).
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, seg := range segs {
		if err := keep(seg); err != nil {
			return err
		}
	}
	o := Options{AckSegmentSize: DefaultAckSegmentSize}
	l, _, err := commitlog.Open(commitlog.Options{Dir: dir, SegmentSize: o.AckSegmentSize})
	if err != nil {
		return err
	}
	if _, err := l.Append(nil, encodeCheckpoint(ck, o.entriesPerRecord())...); err != nil {
		l.Close()
		return err
	}
	return l.Close()
}

// copyFiles copies the regular files of src into dst.
func copyFiles(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RepairStep is the queue's step of hourglass repair: Repair of the queue
// in dir (Options.Dir) with AcceptRedelivery, printing to out, one line
// each, every fix, what it costs (messages lost; acks lost, and how many
// messages may be handed out again though acked) and every checkpoint it
// writes. keep keeps a copy of a file before it is changed. It returns the
// number of changes made (or, with dryRun, to make).
func RepairStep(dir string, dryRun bool, keep func(path string) error, out io.Writer) (int, error) {
	reps, err := Repair(dir, RepairOptions{DryRun: dryRun, AcceptRedelivery: true, Keep: keep,
		Logf: func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) }})
	n := 0
	for _, r := range reps {
		n += len(r.Fixes)
		if r.Checkpoint {
			n++
		}
		if r.AcksLost {
			more := "up to"
			if r.RedeliverAtLeast {
				more = "at least"
			}
			fmt.Fprintf(out, "  topic %s: ACKS LOST: %s %d messages the topic hands out may have been acked already; they are handed out again (at least once)\n", r.Topic, more, r.Redeliver)
		}
		if dryRun && r.Checkpoint {
			fmt.Fprintf(out, "  topic %s: would write a checkpoint stating the repaired state\n", r.Topic)
		}
	}
	return n, err
}

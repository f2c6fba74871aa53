package inspect

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/hourglassmq/hourglass/internal/repair"
)

// repairJournal reports the runs of `hourglass repair` that the journal
// still holds (internal/repair, docs/FORMAT.md): an interrupted run, or
// one whose changes lost data, is a problem until the operator
// acknowledges it (`hourglass repair --acknowledge`); one that lost
// nothing is a note.
func (v *verifier) repairJournal() error {
	path := filepath.Join(v.o.Dir, repair.JournalName)
	j, err := repair.ReadJournal(v.o.Dir)
	if errors.Is(err, repair.ErrBadJournal) {
		v.problem(path, -1, Corruption, v.o.relErr(err)+": what the repairs recorded cannot be read")
		return nil
	}
	if err != nil || j == nil {
		return err
	}
	v.counted(path)
	for _, run := range j.Runs {
		detail := strings.Join(run.Report(), "\n    ")
		switch {
		case run.Interrupted():
			v.problem(path, -1, RepairReport, detail+"\n  run `hourglass repair` to finish it; then `hourglass repair --acknowledge` once what it lost is noted")
		case run.Loses():
			v.problem(path, -1, RepairReport, detail+"\n  `hourglass repair --acknowledge` ends this report once what it lost is noted")
		default:
			v.note(path, detail)
		}
	}
	return nil
}

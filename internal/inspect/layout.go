package inspect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// Directories and files of a data directory (see docs/FORMAT.md).
const (
	CommitlogDir = "commitlog"
	ScheduleDir  = "schedule"
	QueueDir     = "queue"
	// LockFile is the lock a running server holds (the root package's LockName).
	LockFile = "LOCK"
)

// Options say which data directory to read and what time it is.
type Options struct {
	// Dir is the data directory.
	Dir string
	// Now is the time segments and messages are compared with (due,
	// loaded, hours ahead). Required: tools pass the wall clock, tests a
	// fixed time.
	Now time.Time
	// PreloadLead is how long before its start a bucket is loaded by the
	// server. Zero means the server's default for the segment's duration:
	// engine.DefaultPreloadLead, or a sixth of the duration when that is
	// shorter.
	PreloadLead time.Duration
	// Progress, if set, is told how far long scans are.
	Progress Progress
}

// Progress follows a scan: Begin with the total (bytes or files), Add as
// the scan goes, End when it is over. Implementations decide whether and
// how to show it; a nil Progress is allowed wherever one is taken.
type Progress interface {
	Begin(what string, total int64)
	Add(n int64)
	End()
}

type nopProgress struct{}

func (nopProgress) Begin(string, int64) {}
func (nopProgress) Add(int64)           {}
func (nopProgress) End()                {}

func (o *Options) progress() Progress {
	if o.Progress == nil {
		return nopProgress{}
	}
	return o.Progress
}

func (o *Options) check() error {
	if o.Dir == "" {
		return errors.New("no data directory given")
	}
	fi, err := os.Stat(o.Dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s is not a directory", o.Dir)
	}
	if o.Now.IsZero() {
		return errors.New("Options.Now is zero")
	}
	return nil
}

// lead returns the preload lead for a segment of duration d.
func (o *Options) lead(d time.Duration) time.Duration {
	if o.PreloadLead > 0 {
		return o.PreloadLead
	}
	return min(engine.DefaultPreloadLead, d/6)
}

func (o *Options) schedDir() string { return filepath.Join(o.Dir, ScheduleDir) }

// rel names path relative to the data directory, for output that does not
// depend on where the directory is.
func (o *Options) rel(path string) string {
	if r, err := filepath.Rel(o.Dir, path); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return path
}

// relErr is err's text with the data directory's path taken out.
func (o *Options) relErr(err error) string {
	s := err.Error()
	for _, p := range []string{o.Dir + string(filepath.Separator), filepath.Clean(o.Dir) + string(filepath.Separator)} {
		s = strings.ReplaceAll(s, p, "")
	}
	return s
}

// schedListing is what the schedule directory holds, by kind.
type schedListing struct {
	segs       []string         // .sched names, in time order
	dones      map[int64]string // bucket start -> .done name
	temps      []string         // *.tmp leftovers
	checkpoint bool             // reput.checkpoint exists
	retired    bool             // reput.retired exists
	catalog    bool             // catalog.db exists
	pending    bool             // pending.counts exists (left by a clean stop)
	others     []string         // anything else
}

// listSchedule lists the schedule directory. A missing directory is empty.
func listSchedule(dir string) (schedListing, error) {
	l := schedListing{dones: map[int64]string{}}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	for _, e := range ents {
		name := e.Name()
		if _, ok := schedulelog.ParseName(name); ok && e.Type().IsRegular() {
			l.segs = append(l.segs, name)
		} else if start, ok := dispatchlog.ParseName(name); ok && e.Type().IsRegular() {
			l.dones[start] = name
		} else if strings.HasSuffix(name, segfile.TempSuffix) {
			l.temps = append(l.temps, name)
		} else if name == reput.CheckpointName {
			l.checkpoint = true
		} else if name == reput.RetiredName {
			l.retired = true
		} else if name == catalog.FileName {
			l.catalog = true
		} else if name == engine.PendingFileName {
			l.pending = true
		} else {
			l.others = append(l.others, name)
		}
	}
	slices.Sort(l.segs) // names sort in time order
	return l, nil
}

package repair

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// env is what a step is given: where to find the data, whether to change
// it, where to print, and Keep.
type env struct {
	r      *runner
	dir    string // the data directory
	dryRun bool
	out    io.Writer
}

// keep copies the file at path (inside the data directory) to the same
// relative path under the run's quarantine directory, durably, once per
// run: a step calls it before changing or deleting any file. In a dry run
// it does nothing.
func (e *env) keep(path string) error {
	r := e.r
	if e.dryRun || r.kept[path] {
		return nil
	}
	rel, err := filepath.Rel(e.dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("repair: %s is not inside the data directory %s", path, e.dir)
	}
	dst := filepath.Join(e.dir, r.run.Quarantine, rel)
	err = copyDurably(path, dst, e.dir, func() error { return r.at("copying " + rel) })
	if errors.Is(err, errStopped) {
		return err
	}
	if err != nil {
		return fmt.Errorf("repair: keeping a copy of %s in %s (nothing was changed): %w", path, dst, err)
	}
	r.kept[path] = true
	fmt.Fprintf(e.out, "  kept a copy of %s in %s\n", rel, dst)
	return r.at("kept " + rel)
}

// progress returns a progress callback that prints a line at most once a
// second, for scans that take long.
func (e *env) progress(what string) func(done, total int64) {
	last := time.Now()
	return func(done, total int64) {
		if now := time.Now(); now.Sub(last) >= time.Second && total > 0 {
			last = now
			fmt.Fprintf(e.out, "  %s: %d%% (%d of %d MiB)\n", what, done*100/total, done>>20, total>>20)
		}
	}
}

// QuarantineDir is the directory of the data directory where repair keeps
// its copies, one directory per run.
const QuarantineDir = "quarantine"

// newQuarantine creates a new directory for one run's copies under the
// data directory dir's quarantine: named by now (UTC, to the second), with
// "-2", "-3", ... when runs of the same second made that name already.
func newQuarantine(dir string, now time.Time) (string, error) {
	root := filepath.Join(dir, QuarantineDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	name := now.UTC().Format("20060102T150405Z")
	for i := 1; ; i++ {
		q := filepath.Join(root, name)
		if i > 1 {
			q += "-" + strconv.Itoa(i)
		}
		err := os.Mkdir(q, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := segfile.SyncDir(root); err != nil {
			return "", err
		}
		return q, segfile.SyncDir(dir)
	}
}

// copyDurably copies src to dst (creating its directories), keeping runs
// of zeros as holes: into dst's temporary name (segfile.TempSuffix), which
// is synced, then renamed to dst, and the directories from dst's up to
// root are synced. A copy cut short leaves only the temporary name, never
// a partial file that looks whole. It refuses to replace an existing dst.
// synced, if set, runs between the sync and the rename.
func copyDurably(src, dst, root string, synced func() error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s exists already", dst)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := segfile.CreateAtomic(dst, func(out *os.File) error { return copySparse(in, out) }, func(f *os.File) error {
		if err := f.Sync(); err != nil {
			return err
		}
		if synced != nil {
			return synced()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return syncUp(filepath.Dir(dst), root)
}

// copySparse copies in to out, leaving blocks of zeros as holes.
func copySparse(in, out *os.File) error {
	var size int64
	buf := make([]byte, 1<<20)
	for {
		n, rerr := in.ReadAt(buf, size)
		if n > 0 && !allZero(buf[:n]) {
			if _, err := out.WriteAt(buf[:n], size); err != nil {
				return err
			}
		}
		size += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	return out.Truncate(size)
}

// syncUp fsyncs the directories from dir up to root.
func syncUp(dir, root string) error {
	for d := dir; ; d = filepath.Dir(d) {
		if err := segfile.SyncDir(d); err != nil {
			return err
		}
		if d == root || d == filepath.Dir(d) {
			return nil
		}
	}
}

// moveDurably renames src to dst and syncs both directories.
func moveDurably(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	if err := segfile.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return segfile.SyncDir(filepath.Dir(src))
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

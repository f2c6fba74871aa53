package segfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TempSuffix ends the name of a file being created (CreateAtomic); such
// files are skipped when listing and removed by RemoveTemp.
const TempSuffix = ".tmp"

// nameLayout is the UTC bucket start in a segment's base name.
const nameLayout = "20060102T150405Z"

// BaseName returns the base name for a bucket start: its UTC time with
// second precision, e.g. 20261130T050000Z, so lexical order is time order.
func BaseName(startMs int64) string {
	return time.UnixMilli(startMs).UTC().Format(nameLayout)
}

// ParseBaseName is the inverse of BaseName for names ending in suffix. It
// accepts only the canonical form BaseName writes.
func ParseBaseName(name, suffix string) (int64, bool) {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok || len(base) != len(nameLayout) {
		return 0, false
	}
	t, err := time.Parse(nameLayout, base)
	if err != nil {
		return 0, false
	}
	ms := t.UnixMilli()
	if !ValidStart(ms) || BaseName(ms) != base {
		return 0, false
	}
	return ms, true
}

// SyncDir fsyncs a directory, making creations, renames and deletions of
// its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// CreateAtomic creates the file at path so that a crash leaves either all
// of it under that name or nothing new there: fill writes the content into
// path+TempSuffix, sync makes it durable (nil means (*os.File).Sync), it is
// renamed to path, replacing any file there, and the directory is fsynced.
// On an error before the rename the temporary file is removed. Errors name
// path (the temporary name only inside their cause) and keep the system's
// error for errors.Is (syscall.ENOSPC). The returned file is open for
// reading and writing under its final name, so that errors of later
// writes to it name path too; the caller closes it.
func CreateAtomic(path string, fill func(*os.File) error, sync func(*os.File) error) (*os.File, error) {
	tmp := path + TempSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("segfile: create %s: %w", path, err)
	}
	if sync == nil {
		sync = (*os.File).Sync
	}
	err = fill(f)
	if err == nil {
		err = sync(f)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("segfile: create %s: %w", path, err)
	}
	// The same file under its final name: an *os.File keeps the name it
	// was opened with for its errors.
	final, err := os.OpenFile(path, os.O_RDWR, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("segfile: create %s: reopen after rename: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		final.Close()
		return nil, fmt.Errorf("segfile: create %s: sync directory: %w", path, err)
	}
	return final, nil
}

// WriteFileAtomic durably replaces the file at path with data, as
// CreateAtomic does: what a crash leaves under path is the old content or
// the new, never a mix. It is how metadata files are written.
func WriteFileAtomic(path string, data []byte) error {
	f, err := CreateAtomic(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	}, nil)
	if err != nil {
		return err
	}
	return f.Close()
}

// RemoveTemp deletes the files in dir whose names end in one of the given
// suffixes followed by TempSuffix (leftovers of a crashed Create), then
// fsyncs dir if it removed any. It returns the names removed.
func RemoveTemp(dir string, suffixes ...string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), TempSuffix)
		if !ok || e.IsDir() {
			continue
		}
		for _, s := range suffixes {
			if strings.HasSuffix(base, s) {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return removed, err
				}
				removed = append(removed, e.Name())
				break
			}
		}
	}
	if len(removed) > 0 {
		return removed, SyncDir(dir)
	}
	return nil, nil
}

//go:build !linux

package commitlog

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

var errNoFallocate = errors.New("fallocate not supported")

func fallocate(*os.File, int64, int64) error { return errNoFallocate }

func dataEnd(_ *os.File, size int64) int64 { return size }

func dropPages([]byte) {}

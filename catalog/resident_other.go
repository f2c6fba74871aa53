//go:build !linux

package catalog

// dropMapped does nothing where the pages are not dropped (not Linux).
func dropMapped(uintptr, int64) {}

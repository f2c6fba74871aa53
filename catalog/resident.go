package catalog

import bolt "go.etcd.io/bbolt"

// bbolt reads the file through a shared mapping: every page a lookup,
// a commit's inserts or a sweep touched stays in the process's resident
// set until the file is unmapped, so a catalog of ten million keys came
// to count hundreds of megabytes of the server's RSS, though none of it
// is the heap and the kernel may drop it at any time. After each commit,
// dropResident tells the kernel the process no longer needs those pages
// (madvise MADV_DONTNEED on the mapping; commitlog does the same behind
// its readers): they stay in the page cache, and the next read of one
// maps it again at the cost of a minor fault.

// dropResident drops the catalog's mapped pages from the process's
// resident set. It runs inside a read transaction: bbolt remaps the file
// only when none is open, so the mapping stays put meanwhile, and every
// page below the transaction's size lies within it.
func (c *Catalog) dropResident() {
	_ = c.db.View(func(tx *bolt.Tx) error {
		dropMapped(c.db.Info().Data, tx.Size())
		return nil
	})
}

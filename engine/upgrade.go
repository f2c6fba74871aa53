package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// catalogVersion is what this build's catalog holds (catalog.Version):
//
//   - 0: written before versions were recorded; its Moved table maps a
//     rescheduled message to its replacement only;
//   - 1: Moved maps the origin of every retry, reschedule and redrive to
//     its latest incarnation (Current).
const catalogVersion = 1

// UpgradeDir is where Open keeps a copy of each file it rewrites to
// upgrade a data directory, under a directory named for the time (UTC).
const UpgradeDir = "upgrade"

// upgradeCatalog brings a catalog an older build wrote to catalogVersion,
// before reput starts: it keeps a copy of the file under
// <data-dir>/upgrade/<UTC time>/, reads every schedule segment once for
// the entries that retry or replace another (a non-zero origin), and maps
// each origin to its latest incarnation, in one commit with the new
// version. A crash before that commit leaves the old version, and the next
// start does it again.
func upgradeCatalog(c *catalog.Catalog, dataDir, schedDir string, now time.Time, log *slog.Logger) error {
	v, err := c.Version()
	if err != nil || v >= catalogVersion {
		return err
	}
	segs, err := schedulelog.ListNames(schedDir)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		c.SetVersion(catalogVersion) // nothing to upgrade: a new directory
		return c.Commit()
	}
	backup := filepath.Join(dataDir, UpgradeDir, now.UTC().Format("20060102T150405.000Z"), "schedule", catalog.FileName)
	if err := os.MkdirAll(filepath.Dir(backup), 0o755); err != nil {
		return err
	}
	if err := c.CopyTo(backup); err != nil {
		return fmt.Errorf("engine: upgrading the catalog: keeping a copy: %w", err)
	}
	start := time.Now()
	latest := map[message.ID]message.ID{}
	for _, s := range segs {
		r, err := schedulelog.OpenReader(filepath.Join(schedDir, s.Name))
		if err != nil {
			// A damaged segment is reported when its bucket loads; the
			// retries it holds are found by their Get until then.
			log.Warn("engine: upgrading the catalog: a schedule segment cannot be read; its retries are not mapped", "segment", s.Name, "err", err)
			continue
		}
		it := r.Iter()
		for it.Next() {
			m := it.Message()
			if m.Origin.IsZero() {
				continue
			}
			if id := (message.ID{DeliverAt: m.DeliverAt, Seq: it.Seq()}); id.Seq > latest[m.Origin].Seq {
				latest[m.Origin] = id
			}
		}
		err = it.Err()
		r.Close()
		if err != nil {
			log.Warn("engine: upgrading the catalog: reading a schedule segment stopped", "segment", s.Name, "err", err)
		}
	}
	for origin, id := range latest {
		old, ok, err := c.LookupID(catalog.Moved, catalog.EncodeID(origin))
		if err != nil {
			return err
		}
		if !ok || old.Seq < id.Seq {
			c.Put(catalog.Moved, catalog.EncodeID(origin), catalog.EncodeID(id))
		}
	}
	c.SetVersion(catalogVersion)
	if err := c.Commit(); err != nil {
		return err
	}
	log.Info("engine: catalog upgraded", "from_version", v, "to_version", catalogVersion, "segments", len(segs),
		"origins", len(latest), "copy", backup, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
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
//     its latest incarnation (Current), and Keys values carry the time the
//     Schedule arrived (catalog.EncodeKey) beside the ID.
const catalogVersion = 1

// UpgradeDir is where Open keeps a copy of each file it rewrites to
// upgrade a data directory, under a directory named for the time (UTC).
const UpgradeDir = "upgrade"

// upgradeCatalog brings a catalog an older build wrote to catalogVersion,
// before reput starts: it keeps a copy of the file under
// <data-dir>/upgrade/<UTC time>/, reads every schedule segment once, maps
// the origin of each entry that retries or replaces another to its latest
// incarnation, and adds to the Keys entry that names a keyed entry the
// time its Schedule arrived (its IdempotencyTimeHeader), in one commit
// with the new version. A crash before that commit leaves the old version, and the next
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
	var keys []catalog.KeyID // keyed entries: their key, ID and arrival
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
			id := message.ID{DeliverAt: m.DeliverAt, Seq: it.Seq()}
			if key := message.HeaderValue(m.Headers, IdempotencyHeader); key != "" {
				if at, err := strconv.ParseInt(message.HeaderValue(m.Headers, IdempotencyTimeHeader), 10, 64); err == nil {
					keys = append(keys, catalog.KeyID{Key: string(catalog.KeyOf(string(m.Topic), key)), ID: id, At: at})
				}
			}
			if !m.Origin.IsZero() && id.Seq > latest[m.Origin].Seq {
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
	timed, err := keyTimes(c, keys)
	if err != nil {
		return err
	}
	c.SetVersion(catalogVersion)
	if err := c.Commit(); err != nil {
		return err
	}
	log.Info("engine: catalog upgraded", "from_version", v, "to_version", catalogVersion, "segments", len(segs),
		"origins", len(latest), "keys_timed", timed, "copy", backup, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// keyTimes stages the arrival time of each of keys whose Keys entry names
// its ID without one, and returns how many it staged.
func keyTimes(c *catalog.Catalog, keys []catalog.KeyID) (int, error) {
	const batch = 4096
	hits := make([]catalog.KeyHit, batch)
	names := make([]string, 0, batch)
	var put []catalog.KeyID
	for len(keys) > 0 {
		n := min(batch, len(keys))
		names = names[:0]
		for _, k := range keys[:n] {
			names = append(names, k.Key)
		}
		if err := c.LookupKeys(names, hits[:n]); err != nil {
			return 0, err
		}
		for i, k := range keys[:n] {
			if h := hits[i]; h.OK && h.At == 0 && h.ID == k.ID {
				put = append(put, k)
			}
		}
		keys = keys[n:]
	}
	c.PutKeys(put)
	return len(put), nil
}

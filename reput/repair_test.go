package reput

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// retiredDir makes a directory with 4 retired buckets and 5 pending
// entries, stopped, and returns it with the options to start it again.
func retiredDir(t *testing.T) (string, Options) {
	t.Helper()
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	e.schedule(40, 4, "x")
	e.waitRouted()
	e.close()
	e = newEnv(t, dir, nil)
	retireAll(t, e)
	e.schedule(5, 1, "y")
	e.waitRouted()
	e.close()
	return dir, e.opts
}

// TestRepair: each loss Repair can mend is mended so that Start accepts
// the directory and nothing retired comes back; copies of what it
// replaced are in the quarantine; the loss it cannot mend safely needs
// AcceptReplays.
func TestRepair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(sched string) error
		accept  bool
		wantErr error
		copies  []string // files expected in the quarantine
	}{
		{"checkpoint_deleted", func(d string) error { return os.Remove(filepath.Join(d, checkpointName)) }, false, nil, []string{retiredName}},
		{"checkpoint_damaged", func(d string) error { return flipByte(filepath.Join(d, checkpointName), 12) }, false, nil, []string{checkpointName, retiredName}},
		{"retired_deleted", func(d string) error { return os.Remove(filepath.Join(d, retiredName)) }, false, nil, []string{checkpointName}},
		{"retired_damaged", func(d string) error { return flipByte(filepath.Join(d, retiredName), retiredHeaderSize+9) }, false, nil, []string{checkpointName, retiredName}},
		{"retired_short", func(d string) error {
			return os.Truncate(filepath.Join(d, retiredName), retiredHeaderSize+retiredRecSize)
		}, false, nil, []string{checkpointName, retiredName}},
		{"both_deleted_refused", func(d string) error {
			os.Remove(filepath.Join(d, checkpointName))
			return os.Remove(filepath.Join(d, retiredName))
		}, false, ErrReplayRisk, nil},
		{"both_deleted_accepted", func(d string) error {
			os.Remove(filepath.Join(d, checkpointName))
			return os.Remove(filepath.Join(d, retiredName))
		}, true, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, opts := retiredDir(t)
			if err := tc.damage(opts.Dir); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, opts.Dir)
			changed, err := Repair(opts.Dir, RepairOptions{DryRun: true, AcceptReplays: tc.accept, Logf: t.Logf})
			if !errors.Is(err, tc.wantErr) || (err == nil && !changed) {
				t.Fatalf("dry run: %v, %v", changed, err)
			}
			if after := snapshot(t, opts.Dir); after != before {
				t.Fatal("the dry run changed files")
			}
			q := filepath.Join(dir, "quarantine", "T")
			changed, err = Repair(opts.Dir, RepairOptions{Keep: keepIn(q), AcceptReplays: tc.accept, Logf: t.Logf})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("repair: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !changed {
				t.Fatal("repair changed nothing")
			}
			for _, name := range tc.copies {
				if _, err := os.Stat(filepath.Join(q, name)); err != nil {
					t.Fatalf("no copy of %s: %v", name, err)
				}
			}
			if changed, err := Repair(opts.Dir, RepairOptions{Keep: keepIn(q)}); changed || err != nil {
				t.Fatalf("second repair: %v, %v", changed, err)
			}
			e := newEnv(t, dir, nil)
			e.waitRouted()
			e.close()
			got := scan(t, opts.Dir)
			want := 5
			if tc.accept {
				// What AcceptReplays accepts: three retired buckets came
				// back (30 entries); the fourth was created again by the
				// 5 newer records, whose seqs are above the old ones.
				want = 35
			}
			if len(got) != want {
				t.Fatalf("%d entries after the repair, want %d", len(got), want)
			}
		})
	}
}

// snapshot is the names and sizes and contents of dir's files.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		s += e.Name() + "\x00" + string(b) + "\x00"
	}
	return s
}

// keepIn is a RepairOptions.Keep that copies each file that exists into dir.
func keepIn(dir string) func(path string) error {
	return func(path string) error {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644)
	}
}

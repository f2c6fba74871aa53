package main

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// configFlag is serve's --config: a TOML file whose keys are serve's flag
// names; a flag or environment variable given as well wins over it.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Category: catConfig, EnvVars: envVar("config"),
		Usage: "settings from this TOML `FILE`, keys named as the flags; flags and env win"}
}

// withConfigFile wraps each flag so that urfave/cli's altsrc can set it
// from a config file. Every serve flag is of a type altsrc wraps; a new
// type fails TestConfigExample before it ships.
func withConfigFile(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			out[i] = altsrc.NewStringFlag(f)
		case *cli.StringSliceFlag:
			out[i] = altsrc.NewStringSliceFlag(f)
		case *cli.IntFlag:
			out[i] = altsrc.NewIntFlag(f)
		case *cli.BoolFlag:
			out[i] = altsrc.NewBoolFlag(f)
		case *cli.DurationFlag:
			out[i] = altsrc.NewDurationFlag(f)
		default:
			panic(fmt.Sprintf("config file: no altsrc wrapper for --%s (%T)", f.Names()[0], f))
		}
	}
	return out
}

// applyConfigFile sets every flag of c's command that the command line
// and the environment left unset from the file --config names, if any.
// A key that names no flag is refused, with the nearest flag name.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	var raw map[string]any
	if _, err := toml.DecodeFile(path, &raw); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--config %s: no such file", path)
		}
		return fmt.Errorf("--config %s: not TOML: %w", path, err)
	}
	if err := checkConfigKeys(raw, c.Command.Flags); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	src, err := altsrc.NewTomlSourceFromFile(path)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	if err := altsrc.ApplyInputSourceValues(c, src, c.Command.Flags); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

// checkConfigKeys refuses keys of raw that name no flag of flags, tables
// (settings are top-level keys), and config itself.
func checkConfigKeys(raw map[string]any, flags []cli.Flag) error {
	var names []string
	for _, f := range flags {
		if n := f.Names()[0]; n != "config" {
			names = append(names, n)
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range raw {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if _, table := raw[k].(map[string]any); table {
			return fmt.Errorf("[%s] is a table; settings are top-level keys, one a line (key = value)", k)
		}
		if k == "config" {
			return errors.New("key \"config\": a config file cannot name another; give --config once")
		}
		if !slices.Contains(names, k) {
			msg := fmt.Sprintf("unknown key %q: keys are serve's flag names without --", k)
			if n := nearest(names, k); n != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", n)
			}
			return errors.New(msg)
		}
	}
	return nil
}

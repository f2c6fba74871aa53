// Command hourglass-bench measures Hourglass on this machine: `engine`
// runs the engine in this process with a sink that only counts, `server`
// drives a running `hourglass serve` over its API. It is kept out of the
// server binary; the work is in internal/enginebench and
// internal/serverbench, and docs/BENCHMARKS.md has what they measured.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hourglass-bench:", err)
		os.Exit(1)
	}
}

// newApp builds the command line. Output goes to app.Writer and
// app.ErrWriter, so tests can capture it.
func newApp() *cli.App {
	return &cli.App{
		Name:            "hourglass-bench",
		Version:         buildinfo.Get().Version,
		Usage:           "measure Hourglass on this machine",
		UsageText:       "hourglass-bench engine|server [flags]   ('hourglass-bench COMMAND --help' for each)",
		HideHelpCommand: true,
		Suggest:         true,
		Commands:        []*cli.Command{benchEngineCommand(), benchServerCommand()},
	}
}

// usageError turns a flag parsing error into a short error that says what
// the flag takes and points at the help, instead of printing the whole help.
func usageError(c *cli.Context, err error, _ bool) error {
	hint := ""
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !strings.Contains(err.Error(), "for flag -"+name+":") {
			continue
		}
		switch f.(type) {
		case *cli.DurationFlag:
			hint = "; --" + name + " takes a duration with a unit, such as 500ms, 10s, 2m or 1h"
		case *cli.IntFlag:
			hint = "; --" + name + " takes a whole number"
		case *cli.Float64Flag:
			hint = "; --" + name + " takes a number, such as 50 or 0.5"
		}
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		return fmt.Errorf("%s: no flag --%s (see '%s --help')", c.Command.Name, name, c.Command.HelpName)
	}
	return fmt.Errorf("%w%s (see '%s --help')", err, hint, c.Command.HelpName)
}

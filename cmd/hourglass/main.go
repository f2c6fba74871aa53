// Command hourglass is the Hourglass binary: a durable delayed-message
// server and the tools around it. Each command group lives in its own
// file (bench.go, ...) and only wires flags to the package that does the
// work.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hourglass:", err)
		os.Exit(1)
	}
}

// newApp builds the command line. Output goes to app.Writer and
// app.ErrWriter, so tests can capture it.
func newApp() *cli.App {
	return &cli.App{
		Name:  "hourglass",
		Usage: "a durable delayed-message server",
		Description: "Hourglass keeps messages on disk and hands them to consumers when they are due:\n" +
			"never early, a few milliseconds late at most, and never twice after a crash.",
		HideVersion:     true,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			benchCommand(),
			serveCommand(),
			sendCommand(),
			recvCommand(),
			cancelCommand(),
			statsCommand(),
			inspectCommand(),
			repairCommand(),
		},
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
		}
	}
	return fmt.Errorf("%w%s (see '%s --help')", err, hint, c.Command.HelpName)
}

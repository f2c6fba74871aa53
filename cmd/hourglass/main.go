// Command hourglass is the Hourglass binary: a durable delayed-message
// server and the tools around it. Each command group lives in its own
// file (serve.go, ...) and only wires flags to the package that does the
// work.
//
// Flags may come before or after a command's arguments
// (`hourglass cancel ID --addr URL`): urfave/cli v2 stops parsing flags at
// the first argument, so flagsFirst moves them ahead before parsing.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/hourglassmq/hourglass/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	app := newApp()
	err := app.RunContext(ctx, flagsFirst(app, os.Args))
	stop()
	if err != nil {
		if !errors.As(err, new(loggedError)) {
			fmt.Fprintln(os.Stderr, "hourglass:", errorText(err))
		}
		os.Exit(1)
	}
}

// newApp builds the command line. Output goes to app.Writer and
// app.ErrWriter, so tests can capture it.
func newApp() *cli.App {
	cli.VersionPrinter = printVersion
	app := &cli.App{
		Name:      "hourglass",
		Version:   buildinfo.Get().Version,
		Usage:     "a durable delayed-message server",
		UsageText: "hourglass COMMAND [flags and arguments]   ('hourglass COMMAND --help' for each)",
		Description: "Hourglass keeps messages on disk and hands them to consumers when they are due:\n" +
			"never early, a few milliseconds late at most, and never twice after a crash.",
		HideHelpCommand: true,
		Suggest:         true,
		Action:          commandNotFound,
		Commands: []*cli.Command{
			serveCommand(),
			sendCommand(),
			recvCommand(),
			cancelCommand(),
			rescheduleCommand(),
			editCommand(),
			freezeCommand(),
			thawCommand(),
			getCommand(),
			listCommand(),
			ackCommand(),
			nackCommand(),
			extendCommand(),
			redriveCommand(),
			purgeCommand(),
			deleteTopicCommand(),
			topicsCommand(),
			policyCommand(),
			pauseCommand(),
			resumeCommand(),
			scheduleCommand(),
			calendarCommand(),
			statsCommand(),
			credentialsCommand(),
			auditCommand(),
			inspectCommand(),
			repairCommand(),
			backupCommand(),
			versionCommand(),
		},
	}
	setCommandNotFound(app.Commands)
	return app
}

// setCommandNotFound makes commandNotFound the Action of each command that
// has subcommands and no Action of its own, at every level.
func setCommandNotFound(cmds []*cli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 && c.Action == nil {
			c.Action = commandNotFound
		}
		setCommandNotFound(c.Subcommands)
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
		case *cli.DurationFlag, *altsrc.DurationFlag:
			hint = "; --" + name + " takes a duration with a unit, such as 500ms, 10s, 2m or 1h"
		case *cli.IntFlag, *altsrc.IntFlag:
			hint = "; --" + name + " takes a whole number"
		case *cli.Float64Flag:
			hint = "; --" + name + " takes a number, such as 50 or 0.5"
		}
	}
	if name, ok := unknownFlag(err); ok {
		return fmt.Errorf("%s: no flag --%s%s (see '%s --help')", commandName(c), name, flagSuggestion(c, err), c.Command.HelpName)
	}
	return fmt.Errorf("%w%s (see '%s --help')", err, hint, c.Command.HelpName)
}

// flagsFirst returns args (os.Args: the program name first) with the
// flags of the command they name moved ahead of its positional arguments,
// so that `hourglass cancel ID --addr URL` means `hourglass cancel --addr
// URL ID`. urfave/cli v2 has no switch for this: like the standard flag
// package it stops at the first argument and would take `--addr` as an
// ID (urfave/cli#976; v3 parses flags anywhere).
//
// It finds the command (and subcommand) by name, then moves every token
// that starts with '-' (and, for a flag that takes a value and is given
// without '=', the token after it) ahead of the others, in order. A flag
// the command does not define is moved too, so that parsing reports it.
// "--" ends the flags: what follows it stays an argument, and "--" is put
// between the flags and the arguments whenever an argument starts with
// '-'. A lone "-" is an argument. Args that already have their flags first
// come back unchanged.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, subs := app.Flags, app.Commands
	var cmd *cli.Command
	// Walk down to the command: flags of the levels above it stay where
	// they are (before the command name), as urfave/cli wants them.
	for {
		i := 0
		for i < len(rest) && isFlagToken(rest[i]) {
			i += flagTokens(flags, rest[i:])
		}
		if i >= len(rest) || rest[i] == "--" {
			return args // no command named: nothing to reorder
		}
		var next *cli.Command
		for _, c := range subs {
			if c.HasName(rest[i]) {
				next = c
			}
		}
		if next == nil {
			if cmd == nil {
				return args // an unknown command: let urfave/cli say so
			}
			break // rest[i] is the command's first argument
		}
		out = append(out, rest[:i+1]...)
		rest = rest[i+1:]
		cmd, flags, subs = next, next.Flags, next.Subcommands
		if len(subs) == 0 {
			break
		}
	}
	var fl, pos []string
	for i := 0; i < len(rest); {
		switch tok := rest[i]; {
		case tok == "--":
			pos = append(pos, rest[i+1:]...)
			i = len(rest)
		case isFlagToken(tok):
			n := min(flagTokens(flags, rest[i:]), len(rest)-i)
			fl = append(fl, rest[i:i+n]...)
			i += n
		default:
			pos = append(pos, tok)
			i++
		}
	}
	out = append(out, fl...)
	for _, p := range pos {
		if isFlagToken(p) || p == "--" {
			return append(append(out, "--"), pos...)
		}
	}
	return append(out, pos...)
}

// isFlagToken reports whether tok is a flag (-x, --name, --name=v); "-"
// and "--" are not.
func isFlagToken(tok string) bool {
	return len(tok) > 1 && tok[0] == '-' && tok != "--"
}

// flagTokens is how many tokens the flag at toks[0] spans: 2 for a flag
// that takes a value given as the next token, else 1.
func flagTokens(flags []cli.Flag, toks []string) int {
	name := strings.TrimLeft(toks[0], "-")
	if strings.Contains(name, "=") {
		return 1
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(cli.DocGenerationFlag); ok && v.TakesValue() {
				return 2
			}
			return 1
		}
	}
	return 1 // a bool flag, --help, or one the command lacks
}

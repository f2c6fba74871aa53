package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/internal/buildinfo"
)

// versionCommand is `hourglass version`; `hourglass --version` prints the
// same (newApp sets cli.VersionPrinter).
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print the version, the VCS revision and the Go version of this binary",
		UsageText: "hourglass version",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("version takes no arguments, got %q", c.Args().Slice())
			}
			return buildinfo.Get().Write(c.App.Writer)
		},
	}
}

// printVersion is cli.VersionPrinter: --version prints what `version` does.
func printVersion(c *cli.Context) { buildinfo.Get().Write(c.App.Writer) }

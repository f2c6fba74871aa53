// Command embednode is a Go program that embeds Hourglass as a library
// (package hourglass: Open, Serve, Shutdown, Close) the way a user's
// program would, for `crashtest --node embedded`: the harness builds it
// and kills and restarts it in place of the hourglass binary, so the
// embedded node is held to the same checks.
//
// It takes `serve` and the flags of hourglass serve that the harness
// passes, nothing else; the node's log goes to stderr, with the
// "listening on" and "stopped cleanly" lines the harness reads.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/internal/units"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := &cli.App{
		Name:            "embednode",
		Usage:           "a program embedding an Hourglass node, for crashtest --node embedded",
		HideVersion:     true,
		HideHelpCommand: true,
		Commands: []*cli.Command{{
			Name:  "serve",
			Usage: "serve a node embedded with hourglass.Open until SIGTERM",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "data-dir", Required: true},
				&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0"},
				&cli.DurationFlag{Name: "segment-duration"},
				&cli.StringFlag{Name: "fsync", Value: "always"},
				&cli.StringFlag{Name: "delay-levels"},
				&cli.IntFlag{Name: "max-attempts"},
				&cli.StringFlag{Name: "max-delay"},
				&cli.DurationFlag{Name: "shutdown-timeout", Value: 10 * time.Second},
				&cli.DurationFlag{Name: "handoff-lead"},
			},
			Action: serve,
		}},
	}
	if err := app.RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "embednode:", err)
		os.Exit(1)
	}
}

// config is the hourglass.Config of c's flags; unset flags keep
// hourglass.DefaultConfig's values.
func config(c *cli.Context, log *slog.Logger) (hourglass.Config, error) {
	cfg := hourglass.DefaultConfig()
	cfg.DataDir, cfg.Logger = c.String("data-dir"), log
	if c.IsSet("segment-duration") {
		cfg.SegmentDuration = c.Duration("segment-duration")
	}
	if c.IsSet("max-attempts") {
		cfg.MaxAttempts = c.Int("max-attempts")
	}
	if c.IsSet("handoff-lead") {
		cfg.HandoffLead = c.Duration("handoff-lead")
	}
	var err error
	if cfg.Fsync, err = commitlog.ParseSyncPolicy(c.String("fsync")); err != nil {
		return cfg, fmt.Errorf("--fsync %q: want always, interval or none", c.String("fsync"))
	}
	if s := c.String("max-delay"); s != "" {
		if cfg.MaxDelay, err = units.ParseDuration(s); err != nil {
			return cfg, fmt.Errorf("--max-delay: %w", err)
		}
	}
	if s := c.String("delay-levels"); s != "" {
		if cfg.DelayLevels, err = units.ParseDelayLevels(s); err != nil {
			return cfg, fmt.Errorf("--delay-levels: %w", err)
		}
	}
	return cfg, nil
}

func serve(c *cli.Context) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := config(c, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return err
	}
	node, err := hourglass.Open(c.Context, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- node.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "embednode: listening on %s\n", ln.Addr())
	var serveErr error
	select {
	case <-c.Context.Done():
	case serveErr = <-served:
	case <-node.Refused():
		serveErr = node.RefusedErr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("shutdown-timeout"))
	defer cancel()
	if err := node.Shutdown(ctx); err != nil {
		log.Warn("in-flight requests did not finish in time", "err", err)
	}
	if err := node.Close(); err != nil {
		return err
	}
	log.Info("stopped cleanly") // what the harness checks after a SIGTERM, as of the binary
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

// auditCommand prints the server's audit trail.
func auditCommand() *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "print the audit trail: who changed what, when, and the result",
		UsageText: "hourglass audit [--limit N] [--before SEQ] [--json]",
		Description: `Prints the newest entries first, one row each:
  seq      the entry's number (later entries have larger ones)
  at       when the change was done (UTC)
  who      the credential (or SIGHUP for a credentials reload)
  action   the RPC (Cancel, Purge, SetPolicy, ...) or ReloadCredentials
  target   the topic, message ID or schedule it acted on
  result   OK, or the status code, then the error
With more entries than --limit, the last line says the --before of the next page.
With --json, one JSON object per entry and line (the request and response included).
Needs a credential with the verb audit (roles admin and viewer).
` + exitCodes,
		Flags: clientFlags(
			&cli.IntFlag{Name: "limit", Value: 20, Usage: "at most `N` entries, 1 to 1000"},
			&cli.Uint64Flag{Name: "before", Usage: "only entries older than `SEQ` (the previous page's last line says it)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per entry instead of the table"},
		),
		OnUsageError: usageError,
		Action:       runAudit,
	}
}

func runAudit(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	if n := c.Int("limit"); n < 1 || n > 1000 {
		return commandError(c, "--limit %d: from 1 to 1000", n)
	}
	page, err := call(c, "", func(cl *client.Client, ctx context.Context) (client.AuditPage, error) {
		return cl.Audit(ctx, c.Uint64("before"), c.Int("limit"))
	})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, e := range page.Entries {
			if err := enc.Encode(map[string]any{"seq": e.Seq, "at": e.At.UTC().Format(time.RFC3339Nano), "who": e.Who,
				"action": e.Action, "target": e.Target, "result": e.Result, "error": e.Error, "peer": e.Peer,
				"request": json.RawMessage(orNull(e.Request)), "response": json.RawMessage(orNull(e.Response))}); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "seq\tat\twho\taction\ttarget\tresult")
	for _, e := range page.Entries {
		result := e.Result
		if e.Error != "" {
			result += ": " + e.Error
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.UTC().Format(time.RFC3339), e.Who, e.Action, e.Target, result)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if page.Next != 0 {
		fmt.Fprintf(c.App.Writer, "older entries: hourglass audit --before %d\n", page.Next)
	}
	return nil
}

func orNull(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

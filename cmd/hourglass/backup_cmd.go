package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/server"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "have a running server copy its data directory, consistently, into a new directory",
		UsageText: "hourglass backup --to DIR [--addr URL]",
		Description: `The server (at --addr, on this machine) creates DIR and writes into it a copy
of its data directory that a server can be started on: every message it had
answered before the backup began is in it, and no message it had recorded as
acked by then is delivered from it again. Producers and consumers go on
meanwhile. DIR must not exist and must be on the data directory's file system
(sealed segments are hard-linked, the rest copied); copy it elsewhere after.
Prints what was linked and copied as JSON. docs/OPERATIONS.md, "Backups".`,
		Flags: clientFlags(&cli.StringFlag{Name: "to", Required: true,
			Usage: "the new `DIR` of the copy, on the server's machine (relative: to this directory)"}),
		OnUsageError: usageError,
		Action:       runBackup,
	}
}

func runBackup(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	addr := strings.TrimSuffix(c.String("addr"), "/")
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return commandError(c, "--addr %q: want a URL starting with http:// or https://", addr)
	}
	to, err := filepath.Abs(c.String("to"))
	if err != nil {
		return commandError(c, "--to %q: %v", c.String("to"), err)
	}
	body, _ := json.Marshal(map[string]string{"to": to})
	req, err := http.NewRequestWithContext(c.Context, http.MethodPost, addr+server.BackupPath, bytes.NewReader(body))
	if err != nil {
		return commandError(c, "--addr %q: %v", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if t := c.String("token"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	tc, err := clientTLS(c)
	if err != nil {
		return err
	}
	hc := http.DefaultClient
	if tc != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("backup: %v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("backup: reading the answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("backup: %s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	_, err = c.App.Writer.Write(out)
	return err
}

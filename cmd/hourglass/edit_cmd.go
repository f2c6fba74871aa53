package main

import (
	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

func editCommand() *cli.Command {
	return &cli.Command{
		Name:      "edit",
		Usage:     "replace the body and/or headers of pending messages",
		UsageText: "hourglass edit (ID... | --topic T --key K) [--body TEXT | --body-file F|-] [--header K=V]... [--no-headers] [--json]",
		Description: `Replaces the body, the headers, or both of each pending message, atomically,
keeping its delivery time: its next delivery carries the new content and never
the old. It goes on under a new ID (whose origin_id is the first message's);
the first ID and --topic/--key go on naming it ('hourglass get' shows the new
content). Prints one line per message, "REF ANSWER", where REF is the ID or
TOPIC/KEY given and the answer is one of:
  edited NEW_ID DELIVER_AT   its next delivery, at DELIVER_AT as NEW_ID,
                             carries the new content
  already-delivered          too late: it was delivered or is being delivered
  already-cancelled          it was cancelled
  unknown                    no such message is pending on this server
Nothing changes for the last three. A cluster refuses edit.

What to replace, one or more of:
  --body TEXT, --body-file F|-   the new body (- reads standard input)
  --header KEY=VALUE             the new headers (repeat it for more); every
                                 header of its own is replaced by these
  --no-headers                   remove every header of its own
The headers the server set (the idempotency key) are kept.

  hourglass edit 0000019bd6a1f2c00000000000001f40 --body '{"qty":3}'
  hourglass edit --topic orders --key order-42 --header priority=high
  hourglass edit --topic orders --key order-42 --body-file order.json --json

With --json each line is a JSON object instead:
  {"ref":"orders/order-42","result":"edited","new_id":"...","deliver_at":"..."}
` + exitCodes + `
Every answer above is a success; a malformed ID is an error, after the lines
of the IDs before it.`,
		Flags: clientFlags(append(append(keyFlags(), bodyFlags("")...),
			&cli.BoolFlag{Name: "no-headers", Usage: "remove the message's own headers"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		)...),
		OnUsageError: usageError,
		Action:       runEdit,
	}
}

// editOf returns the edit the flags ask for.
func editOf(c *cli.Context) (client.Edit, error) {
	var e client.Edit
	body, ok, err := bodyOfFlags(c)
	if err != nil {
		return e, err
	}
	if ok {
		e.Body = body
		if e.Body == nil {
			e.Body = []byte{}
		}
	}
	h, _ := c.Generic("header").(*headerFlag)
	switch {
	case c.Bool("no-headers") && h != nil && len(h.m) > 0:
		return e, commandError(c, "--no-headers and --header: give the new headers, or remove them all")
	case c.Bool("no-headers"):
		e.Headers = map[string]string{}
	case h != nil && len(h.m) > 0:
		e.Headers = h.m
	}
	if e.Body == nil && e.Headers == nil {
		return e, commandError(c, "nothing to edit: give --body, --body-file, --header or --no-headers")
	}
	return e, nil
}

func runEdit(c *cli.Context) error {
	ts, err := targets(c, true)
	if err != nil {
		return err
	}
	ed, err := editOf(c)
	if err != nil {
		return err
	}
	return replaceEach(c, ts, "edit", "edited", func(cl *client.Client, ref client.Ref) (replacement, error) {
		id, err := cl.Edit(c.Context, ref, ed)
		return replacement{id: id}, err
	})
}

package main

import (
	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

func freezeCommand() *cli.Command {
	return &cli.Command{
		Name:      "freeze",
		Usage:     "stop the clock of pending messages until thaw",
		UsageText: "hourglass freeze (ID... | --topic T --key K) [--json]",
		Description: `Holds each pending message with the delay it has left, atomically: it is never
delivered until 'hourglass thaw', which makes it due that delay from the thaw.
It goes on under a new ID (whose origin_id is the first message's); the first
ID and --topic/--key go on naming it ('hourglass get' shows it frozen with its
remaining delay), and 'hourglass cancel' cancels it. Prints one line per
message, "REF ANSWER", where REF is the ID or TOPIC/KEY given and the answer
is one of:
  frozen NEW_ID REMAINING   held as NEW_ID, keeping REMAINING
  already-frozen            it was frozen before
  already-delivered         too late: it was delivered or is being delivered
  already-cancelled         it was cancelled
  unknown                   no such message is pending on this server
Nothing changes for the last four. A cluster refuses freeze. To freeze a
whole topic's clock, see 'hourglass pause --freeze'.

  hourglass freeze 0000019bd6a1f2c00000000000001f40
  hourglass freeze --topic orders --key order-42 --json

With --json each line is a JSON object instead:
  {"ref":"orders/order-42","result":"frozen","new_id":"...","remaining_ms":3540000}
` + exitCodes + `
Every answer above is a success; a malformed ID is an error, after the lines
of the IDs before it.`,
		Flags: clientFlags(append(keyFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		)...),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			ts, err := targets(c, true)
			if err != nil {
				return err
			}
			return replaceEach(c, ts, "freeze", "frozen", func(cl *client.Client, ref client.Ref) (replacement, error) {
				id, left, err := cl.FreezeMessage(c.Context, ref)
				return replacement{id: id, frozen: true, left: left}, err
			})
		},
	}
}

func thawCommand() *cli.Command {
	return &cli.Command{
		Name:      "thaw",
		Usage:     "start the clock of frozen messages again",
		UsageText: "hourglass thaw (ID... | --topic T --key K) [--json]",
		Description: `Makes each message 'hourglass freeze' froze due the delay it had left when it
was frozen, from now, under a new ID (whose origin_id is the first message's).
Prints one line per message, "REF ANSWER", where the answer is one of:
  thawed NEW_ID DELIVER_AT   due at DELIVER_AT as NEW_ID
  not-frozen                 it is pending and not frozen
  already-delivered          too late: it was delivered or is being delivered
  already-cancelled          it was cancelled
  unknown                    no such message is pending on this server
Nothing changes for the last four. A cluster refuses thaw.

  hourglass thaw --topic orders --key order-42
  hourglass thaw 0000019bd6a1f2c00000000000001f40 --json

With --json each line is a JSON object instead:
  {"ref":"orders/order-42","result":"thawed","new_id":"...","deliver_at":"..."}
` + exitCodes + `
Every answer above is a success; a malformed ID is an error, after the lines
of the IDs before it.`,
		Flags: clientFlags(append(keyFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
		)...),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			ts, err := targets(c, true)
			if err != nil {
				return err
			}
			return replaceEach(c, ts, "thaw", "thawed", func(cl *client.Client, ref client.Ref) (replacement, error) {
				id, err := cl.ThawMessage(c.Context, ref)
				return replacement{id: id}, err
			})
		},
	}
}

package main

// The pause and resume commands: a plain pause, or a frozen one.

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

func pauseCommand() *cli.Command {
	cmd := pauseResume("pause", "stop a topic from handing out messages, until resumed",
		`Pauses TOPIC, durably (across restarts): it hands out nothing until
'hourglass resume TOPIC'. Pending messages keep their times and become due as
usual; due ones wait; leases already given run on, and acks and nacks work.
Sends go on. Prints "TOPIC paused" ("TOPIC frozen"), or with --json the policy
as 'policy show --json' does.

With --freeze the topic's clock stops too: on resume every message stored
before the pause and not yet due then is due as much later as the pause
lasted (a message due in 10 minutes when frozen for an hour is due 10 minutes
after the resume). It costs the same whatever the topic holds. Messages sent
while frozen keep their times. Not with flow policies, nor in cluster mode.
'hourglass get ID' shows a message's due time with the freezes counted;
'policy show' lists the freezes.

  hourglass pause orders             # while the payment service is down
  hourglass pause orders --freeze    # and keep every delay as it is now
  hourglass resume orders
`)
	cmd.Flags = append(cmd.Flags, &cli.BoolFlag{Name: "freeze", Usage: "stop the topic's clock too: on resume its messages are due as much later as the pause lasted"})
	cmd.Action = func(c *cli.Context) error {
		if c.Bool("freeze") {
			return refAction(oneTopic, (*client.Client).Freeze, printPaused("frozen"))(c)
		}
		return refAction(oneTopic, (*client.Client).Pause, printPaused("paused"))(c)
	}
	return cmd
}

// printPaused prints "TOPIC <done>", or with --json the policy.
func printPaused(done string) func(c *cli.Context, topic string, p client.Policies) error {
	return func(c *cli.Context, topic string, p client.Policies) error {
		if c.Bool("json") {
			return printPolicies(c, topic, p)
		}
		_, err := io.WriteString(c.App.Writer, topic+" "+done+"\n")
		return err
	}
}

func resumeCommand() *cli.Command {
	return pauseResume("resume", "let a paused topic hand out messages again",
		`Resumes TOPIC: it hands out its due messages again, at once (its other policy
fields are kept), and ends a frozen pause (--freeze). Prints "TOPIC resumed", or with --json the policy as
'policy show --json' does. Resuming a topic that is not paused changes nothing.

  hourglass resume orders
`)
}

// pauseResume builds the pause or resume command.
func pauseResume(name, usage, help string) *cli.Command {
	op := (*client.Client).Pause
	if name == "resume" {
		op = (*client.Client).Resume
	}
	return &cli.Command{
		Name:         name,
		Usage:        usage,
		UsageText:    "hourglass " + name + " TOPIC [--json]" + map[bool]string{true: " [--freeze]"}[name == "pause"],
		Description:  help + exitCodes,
		Flags:        clientFlags(topicFlag("to "+name), jsonFlag()),
		OnUsageError: usageError,
		Action:       refAction(oneTopic, op, printPaused(name+"d")),
	}
}

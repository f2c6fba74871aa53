package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"

	"github.com/hourglassmq/hourglass/client"
)

// A command about one topic takes it as its first argument or as --topic,
// whichever the user types: `hourglass list orders` is `hourglass list
// --topic orders`, and `hourglass pause --topic orders` is `hourglass
// pause orders`.

// topicFlag is --topic of a command about one topic; what is the rest of
// its usage line.
func topicFlag(what string) cli.Flag {
	return &cli.StringFlag{Name: "topic", Usage: "`TOPIC` " + what + " (or give it as the first argument)"}
}

// topicAndArgs returns the topic the command line names, --topic or else
// its first argument, and the arguments left. For a command whose other
// arguments are message IDs or receipts (ack, nack, extend), isRef tells
// them: a first argument that is one is not taken for the topic.
func topicAndArgs(c *cli.Context, isRef func(string) bool) (string, []string, error) {
	args := c.Args().Slice()
	if c.IsSet("topic") {
		t := c.String("topic")
		if t == "" {
			return "", nil, commandError(c, "--topic is empty: give a topic, as --topic T or as the first argument")
		}
		return t, args, nil
	}
	if len(args) == 0 || (isRef != nil && isRef(args[0])) {
		return "", nil, commandError(c, "the topic is missing: give it as the first argument or as --topic T")
	}
	return args[0], args[1:], nil
}

// oneTopic is topicAndArgs for a command that takes nothing but the
// topic.
func oneTopic(c *cli.Context) (string, error) {
	t, rest, err := topicAndArgs(c, nil)
	if err == nil && len(rest) > 0 {
		err = commandError(c, "takes one topic, got %q after %q", rest, t)
	}
	return t, err
}

// isRef reports whether s names a message: an ID, or a receipt (an ID, a
// dot and the lease's serial).
func isRef(s string) bool {
	id, _, _ := strings.Cut(s, ".")
	_, err := client.ParseID(id)
	return err == nil
}

// unknownTopic returns what to tell of a topic the server does not know,
// asked by its Topics call, or "" if it knows the topic (or the topic
// whose dead letters it names). The server knows the topics with messages
// due, leased or dead-lettered, those sent to since it started, and those
// with a policy; a topic whose messages were all sent before a restart and
// are not due yet is the one it cannot tell.
func unknownTopic(ctx context.Context, cl *client.Client, topic string) (string, error) {
	ts, err := cl.Topics(ctx)
	if err != nil {
		return "", err
	}
	base := strings.TrimSuffix(topic, ".dlq")
	var names []string
	for _, t := range ts {
		if t.Topic == topic || t.Topic == base {
			return "", nil
		}
		names = append(names, t.Topic)
	}
	msg := fmt.Sprintf("topic %s has no messages and no policy on this server (none due, leased or sent to it since the server started)", topic)
	if n := nearest(names, base); n != "" {
		msg += ": did you mean " + strings.Replace(topic, base, n, 1) + "?"
	}
	return msg, nil
}

// nearest returns the name nearest to typed, if it is near enough (as
// near says), or "".
func nearest(names []string, typed string) string {
	best, score := "", 0.0
	for _, n := range names {
		if s := smetrics.JaroWinkler(n, typed, 0.7, 4); s > score {
			best, score = n, s
		}
	}
	if !near(best, typed) {
		return ""
	}
	return best
}

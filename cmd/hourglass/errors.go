package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What the command line prints of an error: the server's own message
// instead of a gRPC status's "rpc error: code = X desc = MESSAGE", with
// the code in words after it; and "did you mean" for a command or flag
// that does not exist (urfave/cli's suggestions).

// didYouMean starts urfave/cli's suggestions, "did you mean NAME?".
const didYouMean = "did you mean "

func init() {
	cli.SuggestDidYouMeanTemplate = didYouMean + "%s?"
}

// codeHints say what a status code asks of the user, where its words
// alone do not.
var codeHints = map[codes.Code]string{
	codes.Unavailable:       "retry later, or check that a server runs at --addr, HOURGLASS_ADDR",
	codes.Unauthenticated:   "give the server's --auth-token with --token or HOURGLASS_TOKEN",
	codes.ResourceExhausted: "over a server limit; retry later",
}

// errorText is err as the command line prints it. A status error in its
// chain is replaced by the server's message and the code in words
// ("... (invalid argument)"), and the Go client's "client: CALL: " before
// it by "CALL: ".
func errorText(err error) string {
	text := err.Error()
	var se interface {
		error
		GRPCStatus() *status.Status
	}
	if !errors.As(err, &se) {
		return text
	}
	i := strings.LastIndex(text, se.Error())
	if i < 0 {
		return text
	}
	st := se.GRPCStatus()
	words := codeWords(st.Code())
	if hint := codeHints[st.Code()]; hint != "" {
		words += ": " + hint
	}
	before := clientPrefix.ReplaceAllString(text[:i], "$1")
	return before + st.Message() + " (" + words + ")" + text[i+len(se.Error()):]
}

// clientPrefix is how the Go client names a call in its errors.
var clientPrefix = regexp.MustCompile(`client: ([A-Za-z]+: )$`)

// codeWords spells a status code in words: InvalidArgument is "invalid
// argument".
func codeWords(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unknownFlag returns the flag an "undefined flag" error of the flag
// package names ("dealy" of "flag provided but not defined: -dealy").
func unknownFlag(err error) (string, bool) {
	return strings.CutPrefix(err.Error(), "flag provided but not defined: -")
}

// flagSuggestion is "; did you mean --delay?" for a flag the command does
// not define, or "".
func flagSuggestion(c *cli.Context, err error) string {
	name, ok := unknownFlag(err)
	if !ok || cli.SuggestFlag == nil {
		return ""
	}
	if s := cli.SuggestFlag(c.Command.Flags, name, c.Command.HideHelp); near(strings.TrimLeft(s, "-"), name) {
		return "; " + fmt.Sprintf(cli.SuggestDidYouMeanTemplate, s)
	}
	return ""
}

// near reports whether a suggestion is near enough to what was typed to
// be worth making: urfave/cli suggests the nearest name however far it
// is. Its measure (Jaro-Winkler, from xrash/smetrics, with its values) is
// above 0.9 for a swap or a missing letter ("dealy", "sned") and about
// 0.5 for an unrelated word.
func near(suggestion, typed string) bool {
	return suggestion != "" && smetrics.JaroWinkler(suggestion, typed, 0.7, 4) >= 0.8
}

// commandNotFound is the Action of the app and of each command with
// subcommands: with no argument it prints the help; with one, which names
// no command (urfave/cli runs a command it names), it says so and
// suggests the nearest.
func commandNotFound(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.ShowSubcommandHelp(c)
	}
	name, cmds, help := c.Args().First(), c.App.Commands, c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		cmds, help = c.Command.Subcommands, c.Command.HelpName
	}
	suggestion := ""
	if cli.SuggestCommand != nil {
		s := cli.SuggestCommand(cmds, name)
		nearest := strings.TrimSuffix(strings.TrimPrefix(s, didYouMean), "?")
		if nearest != "help" && nearest != "h" && near(nearest, name) { // SuggestCommand weighs the hidden help command too
			suggestion = "; " + s
		}
	}
	return fmt.Errorf("no command %q%s ('%s --help' lists every command)", name, suggestion, help)
}

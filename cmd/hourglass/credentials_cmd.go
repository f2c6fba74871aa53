package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/hourglassmq/hourglass/access"
)

// credentialsCommand makes entries of serve's --credentials file.
func credentialsCommand() *cli.Command {
	return &cli.Command{
		Name:  "credentials",
		Usage: "make entries of the --credentials file (docs/OPERATIONS.md, Access)",
		Subcommands: []*cli.Command{{
			Name:  "hash",
			Usage: "print a credentials file entry for a token: its SHA-256 digest, never the token",
			UsageText: "hourglass credentials hash --name NAME --role ROLE --topic PATTERN   (a new token, printed on stderr)\n" +
				"   echo -n TOKEN | hourglass credentials hash --name NAME --verb produce --verb read --topic 'orders.*'",
			Description: "Without a token on standard input, makes a random one (32 bytes, base64url) and prints it on\n" +
				"standard error: give it to the client; the server keeps only its digest. The entry goes to standard\n" +
				"output, indented to append under the file's 'credentials:' list.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "name", Required: true, Usage: "the credential's `NAME` (in errors and the audit trail)"},
				&cli.StringFlag{Name: "role", Usage: "`ROLE`: " + strings.Join(access.RoleNames, ", ")},
				&cli.StringSliceFlag{Name: "verb", Usage: "a `VERB` instead of a role, repeatable: " + verbNames()},
				&cli.StringSliceFlag{Name: "topic", Usage: "a topic `PATTERN` it may act on (* and ? match), repeatable; '*' for every topic"},
				&cli.StringSliceFlag{Name: "certificate", Usage: "a client certificate `NAME` (CN or SAN) that is this credential too, repeatable"},
			},
			Action: credentialsHash,
		}},
	}
}

func verbNames() string {
	s := make([]string, len(access.Verbs))
	for i, v := range access.Verbs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func credentialsHash(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("credentials hash takes no arguments (the token comes on standard input), got %q", c.Args().Slice())
	}
	token, err := readToken(c)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %q\n", c.String("name"))
	fmt.Fprintf(&b, "    token_sha256: %q\n", access.Digest(token))
	if r := c.String("role"); r != "" {
		fmt.Fprintf(&b, "    role: %q\n", r)
	}
	if vs := c.StringSlice("verb"); len(vs) > 0 {
		fmt.Fprintf(&b, "    verbs: [%s]\n", quoted(vs))
	}
	fmt.Fprintf(&b, "    topics: [%s]\n", quoted(c.StringSlice("topic")))
	if cs := c.StringSlice("certificate"); len(cs) > 0 {
		fmt.Fprintf(&b, "    certificate: [%s]\n", quoted(cs))
	}
	// The entry must be one the server takes.
	if _, err := access.Parse([]byte("credentials:\n" + b.String())); err != nil {
		return fmt.Errorf("the entry would not be valid: %w (give --role or --verb, and --topic)", err)
	}
	_, err = io.WriteString(c.App.Writer, b.String())
	return err
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// readToken reads the token from standard input (its first line), or
// makes one when standard input is a terminal or empty.
func readToken(c *cli.Context) (string, error) {
	in := c.App.Reader
	if f, ok := in.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		line, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the token from standard input: %w", err)
		}
		if t := strings.TrimRight(line, "\r\n"); t != "" {
			if strings.TrimSpace(t) != t {
				return "", errors.New("the token on standard input begins or ends with spaces: clients send it trimmed")
			}
			return t, nil
		}
	}
	b := make([]byte, 32)
	rand.Read(b)
	t := base64.RawURLEncoding.EncodeToString(b)
	fmt.Fprintf(c.App.ErrWriter, "token (give it to the client; the server keeps only its digest): %s\n", t)
	return t, nil
}

package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"unicode/utf8"
)

// bodyJSON is a message body as the commands print it with --json: as
// text in "body" when it is valid UTF-8, else in standard base64 in
// "body_base64". Embedded, its fields stand where it does.
type bodyJSON struct {
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"body_base64,omitempty"`
}

func newBodyJSON(b []byte) bodyJSON {
	if utf8.Valid(b) {
		s := string(b)
		return bodyJSON{Body: &s}
	}
	return bodyJSON{BodyBase64: base64.StdEncoding.EncodeToString(b)}
}

// text is the body on one line: quoted text, or the base64.
func (b bodyJSON) text() string {
	if b.Body != nil {
		return fmt.Sprintf("%q", *b.Body)
	}
	return b.BodyBase64
}

// print writes the body's line of get and schedule get.
func (b bodyJSON) print(w io.Writer) error {
	if b.Body != nil {
		_, err := fmt.Fprintf(w, "body:        %q\n", *b.Body)
		return err
	}
	_, err := fmt.Fprintf(w, "body base64: %s\n", b.BodyBase64)
	return err
}

package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/hourglassmq/hourglass/internal/h1"
)

// post sends an encoded call (data, in the pooled buffer buf) with
// d.tr.Post: the same request on the wire as http.Client.Do over d.tr,
// with no http.Request or http.Response and the answer's body read into a
// pooled buffer. It decodes the answer into out and returns its header
// with done true; or done false, having sent nothing that was answered
// with more than a redirect, when the call must go through
// http.Client.Do: a field of the caller's that Post does not write (Host,
// Connection, ...), a body Post leaves to RoundTrip, or a redirect that
// http.Client would follow (the call is then made again through it, as
// http.Client would make it again at the new location). Errors are
// worded as the http.Client.Do path words them. One difference in timing:
// the answer is read whole before it is looked at, so a ctx that ends
// after that no longer fails the call, where the http.Client.Do path,
// which checks ctx before each read of the body, may fail it.
func (d *direct) post(ctx context.Context, tmpl *http.Request, tg *h1.Target, header http.Header, buf *[]byte, data []byte, out any) (_ http.Header, done bool, _ error) {
	// The per-call fields go after the body in the same buffer.
	fields := data
	idempotent := false
	for k, vs := range header {
		switch k {
		case "Connect-Protocol-Version", headerContentType, "Accept-Encoding":
			continue // the target's, with the values call set
		case "Authorization":
			if d.auth != nil {
				continue
			}
		case "Idempotency-Key", "X-Idempotency-Key":
			idempotent = true
		case "User-Agent":
			if len(vs) == 1 && &vs[0] == &userAgentValue[0] {
				fields = append(fields, userAgentLine...) // call's default
				continue
			}
		}
		for _, v := range vs {
			var ok bool
			if fields, ok = h1.AppendField(fields, k, v); !ok {
				*buf = fields
				return nil, false, nil
			}
		}
	}
	*buf = fields
	rbuf := getBuffer()
	defer putBuffer(rbuf)
	a, err := d.tr.Post(ctx, h1.PostRequest{Target: tg, Header: fields[len(data):], Body: data[:len(data):len(data)], Idempotent: idempotent}, (*rbuf)[:0])
	*rbuf = a.Body
	if errors.Is(err, h1.ErrUseRoundTrip) {
		return nil, false, nil
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, true, ctxError(cerr)
		}
		// As http.Client.Do wraps a RoundTrip error.
		return nil, true, transportError(ctx, tmpl, &url.Error{Op: "Post", URL: tmpl.URL.String(), Err: err})
	}
	if followed(a.StatusCode, a.Header) {
		return nil, false, nil
	}
	if err := checkHead(a.StatusCode, a.Status, a.Header); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, true, ctxError(cerr)
		}
		return nil, true, err
	}
	if a.StatusCode != http.StatusOK {
		err := wireErrorOf(a.StatusCode, a.Status, a.Header, a.Body, a.BodyErr)
		if cerr := ctx.Err(); cerr != nil {
			return nil, true, ctxError(cerr)
		}
		return nil, true, err
	}
	bodyErr := a.BodyErr
	if bodyErr != nil {
		bodyErr = rstError(ctx, contextDone(ctx, bodyErr)) // as readBody words it
	}
	if err := decodeAnswer(ctx, a.Header, a.Body, bodyErr, out); err != nil {
		return nil, true, err
	}
	return a.Header, true, nil
}

// userAgentLine is the User-Agent field call sets by default, as a line.
var userAgentLine = "User-Agent: " + userAgentValue[0] + "\r\n"

// followed reports whether http.Client would follow this answer to a
// POST to another location.
func followed(status int, h http.Header) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return h.Get("Location") != ""
	}
	return false
}

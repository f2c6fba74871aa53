package client

import (
	"context"
	"fmt"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Edit is what Client.Edit replaces: the body, the headers, or both. A
// nil field keeps what the message has; a non-nil empty one replaces it
// with nothing (an empty body, no headers of its own).
type Edit struct {
	Body []byte
	// Headers replace the message's own headers; the ones the server
	// set (its idempotency key, a recurring occurrence) are kept.
	Headers map[string]string
}

// Edit replaces the body and/or headers of the pending message ref names
// (its ID, any ID it had, or its Key), atomically, keeping its delivery
// time: its next delivery carries the new content and never the old. It
// returns the ID the edited message is delivered under (its OriginID
// stays the first message's, and the first ID and the key go on naming
// it). If the server changed nothing the error says why:
// ErrAlreadyDelivered, ErrAlreadyCancelled or ErrNotPending (errors.Is
// tells). A cluster refuses it (FailedPrecondition).
func (c *Client) Edit(ctx context.Context, ref Ref, e Edit) (ID, error) {
	if e.Body == nil && e.Headers == nil {
		return ID{}, fmt.Errorf("%w: Edit of nothing: give a Body, Headers or both", ErrInvalidMessage)
	}
	id, topic, key := ref.ref()
	req := &hourglassv1.EditRequest{Id: id, Topic: topic, Key: key, SetHeaders: e.Headers != nil, Headers: headersProto(e.Headers)}
	if e.Body != nil {
		req.Body = e.Body
	}
	res, err := c.svc.Edit(ctx, req)
	if err != nil {
		return ID{}, wrap("Edit", err)
	}
	switch res.Result {
	case hourglassv1.EditResult_EDIT_RESULT_EDITED:
		return idOf("Edit", res.Id)
	case hourglassv1.EditResult_EDIT_RESULT_ALREADY_DELIVERED:
		return ID{}, ErrAlreadyDelivered
	case hourglassv1.EditResult_EDIT_RESULT_ALREADY_CANCELLED:
		return ID{}, ErrAlreadyCancelled
	case hourglassv1.EditResult_EDIT_RESULT_UNKNOWN:
		return ID{}, ErrNotPending
	}
	return ID{}, fmt.Errorf("client: Edit: the server answered %v, which this client does not know", res.Result)
}

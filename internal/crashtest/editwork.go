package crashtest

// Edits (issue 44): producers replace the body and headers of messages
// still pending, and the checker (editcheck.go) holds every delivery
// after an Edit answered EDITED to the new content.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// EditHeader is the header an Edit sets to the version of the content it
// gives, the same as the body's "~e<n>" suffix: a delivery whose body and
// header disagree carries half an edit.
const EditHeader = "crashtest-edit"

// editSep separates a key from the version of an edited body.
const editSep = "~e"

// editBody is the body of key's content version n (n > 0).
func editBody(key string, n int) string { return key + editSep + strconv.Itoa(n) }

// splitEdit reads a body as its key and content version (0 when no Edit
// gave it).
func splitEdit(body string) (key string, version int) {
	i := strings.LastIndex(body, editSep)
	if i < 0 {
		return body, 0
	}
	n, err := strconv.Atoi(body[i+len(editSep):])
	if err != nil || n <= 0 {
		return body, 0
	}
	return body[:i], n
}

// keyOf is the key of a message body as stored.
func keyOf(body []byte) string {
	k, _ := splitEdit(string(body))
	return k
}

// edit replaces the body and headers of a recently acknowledged message
// no consumer has received yet (as far as the history tells), by its
// current ID or by its topic and key, with a unary call over Connect or
// gRPC: body editBody(key, n) and the header EditHeader n (the poison
// header kept), n counting the key's Edits. It is recorded as a
// Reschedule of Mode "edit" (an Edit is one that keeps the time: a new
// ID, the same origin), so that every rule about incarnations judges it.
// Not retried in doubt: the next Edit of the key has a version of its
// own.
func (w *workload) edit(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	u := l.choose(rng)
	byKey := rng.IntN(2) == 0
	pm, ok := w.hist.PendingSchedule(rng.IntN)
	if !ok {
		return
	}
	w.mu.Lock()
	w.edits[pm.Key]++
	n := w.edits[pm.Key]
	w.mu.Unlock()
	hs := []*hourglassv1.Header{{Key: EditHeader, Value: strconv.Itoa(n)}}
	if pm.Poison {
		hs = append(hs, &hourglassv1.Header{Key: PoisonHeader, Value: "1"})
	}
	body := []byte(editBody(pm.Key, n))
	req := &hourglassv1.EditRequest{Id: pm.ID, Body: body, Headers: hs, SetHeaders: true}
	x := Reschedule{Key: pm.Key, Topic: pm.Topic, ID: pm.ID, Mode: "edit", Edit: n, Cycle: cycle, NotBefore: pm.NotBefore}
	if byKey {
		req = &hourglassv1.EditRequest{Topic: pm.Topic, Key: pm.Key, Body: body, Headers: hs, SetHeaders: true}
		x.ID, x.ByKey = "", true
		w.count("edit-key", u.proto)
	} else {
		w.count("edit", u.proto)
	}
	x.Sent = time.Now()
	res, err := call(ctx, u.Edit, req)
	x.Answered, x.Outcome = time.Now(), classify(err)
	if x.Outcome == OK {
		switch res.Result {
		case hourglassv1.EditResult_EDIT_RESULT_EDITED:
			x.Answer, x.NewID = RescheduleRescheduled, res.Id
		case hourglassv1.EditResult_EDIT_RESULT_ALREADY_DELIVERED:
			x.Answer = RescheduleAlreadyDelivered
		case hourglassv1.EditResult_EDIT_RESULT_ALREADY_CANCELLED:
			x.Answer = RescheduleAlreadyCancelled
		default:
			x.Answer = RescheduleUnknown
		}
	}
	w.hist.AddReschedule(x)
}

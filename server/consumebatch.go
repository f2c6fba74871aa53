package server

import (
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// maxHeld bounds the messages a Consume stream remembers by number. A
// consumer holds at most the credits it granted, but may grant more
// without settling; past this the oldest numbers are forgotten (their
// leases have long ended) and settling them fails.
const maxHeld = 4 * MaxCredits

// heldSet is what a Consume stream's numbers name: the receipt of each
// message it pushed and the consumer has not settled. The queue (or the
// cluster) owns the leases; this only translates the stream's numbers.
// Its methods may be called from any goroutine.
type heldSet struct {
	mu       sync.Mutex
	base     uint64   // guarded by mu: the number of receipts[0]
	receipts []string // guarded by mu: "" once settled
	next     uint64   // guarded by mu: the number of the next message pushed
}

// add numbers msgs and returns the first one's number.
func (h *heldSet) add(msgs []queue.Message) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.next
	if len(h.receipts) == 0 {
		h.base = first
	}
	for i := range msgs {
		h.receipts = append(h.receipts, msgs[i].Receipt)
	}
	h.next += uint64(len(msgs))
	if drop := len(h.receipts) - maxHeld; drop > 0 {
		h.forget(drop)
	}
	return first
}

// forget drops the n oldest entries. h.mu is held.
func (h *heldSet) forget(n int) {
	clear(h.receipts[:n])
	h.receipts = h.receipts[n:]
	h.base += uint64(n)
	if len(h.receipts) == 0 {
		h.receipts = nil // let the backing array go
	}
}

// get returns the receipt of message seq, if the stream holds it.
func (h *heldSet) get(seq uint64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq < h.base || seq-h.base >= uint64(len(h.receipts)) {
		return "", false
	}
	r := h.receipts[seq-h.base]
	return r, r != ""
}

// take returns the receipt of message seq and forgets it.
func (h *heldSet) take(seq uint64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq < h.base || seq-h.base >= uint64(len(h.receipts)) {
		return "", false
	}
	i := seq - h.base
	r := h.receipts[i]
	h.receipts[i] = ""
	n := 0
	for n < len(h.receipts) && h.receipts[n] == "" {
		n++
	}
	if n > 0 {
		h.forget(n)
	}
	return r, r != ""
}

// toBatch builds the pushed batch of msgs, numbered from first, with
// their receipts if withReceipts. Its byte slices alias msgs'.
func toBatch(msgs []queue.Message, first uint64, withReceipts bool) *hourglassv1.ConsumeBatch {
	b := &hourglassv1.ConsumeBatch{
		FirstSeq:         first,
		ReceivedAtMs:     msgs[0].ReceivedAt.UnixMilli(),
		LeaseExpiresAtMs: msgs[0].LeaseUntil.UnixMilli(),
		DeliverAtMs:      msgs[0].DeliverAt,
		Ids:              make([]byte, 0, message.IDBinaryLen*len(msgs)),
		Bodies:           make([][]byte, len(msgs)),
		DeliverAtDeltas:  make([]int64, len(msgs)),
	}
	nh, hlen := 0, 0
	for i := range msgs {
		q := &msgs[i]
		// Leases of one Receive end together; where they differ (a
		// cluster node's), the batch says the earliest.
		b.LeaseExpiresAtMs = min(b.LeaseExpiresAtMs, q.LeaseUntil.UnixMilli())
		b.Ids = q.ID.AppendBinary(b.Ids)
		b.Bodies[i] = q.Body
		if withReceipts {
			b.Receipts = append(b.Receipts, q.Receipt)
		}
		b.DeliverAtDeltas[i] = q.DeliverAt - b.DeliverAtMs
		if q.Attempt != 0 && b.Attempts == nil {
			b.Attempts = make([]uint32, len(msgs))
		}
		if b.Attempts != nil {
			b.Attempts[i] = q.Attempt
		}
		if !q.Origin.IsZero() && q.Origin != q.ID {
			if b.OriginIds == nil {
				b.OriginIds = make([]byte, message.IDBinaryLen*len(msgs))
			}
			q.Origin.AppendBinary(b.OriginIds[i*message.IDBinaryLen : i*message.IDBinaryLen])
		}
		if dl := deadLetterInfo(q.Headers, q.Attempt); dl != nil {
			if b.DeadLetters == nil {
				b.DeadLetters = make([]*hourglassv1.DeadLetter, len(msgs))
				for j := range b.DeadLetters {
					b.DeadLetters[j] = &hourglassv1.DeadLetter{}
				}
			}
			b.DeadLetters[i] = dl
		}
		nh += len(q.Headers)
		for _, h := range q.Headers {
			hlen += len(h.Key) + len(h.Value)
		}
	}
	if nh == 0 {
		return b
	}
	b.HeaderCounts = make([]uint32, len(msgs))
	b.HeaderKeys = make([]string, 0, nh)
	b.HeaderValues = make([]string, 0, nh)
	// One allocation for the text of all headers (as toMessages).
	text := make([]byte, 0, hlen)
	str := func(v []byte) string {
		if len(v) == 0 {
			return ""
		}
		if !utf8.Valid(v) {
			return strings.ToValidUTF8(string(v), "\uFFFD")
		}
		start := len(text)
		text = append(text, v...) // within capacity: hlen counted it
		return unsafe.String(&text[start], len(v))
	}
	for i := range msgs {
		b.HeaderCounts[i] = uint32(len(msgs[i].Headers))
		for _, h := range msgs[i].Headers {
			b.HeaderKeys = append(b.HeaderKeys, str(h.Key))
			b.HeaderValues = append(b.HeaderValues, str(h.Value))
		}
	}
	return b
}

package client

import (
	"fmt"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// batchDeliveries appends the deliveries of a pushed batch of topic to
// dst, and reports the first one's number on its stream. The deliveries'
// Body and header text share b's memory (one received response); only a
// message with headers or a dead letter's information allocates (its
// map, its DeadLetterInfo). A batch whose fields do not agree is refused.
func batchDeliveries(dst []Delivery, topic string, b *hourglassv1.ConsumeBatch) ([]Delivery, error) {
	n := len(b.Bodies)
	bad := func(what string) error {
		return fmt.Errorf("client: a pushed batch of %d messages the client cannot read: %s", n, what)
	}
	switch {
	case n == 0:
		return dst, bad("no messages")
	case b.FirstSeq == 0:
		return dst, bad("first_seq 0")
	case len(b.Ids) != message.IDBinaryLen*n:
		return dst, bad(fmt.Sprintf("%d bytes of IDs", len(b.Ids)))
	case len(b.DeliverAtDeltas) != n:
		return dst, bad(fmt.Sprintf("%d delivery times", len(b.DeliverAtDeltas)))
	case len(b.Attempts) != 0 && len(b.Attempts) != n:
		return dst, bad(fmt.Sprintf("%d attempts", len(b.Attempts)))
	case len(b.OriginIds) != 0 && len(b.OriginIds) != message.IDBinaryLen*n:
		return dst, bad(fmt.Sprintf("%d bytes of origin IDs", len(b.OriginIds)))
	case len(b.HeaderCounts) != 0 && len(b.HeaderCounts) != n:
		return dst, bad(fmt.Sprintf("%d header counts", len(b.HeaderCounts)))
	case len(b.HeaderKeys) != len(b.HeaderValues):
		return dst, bad(fmt.Sprintf("%d header keys and %d values", len(b.HeaderKeys), len(b.HeaderValues)))
	case len(b.DeadLetters) != 0 && len(b.DeadLetters) != n:
		return dst, bad(fmt.Sprintf("%d dead letters", len(b.DeadLetters)))
	case len(b.Receipts) != 0 && len(b.Receipts) != n:
		return dst, bad(fmt.Sprintf("%d receipts", len(b.Receipts)))
	}
	received, until := time.UnixMilli(b.ReceivedAtMs), time.UnixMilli(b.LeaseExpiresAtMs)
	keys, values := b.HeaderKeys, b.HeaderValues
	start := len(dst)
	for i := range n {
		id, err := message.IDFromBinary(b.Ids[i*message.IDBinaryLen : (i+1)*message.IDBinaryLen])
		if err != nil {
			return dst[:start], bad(err.Error())
		}
		d := Delivery{
			ID: ID{m: id, ok: true}, Topic: topic, Body: b.Bodies[i],
			DeliverAt: time.UnixMilli(b.DeliverAtMs + b.DeliverAtDeltas[i]), ReceivedAt: received, LeaseExpiresAt: until,
		}
		d.OriginID = d.ID
		if len(b.Attempts) != 0 {
			d.Attempt = int(b.Attempts[i])
		}
		if len(b.Receipts) != 0 {
			d.Receipt = b.Receipts[i]
		}
		if len(b.OriginIds) != 0 {
			if o := b.OriginIds[i*message.IDBinaryLen : (i+1)*message.IDBinaryLen]; !allZero(o) {
				oid, err := message.IDFromBinary(o)
				if err != nil {
					return dst[:start], bad("origin: " + err.Error())
				}
				d.OriginID = ID{m: oid, ok: true}
			}
		}
		if len(b.HeaderCounts) != 0 && b.HeaderCounts[i] > 0 {
			k := int(b.HeaderCounts[i])
			if k > len(keys) {
				return dst[:start], bad(fmt.Sprintf("header counts beyond the %d headers", len(b.HeaderKeys)))
			}
			d.Headers = make(map[string]string, k)
			for j := range k {
				d.Headers[keys[j]] = values[j]
			}
			keys, values = keys[k:], values[k:]
		}
		if len(b.DeadLetters) != 0 && b.DeadLetters[i].GetReason() != "" {
			d.DeadLetter = deadLetterOf(b.DeadLetters[i])
		}
		dst = append(dst, d)
	}
	if len(keys) != 0 {
		return dst[:start], bad(fmt.Sprintf("%d headers beyond the header counts", len(keys)))
	}
	return dst, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

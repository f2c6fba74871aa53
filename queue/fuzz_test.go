package queue

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// FuzzDecodeMessage: the queue-log decoder never panics, and what it
// accepts re-encodes to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	id := message.ID{DeliverAt: 1_796_014_801_500, Seq: 42}
	m := message.Message{DeliverAt: id.DeliverAt, Attempt: 2, Topic: []byte("orders"), Body: []byte("hi"),
		Headers: []message.Header{{Key: []byte("k"), Value: []byte("v")}}, Origin: message.ID{DeliverAt: 7, Seq: 8}}
	good := appendMessage(nil, id, &m)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(slices.Clone(good), 0))
	f.Add([]byte{1})
	f.Add(append([]byte{2}, good[1:]...))
	f.Fuzz(func(t *testing.T, p []byte) {
		var id message.ID
		var m message.Message
		if err := decodeMessage(p, &id, &m); err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		if got := appendMessage(nil, id, &m); !bytes.Equal(got, p) {
			t.Fatalf("accepted payload re-encodes differently:\n in %x\nout %x", p, got)
		}
		if messageSize(&m) != len(p) {
			t.Fatalf("messageSize %d, payload %d bytes", messageSize(&m), len(p))
		}
	})
}

// FuzzDecodeAck: the ack decoder never panics and round-trips.
func FuzzDecodeAck(f *testing.F) {
	f.Add(appendAck(nil, 0))
	f.Add(appendAck(nil, 32, 1<<40, maxOffset))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0x80})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, p []byte) {
		offs, err := decodeAck(nil, p)
		if err != nil {
			return
		}
		if got := appendAck(nil, offs...); !bytes.Equal(got, p) {
			t.Fatalf("accepted payload re-encodes differently: %x -> %x", p, got)
		}
	})
}

// FuzzDecodeCheckpoint: the head and entries decoders never panic, and
// what they accept re-encodes to the same bytes.
func FuzzDecodeCheckpoint(f *testing.F) {
	ck := checkpoint{lwm: 10, cursor: 100, end: 200, unread: 3, entries: []entry{{10, 1}, {50, 0}, {150, 0}}}
	recs := encodeCheckpoint(&ck, 2)
	for _, r := range recs {
		f.Add(r.Type, r.Payload)
	}
	f.Add(typeCheckpoint, recs[0].Payload[:headSize-1])
	f.Add(typeEntries, []byte{1})
	f.Fuzz(func(t *testing.T, typ uint8, p []byte) {
		switch typ {
		case typeCheckpoint:
			ck, n, err := decodeHead(p)
			if err != nil {
				return
			}
			if ck.lwm < 0 || ck.lwm > ck.cursor || ck.cursor > ck.end || ck.unread < 0 {
				t.Fatalf("accepted impossible head %+v", ck)
			}
			if got := appendHead(nil, &ck, n); !bytes.Equal(got, p) {
				t.Fatalf("head re-encodes differently: %x -> %x", p, got)
			}
		case typeEntries:
			es, err := decodeEntries(nil, p)
			if err != nil {
				return
			}
			if got := appendEntries(nil, es); !bytes.Equal(got, p) {
				t.Fatalf("entries re-encode differently: %x -> %x", p, got)
			}
		}
	})
}

// FuzzReplay feeds an arbitrary stream of framed ack-log records to the
// replayer: it never panics, and a state it accepts is consistent.
func FuzzReplay(f *testing.F) {
	var log []byte
	add := func(typ uint8, p []byte) {
		b := make([]byte, record.Size(len(p)))
		record.Encode(b, typ, 0, p)
		log = append(log, b...)
	}
	ck := checkpoint{lwm: 10, cursor: 100, end: 200, unread: 3, entries: []entry{{10, 1}, {50, 0}, {150, 0}}}
	for _, r := range encodeCheckpoint(&ck, 2) {
		add(r.Type, r.Payload)
	}
	add(typeAck, appendAck(nil, 10, 150, 160))
	f.Add(slices.Clone(log))
	f.Add(slices.Clone(log[20:])) // starts inside a record
	recs := encodeCheckpoint(&ck, 1)
	log = log[:0]
	add(recs[2].Type, recs[2].Payload) // orphan entries first
	for _, r := range recs {
		add(r.Type, r.Payload)
	}
	f.Add(slices.Clone(log))
	log = log[:0]
	add(recs[0].Type, recs[0].Payload) // torn checkpoint, then an ack
	add(typeAck, appendAck(nil, 5))
	f.Add(slices.Clone(log))
	// A record of type skipMark stands for a span repair covered
	// (replayAcks calls skipped): a head lost in it leaves its entries.
	const skipMark = 0xFF
	log = log[:0]
	add(typeAck, appendAck(nil, 5))
	add(skipMark, nil)
	add(recs[1].Type, recs[1].Payload)
	add(recs[2].Type, recs[2].Payload)
	add(typeAck, appendAck(nil, 7))
	f.Add(slices.Clone(log))
	log = log[:0]
	add(recs[0].Type, recs[0].Payload) // a skip inside a checkpoint
	add(recs[1].Type, recs[1].Payload)
	add(skipMark, nil)
	add(recs[3].Type, recs[3].Payload)
	f.Add(slices.Clone(log))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r replayer
		for len(b) > 0 {
			rec, n, err := record.Decode(b)
			if err != nil {
				return
			}
			b = b[n:]
			if rec.Type == skipMark {
				r.skipped()
				continue
			}
			if err := r.add(rec.Type, rec.Payload); err != nil {
				return
			}
		}
		if err := r.finish(); err != nil || !r.have {
			return
		}
		ck := r.ck
		if ck.lwm > ck.cursor || ck.cursor > ck.end {
			t.Fatalf("accepted impossible checkpoint %+v", ck)
		}
		for i, e := range ck.entries {
			if e.off < ck.lwm || (i > 0 && e.off <= ck.entries[i-1].off) || (e.off >= ck.cursor && e.attempt != 0) {
				t.Fatalf("accepted bad entries %+v in %+v", ck.entries, ck)
			}
		}
	})
}

// FuzzParseReceipt: receipts parse only in the form formatReceipt writes.
func FuzzParseReceipt(f *testing.F) {
	f.Add(formatReceipt(message.ID{DeliverAt: 1, Seq: 2}, 3))
	f.Add(formatReceipt(message.ID{DeliverAt: 1 << 40, Seq: 1 << 60}, 1<<63))
	f.Add("0000000000000001000000000000000.2")
	f.Add("00000000000000010000000000000002.")
	f.Add("00000000000000010000000000000002.+1")
	f.Add("0000000000000001000000000000000A.2")
	f.Add("00000000000000010000000000000002.02")
	f.Add("00000000000000010000000000000002.A")
	f.Add("00000000000000010000000000000002.0")
	f.Fuzz(func(t *testing.T, s string) {
		id, serial, err := parseReceipt(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if got := formatReceipt(id, serial); got != s {
			t.Fatalf("accepted %q, which formats as %q", s, got)
		}
	})
}

// FuzzListToken: the page-token decoder never panics; it takes only what
// encode wrote with the same key, topic and state, and gives it back.
func FuzzListToken(f *testing.F) {
	k := newTokenKey()
	good := k.encode("orders", listToken{state: ListDue, off: 1234, id: message.ID{DeliverAt: 1_796_014_801_500, Seq: 42}})
	f.Add(good, "orders", uint8(ListDue))
	f.Add(good, "orders", uint8(ListLeased))
	f.Add(good, "other", uint8(ListDue))
	f.Add(good[:len(good)-1], "orders", uint8(ListDue))
	f.Add("1", "orders", uint8(ListDue))
	f.Add("50", "orders", uint8(ListDue))
	f.Add("", "orders", uint8(ListDue))
	f.Fuzz(func(t *testing.T, s, topic string, state uint8) {
		tok, err := k.decode(topic, ListState(state), s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if s != good || topic != "orders" || ListState(state) != ListDue {
			t.Fatalf("decode accepted %q for topic %q state %d: %+v", s, topic, state, tok)
		}
		if again := k.encode(topic, tok); again != s {
			t.Fatalf("accepted token re-encodes differently: %q -> %q", s, again)
		}
	})
}

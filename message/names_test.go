package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// keyedMessage is a message as the engine stores one with an idempotency
// key and a flow key after a producer's own header.
func keyedMessage() Message {
	return Message{DeliverAt: 1_800_000_000_000, Topic: []byte("orders"),
		Headers: []Header{
			{Key: []byte("x-user"), Value: []byte("ann")},
			{Key: []byte(IdempotencyKeyHeader), Value: []byte("order-42")},
			{Key: []byte(IdempotencyAtHeader), Value: []byte("1799990000000")},
			{Key: []byte(FlowKeyHeader), Value: []byte("tenant-7")},
		},
		Body: []byte("hello")}
}

// appendScheduleV1 is AppendSchedule as version 1 wrote every message:
// what data directories written before version 2 hold.
func appendScheduleV1(m *Message) []byte {
	dst := []byte{scheduleVersion}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.DeliverAt))
	dst = binary.LittleEndian.AppendUint32(dst, m.Attempt)
	dst = appendBytes(dst, m.Topic)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	for _, h := range m.Headers {
		dst = appendBytes(appendBytes(dst, h.Key), h.Value)
	}
	dst = binary.LittleEndian.AppendUint64(dst, m.Origin.Seq)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.Origin.DeliverAt))
	return appendBytes(dst, m.Body)
}

func sameHeaders(t *testing.T, got, want []Header) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d headers, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("header %d = %q: %q, want %q: %q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func TestScheduleVersion2(t *testing.T) {
	m := keyedMessage()
	enc := AppendSchedule(nil, &m)
	if enc[0] != scheduleVersion2 {
		t.Fatalf("version %d, want 2 for a message with the idempotency headers", enc[0])
	}
	if len(enc) != ScheduleSize(&m) {
		t.Fatalf("ScheduleSize = %d, encoded %d", ScheduleSize(&m), len(enc))
	}
	// Each of the three names costs one byte instead of its length and
	// its bytes; the producer's own name costs what it did.
	v1 := appendScheduleV1(&m)
	saved := len(IdempotencyKeyHeader) + len(IdempotencyAtHeader) + len(FlowKeyHeader)
	if len(v1)-len(enc) != saved {
		t.Fatalf("version 2 is %d bytes, version 1 %d: saved %d, want %d", len(enc), len(v1), len(v1)-len(enc), saved)
	}
	var got Message
	if err := DecodeSchedule(enc, &got); err != nil {
		t.Fatal(err)
	}
	sameHeaders(t, got.Headers, m.Headers)
	if !bytes.Equal(got.Body, m.Body) || got.DeliverAt != m.DeliverAt || string(got.Topic) != "orders" {
		t.Fatalf("decoded %+v", got)
	}
	if origin, ok := OriginOf(enc); !ok || !origin.IsZero() {
		t.Fatalf("OriginOf = %v, %v", origin, ok)
	}
	for i := range len(enc) {
		if err := DecodeSchedule(enc[:i], &got); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated to %d: err = %v", i, err)
		}
	}
	if a := testing.AllocsPerRun(100, func() { DecodeSchedule(enc, &got) }); a != 0 {
		t.Fatalf("decoding version 2: %v allocs", a)
	}
}

// A data directory written before version 2 holds keyed messages with the
// names spelled out: they decode to the same headers.
func TestScheduleVersion1StillDecodes(t *testing.T) {
	m := keyedMessage()
	m.Origin = ID{DeliverAt: 1_700_000_000_000, Seq: 9}
	var got Message
	if err := DecodeSchedule(appendScheduleV1(&m), &got); err != nil {
		t.Fatal(err)
	}
	sameHeaders(t, got.Headers, m.Headers)
	if origin, ok := OriginOf(appendScheduleV1(&m)); !ok || origin != m.Origin {
		t.Fatalf("OriginOf = %v, %v", origin, ok)
	}
	// A message without a header of the table is written as version 1
	// always did, byte for byte.
	plain := Message{DeliverAt: 5, Topic: []byte("t"), Headers: []Header{{Key: []byte("k"), Value: []byte("v")}}, Body: []byte("b")}
	if enc := AppendSchedule(nil, &plain); !bytes.Equal(enc, appendScheduleV1(&plain)) {
		t.Fatalf("a message without stored names: %x, want version 1's %x", enc, appendScheduleV1(&plain))
	}
}

func TestScheduleVersion2Malformed(t *testing.T) {
	m := Message{DeliverAt: 5, Topic: []byte("t"), Headers: []Header{{Key: []byte(IdempotencyKeyHeader), Value: []byte("k")}}}
	enc := AppendSchedule(nil, &m)
	// Byte 16 is the first header's name: number 0, written as 1.
	at := 1 + 8 + 4 + 2 + 1
	if enc[at] != 1 {
		t.Fatalf("name byte %d, want 1", enc[at])
	}
	for _, tc := range []struct {
		name string
		edit func(b []byte)
	}{
		{"name_number_past_the_table", func(b []byte) { b[at] = byte(2*len(storedNames) + 1) }},
		{"version_3", func(b []byte) { b[0] = 3 }},
		{"literal_name_past_the_end", func(b []byte) { b[at] = 0x7e }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(enc)
			tc.edit(b)
			var got Message
			if err := DecodeSchedule(b, &got); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if _, ok := OriginOf(b); ok {
				t.Fatal("OriginOf read a payload DecodeSchedule refuses")
			}
		})
	}
}

func TestMayHoldHeader(t *testing.T) {
	keyed := keyedMessage()
	plain := Message{DeliverAt: 5, Topic: []byte("t"), Headers: []Header{{Key: []byte("k"), Value: []byte("v")}}}
	flow := Message{DeliverAt: 5, Topic: []byte("t"), Headers: []Header{{Key: []byte(FlowKeyHeader), Value: []byte("f")}}}
	key := []byte(IdempotencyKeyHeader)
	for _, tc := range []struct {
		name string
		p    []byte
		want bool
	}{
		{"version_2_keyed", AppendSchedule(nil, &keyed), true},
		{"version_1_keyed", appendScheduleV1(&keyed), true},
		{"no_headers_of_the_table", AppendSchedule(nil, &plain), false},
		// A version-2 payload may hold any name of the table: it does not
		// say which without decoding.
		{"version_2_other_names", AppendSchedule(nil, &flow), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayHoldHeader(tc.p, key); got != tc.want {
				t.Fatalf("MayHoldHeader = %v, want %v", got, tc.want)
			}
			var m Message
			if err := DecodeSchedule(tc.p, &m); err != nil {
				t.Fatal(err)
			}
			if has := HeaderValue(m.Headers, IdempotencyKeyHeader) != ""; has && !tc.want {
				t.Fatal("MayHoldHeader said no to a payload that holds the header")
			}
		})
	}
}

package message

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestScheduleRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"minimal", Message{DeliverAt: 1, Topic: []byte("t")}},
		{"headers_body", Message{
			DeliverAt: 1_800_000_000_000, Attempt: 3, Topic: []byte("orders.timeout"),
			Headers: []Header{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("trace"), Value: nil}},
			Body:    bytes.Repeat([]byte{0, 1, 2}, 300),
			Origin:  ID{DeliverAt: 1_700_000_000_000, Seq: 42},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := AppendSchedule(nil, &tc.m)
			if len(enc) != ScheduleSize(&tc.m) {
				t.Fatalf("ScheduleSize = %d, encoded %d", ScheduleSize(&tc.m), len(enc))
			}
			var got Message
			if err := DecodeSchedule(enc, &got); err != nil {
				t.Fatal(err)
			}
			norm := func(m Message) Message {
				if len(m.Body) == 0 {
					m.Body = nil
				}
				if len(m.Headers) == 0 {
					m.Headers = nil
				}
				for i := range m.Headers {
					if len(m.Headers[i].Value) == 0 {
						m.Headers[i].Value = nil
					}
				}
				return m
			}
			if !reflect.DeepEqual(norm(got), norm(tc.m)) {
				t.Fatalf("got %+v\nwant %+v", got, tc.m)
			}
			for i := range len(enc) {
				if err := DecodeSchedule(enc[:i], &got); !errors.Is(err, ErrMalformed) {
					t.Fatalf("truncated to %d: err = %v", i, err)
				}
			}
		})
	}
}

func TestIDString(t *testing.T) {
	id := ID{DeliverAt: 1_764_480_000_123, Seq: 987654321}
	s := id.String()
	if len(s) != 32 {
		t.Fatalf("len %d", len(s))
	}
	back, err := ParseID(s)
	if err != nil || back != id {
		t.Fatalf("ParseID(%q) = %v, %v", s, back, err)
	}
	later := ID{DeliverAt: id.DeliverAt + 1}
	if !(s < later.String()) {
		t.Fatal("string order is not delivery order")
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("g", 32), strings.Repeat("f", 32)} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func TestCancelRoundTrip(t *testing.T) {
	id := ID{DeliverAt: 5, Seq: 7}
	enc := AppendCancel(nil, id)
	if len(enc) != CancelSize {
		t.Fatal(len(enc))
	}
	got, err := DecodeCancel(enc)
	if err != nil || got != id {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := DecodeCancel(enc[:10]); err == nil {
		t.Fatal("short cancel accepted")
	}
}

func TestDecodeScheduleDoesNotAllocate(t *testing.T) {
	m := Message{DeliverAt: 9, Topic: []byte("a"), Headers: []Header{{Key: []byte("x")}}, Body: []byte("b")}
	enc := AppendSchedule(nil, &m)
	var got Message
	DecodeSchedule(enc, &got)
	if a := testing.AllocsPerRun(100, func() { DecodeSchedule(enc, &got) }); a != 0 {
		t.Fatalf("%v allocs", a)
	}
}

func FuzzDecodeSchedule(f *testing.F) {
	m := Message{DeliverAt: 9, Attempt: 1, Topic: []byte("a"), Headers: []Header{{Key: []byte("x"), Value: []byte("y")}}, Body: []byte("body")}
	f.Add(AppendSchedule(nil, &m))
	m.Origin = ID{DeliverAt: 7, Seq: 42}
	f.Add(AppendSchedule(nil, &m))
	f.Add([]byte{1})
	keyed := keyedMessage()
	f.Add(AppendSchedule(nil, &keyed)) // version 2
	f.Add(appendScheduleV1(&keyed))
	f.Fuzz(func(t *testing.T, src []byte) {
		var got Message
		origin, ok := OriginOf(src)
		if err := DecodeSchedule(src, &got); err != nil {
			return
		}
		// OriginOf reads the same origin without decoding the rest.
		if !ok || origin != got.Origin {
			t.Fatalf("OriginOf = %v, %v; DecodeSchedule's origin %v", origin, ok, got.Origin)
		}
		re := AppendSchedule(nil, &got)
		if !bytes.Equal(re, src) {
			// Uvarints have non-minimal encodings; what matters is that the
			// re-encoding decodes to the same message.
			var again Message
			if err := DecodeSchedule(re, &again); err != nil || !reflect.DeepEqual(again.Body, got.Body) || again.DeliverAt != got.DeliverAt {
				t.Fatalf("re-encoding does not round-trip: %v", err)
			}
			sameHeaders(t, again.Headers, got.Headers)
		}
		if len(re) != ScheduleSize(&got) {
			t.Fatalf("ScheduleSize = %d, encoded %d", ScheduleSize(&got), len(re))
		}
		if !MayHoldHeader(src, []byte(IdempotencyKeyHeader)) && HeaderValue(got.Headers, IdempotencyKeyHeader) != "" {
			t.Fatal("MayHoldHeader said no to a payload that holds the header")
		}
	})
}

func FuzzDecodeCancel(f *testing.F) {
	f.Add(AppendCancel(nil, ID{DeliverAt: 1, Seq: 2}))
	f.Fuzz(func(t *testing.T, src []byte) {
		id, err := DecodeCancel(src)
		if err == nil && !bytes.Equal(AppendCancel(nil, id), src) {
			t.Fatal("cancel does not round-trip")
		}
	})
}

func TestIDAppendText(t *testing.T) {
	for _, id := range []ID{{}, {DeliverAt: 1_796_000_000_123, Seq: 9}, {DeliverAt: 0x0123456789abcdef, Seq: 0xfedcba9876543210}, {DeliverAt: -1, Seq: 1<<64 - 1}} {
		got := id.AppendText([]byte("x"))
		want := fmt.Sprintf("%016x%016x", uint64(id.DeliverAt), id.Seq)
		if string(got) != "x"+want || id.String() != want || len(got) != 1+IDTextLen {
			t.Errorf("AppendText(%v) = %q, String %q; want x+%q", id, got, id.String(), want)
		}
		if id.DeliverAt < 0 {
			continue // ParseID refuses a negative time
		}
		back, err := ParseID(string(got[1:]))
		if err != nil || back != id {
			t.Errorf("ParseID(%q) = %v, %v; want %v", got[1:], back, err, id)
		}
	}
}

func TestRescheduleAndControl(t *testing.T) {
	old := ID{DeliverAt: 5, Seq: 7}
	m := Message{DeliverAt: 99, Topic: []byte("t"), Body: []byte("b"), Origin: old}
	p := AppendReschedule(nil, old, &m)
	id, sched, err := SplitReschedule(p)
	if err != nil || id != old {
		t.Fatalf("SplitReschedule = %v, %v", id, err)
	}
	var got Message
	if err := DecodeSchedule(sched, &got); err != nil || got.DeliverAt != 99 || string(got.Body) != "b" || got.Origin != old {
		t.Fatalf("the replacement: %+v, %v", got, err)
	}
	if _, _, err := SplitReschedule(p[:10]); err == nil {
		t.Fatal("a cut reschedule payload decoded")
	}
	c := Control{Kind: ControlPolicy, Name: []byte("orders"), Value: []byte(`{"paused":true}`)}
	dc, err := DecodeControl(AppendControl(nil, c))
	if err != nil || dc.Kind != c.Kind || string(dc.Name) != "orders" || string(dc.Value) != string(c.Value) {
		t.Fatalf("DecodeControl = %+v, %v", dc, err)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 1, 0, 0}, append(AppendControl(nil, c), 0)} {
		if _, err := DecodeControl(bad); err == nil {
			t.Errorf("DecodeControl(%x) succeeded", bad)
		}
	}
}

func FuzzDecodeControl(f *testing.F) {
	f.Add(AppendControl(nil, Control{Kind: ControlSchedule, Name: []byte("n"), Value: []byte("{}")}))
	f.Add([]byte{1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := DecodeControl(src)
		if err != nil {
			return
		}
		var again Control
		if again, err = DecodeControl(AppendControl(nil, c)); err != nil || again.Kind != c.Kind ||
			!bytes.Equal(again.Name, c.Name) || !bytes.Equal(again.Value, c.Value) {
			t.Fatalf("control does not round-trip: %+v %v", again, err)
		}
	})
}

func FuzzSplitReschedule(f *testing.F) {
	f.Add(AppendReschedule(nil, ID{DeliverAt: 1, Seq: 2}, &Message{DeliverAt: 3, Topic: []byte("t")}))
	f.Fuzz(func(t *testing.T, src []byte) {
		id, rest, err := SplitReschedule(src)
		if err != nil {
			return
		}
		if !bytes.Equal(append(AppendCancel(nil, id), rest...), src) {
			t.Fatal("reschedule does not round-trip")
		}
		var m Message
		_ = DecodeSchedule(rest, &m)
	})
}

func TestReserved(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"hourglass-idempotency-key", true},
		{"Hourglass-Idempotency-Key", true},
		{"HOURGLASS-x", true},
		{"hourglass-", true},
		{"hourglass", false},
		{"hourglassx", false},
		{"x-hourglass-id", false},
		{"", false},
	} {
		if got := Reserved(tc.key); got != tc.want {
			t.Errorf("Reserved(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

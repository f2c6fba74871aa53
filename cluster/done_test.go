package cluster

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hourglassmq/hourglass/message"
)

func TestDoneRoundTrip(t *testing.T) {
	want := []DoneRecord{
		{MakeID(3, 17, 5, 1_700_000_000_123), Delivered},
		{MakeID(0, 1, 0, 5), CancelledReason},
	}
	var buf []byte
	for _, r := range want {
		buf = AppendDone(buf, r.ID, r.Reason)
	}
	if len(buf) != len(want)*DoneRecordSize {
		t.Fatalf("%d bytes for %d records", len(buf), len(want))
	}
	var got []DoneRecord
	if err := DecodeDone(buf, func(r DoneRecord) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("decoded %v, want %v", got, want)
	}
}

func TestDoneMalformed(t *testing.T) {
	good := AppendDone(nil, MakeID(1, 2, 0, 3), Delivered)
	for _, tc := range []struct {
		name string
		src  []byte
	}{
		{"empty", nil},
		{"short", good[:16]},
		{"trailing_byte", append(bytes.Clone(good), 1)},
		{"reason_zero", append(bytes.Clone(good[:16]), 0)},
		{"reason_unknown_in_second", append(bytes.Clone(good), append(bytes.Clone(good[:16]), 9)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := DecodeDone(tc.src, func(DoneRecord) { n++ })
			if !errors.Is(err, ErrBadDone) {
				t.Fatalf("err = %v, want ErrBadDone", err)
			}
			if n != 0 {
				t.Fatalf("%d records handed out of a malformed payload", n)
			}
		})
	}
}

func FuzzDecodeDone(f *testing.F) {
	f.Add(AppendDone(nil, MakeID(1, 2, 0, 3), Delivered))
	f.Add(AppendDone(AppendDone(nil, MakeID(0, 1, 1, 1), CancelledReason), message.ID{}, Delivered))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, src []byte) {
		var recs []DoneRecord
		err := DecodeDone(src, func(r DoneRecord) { recs = append(recs, r) })
		if err != nil {
			if len(recs) != 0 {
				t.Fatalf("error %v after handing out %d records", err, len(recs))
			}
			return
		}
		var re []byte
		for _, r := range recs {
			re = AppendDone(re, r.ID, r.Reason)
		}
		if !bytes.Equal(re, src) {
			t.Fatalf("re-encoding %d records gives %x, not the input %x", len(recs), re, src)
		}
	})
}

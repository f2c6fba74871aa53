package record

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     uint8
		flags   uint8
		payload []byte
	}{
		{"empty_payload", 1, 0, nil},
		{"small", 2, 0x80, []byte("hello")},
		{"max_type", 255, 255, bytes.Repeat([]byte{0xAB}, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, Size(len(tc.payload))+5)
			n, err := Encode(buf, tc.typ, tc.flags, tc.payload)
			if err != nil || n != Size(len(tc.payload)) {
				t.Fatalf("Encode = %d, %v", n, err)
			}
			rec, m, err := Decode(buf)
			if err != nil || m != n {
				t.Fatalf("Decode = %d, %v", m, err)
			}
			if rec.Type != tc.typ || rec.Flags != tc.flags || !bytes.Equal(rec.Payload, tc.payload) {
				t.Fatalf("got %+v", rec)
			}
			if PeekSize(buf) != n {
				t.Fatalf("PeekSize = %d, want %d", PeekSize(buf), n)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := make([]byte, Size(10))
	if _, err := Encode(good, 3, 0, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	for _, tc := range []struct {
		name string
		src  []byte
		want error
	}{
		{"zeros", make([]byte, 64), ErrEnd},
		{"short_zeros", make([]byte, 3), ErrEnd},
		{"empty", nil, ErrEnd},
		{"short_header", good[:5], ErrShort},
		{"torn_payload", good[:HeaderSize+4], ErrShort},
		{"torn_checksum", good[:len(good)-1], ErrShort},
		{"flipped_payload", flip(HeaderSize + 2), ErrChecksum},
		{"flipped_checksum", flip(len(good) - 1), ErrChecksum},
		{"flipped_flags", flip(5), ErrChecksum},
		{"reserved_bits", flip(6), ErrBadHeader},
		{"type_zero_with_length", func() []byte { b := bytes.Clone(good); b[4] = 0; return b }(), ErrBadHeader},
		{"huge_length", func() []byte { b := bytes.Clone(good); b[3] = 0xFF; return b }(), ErrBadHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode(tc.src)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	if _, err := Encode(make([]byte, 100), 0, 0, nil); !errors.Is(err, ErrInvalidType) {
		t.Fatalf("type 0: %v", err)
	}
	if _, err := Encode(make([]byte, 10), 1, 0, []byte("0123456789")); !errors.Is(err, ErrShort) {
		t.Fatalf("short dst: %v", err)
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	buf := make([]byte, Size(100))
	if _, err := Encode(buf, 1, 0, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := Decode(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := Encode(buf, 1, 0, buf[HeaderSize:HeaderSize+100]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per encode+decode, want 0", allocs)
	}
}

// FuzzDecode checks that Decode never panics, never reads past its input,
// and that whatever it accepts re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	good := make([]byte, Size(5))
	Encode(good, 1, 0, []byte("hello"))
	f.Add(good)
	f.Add(good[:7])
	f.Add(make([]byte, 16))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, src []byte) {
		rec, n, err := Decode(src)
		if err != nil {
			return
		}
		if n > len(src) || n != Size(len(rec.Payload)) {
			t.Fatalf("size %d for %d input bytes, payload %d", n, len(src), len(rec.Payload))
		}
		out := make([]byte, n)
		if _, err := Encode(out, rec.Type, rec.Flags, rec.Payload); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, src[:n]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func BenchmarkEncode128(b *testing.B) { benchEncode(b, 128) }
func BenchmarkDecode128(b *testing.B) { benchDecode(b, 128) }

func benchEncode(b *testing.B, n int) {
	buf, p := make([]byte, Size(n)), make([]byte, n)
	b.SetBytes(int64(Size(n)))
	for b.Loop() {
		Encode(buf, 1, 0, p)
	}
}

func benchDecode(b *testing.B, n int) {
	buf := make([]byte, Size(n))
	Encode(buf, 1, 0, make([]byte, n))
	b.SetBytes(int64(Size(n)))
	for b.Loop() {
		Decode(buf)
	}
}

package measure

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestBodyRoundTrip(t *testing.T) {
	at := time.Unix(1_900_000_000, 123_456_789)
	for _, size := range []int{0, HeaderSize, 256} {
		b := EncodeBody(42, at, size)
		if want := max(size, HeaderSize); len(b) != want {
			t.Fatalf("size %d: body is %d bytes, want %d", size, len(b), want)
		}
		id, got, err := DecodeBody(b)
		if err != nil || id != 42 || !got.Equal(at) {
			t.Fatalf("size %d: decoded (%d, %v, %v), want (42, %v, nil)", size, id, got, err, at)
		}
	}
}

func TestDecodeBodyErrors(t *testing.T) {
	good := EncodeBody(1, time.Unix(1, 0), 64)
	for name, b := range map[string][]byte{
		"short":       good[:HeaderSize-1],
		"bad_magic":   append([]byte("XG"), good[2:]...),
		"bad_version": append([]byte{'H', 'G', 9}, good[3:]...),
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := DecodeBody(b); !errors.Is(err, ErrBadBody) {
				t.Fatalf("err = %v, want ErrBadBody", err)
			}
		})
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add(EncodeBody(7, time.Unix(5, 6), 32))
	f.Add([]byte("HG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, at, err := DecodeBody(b)
		if err != nil {
			return
		}
		// What decodes must encode back to the same header.
		again := EncodeBody(id, at, len(b))
		if string(again[:HeaderSize]) != string(b[:HeaderSize]) {
			t.Fatalf("re-encoded header %x, want %x", again[:HeaderSize], b[:HeaderSize])
		}
	})
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentile(t *testing.T) {
	s := []time.Duration{ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7), ms(8), ms(9), ms(10)}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, ms(5)}, {99, ms(10)}, {100, ms(10)}, {10, ms(1)}, {11, ms(2)}, {0, ms(1)}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("empty p50 = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd median %v, want 2", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even median %v, want 2.5", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("empty median %v, want 0", got)
	}
}

func TestTrackerAccounting(t *testing.T) {
	base := time.Unix(1000, 0)
	tr := NewTracker(6)
	for _, id := range []uint64{0, 1, 2, 3, 4} { // 5 is never acked
		tr.Acked(id)
	}
	tr.Acked(4) // a retried batch is acked again: still one message
	tr.Delivered(0, base, base.Add(ms(10)))
	tr.Delivered(1, base, base.Add(ms(20)))
	tr.Delivered(1, base, base.Add(ms(900))) // duplicate: no second lateness sample
	tr.Delivered(2, base, base.Add(-ms(1)))  // early
	tr.Delivered(5, base, base.Add(ms(30)))  // delivered though never acked
	tr.Delivered(99, base, base)             // not in this run
	tr.DeliveredBody([]byte("junk"), base)   // does not decode
	// 3 and 4 acked, never delivered: lost.
	r := tr.Result()
	if tr.AckedCount() != r.Acked {
		t.Errorf("AckedCount %d, Result().Acked %d", tr.AckedCount(), r.Acked)
	}
	want := Result{Messages: 6, Acked: 5, Delivered: 4, Lost: 2, Duplicates: 1, Early: 1, Unknown: 2, UnackedDelivered: 1,
		LatenessP50: ms(10), LatenessP99: ms(30), LatenessMax: ms(30)}
	if len(r.Quantiles) != QuantilePoints+1 || r.Quantiles[0] != -ms(1) || r.Quantiles[QuantilePoints/4] != -ms(1) ||
		r.Quantiles[QuantilePoints/4+1] != ms(10) || r.Quantiles[QuantilePoints] != ms(30) {
		t.Errorf("quantiles: %d points, min %v, p25 %v, above p25 %v, max %v", len(r.Quantiles),
			r.Quantiles[0], r.Quantiles[QuantilePoints/4], r.Quantiles[QuantilePoints/4+1], r.Quantiles[QuantilePoints])
	}
	r.Sorted, r.Quantiles, r.FirstDelivery, r.LastDelivery = nil, nil, time.Time{}, time.Time{}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("result\n got %+v\nwant %+v", r, want)
	}
	select {
	case <-tr.AllDelivered():
		t.Fatal("AllDelivered closed with 2 of 6 missing")
	default:
	}
	tr.Delivered(3, base, base)
	tr.Delivered(4, base, base)
	select {
	case <-tr.AllDelivered():
	default:
		t.Fatal("AllDelivered not closed once all 6 were delivered")
	}
	if got := tr.Result(); got.Lost != 0 || got.Delivered != 6 || got.FirstDelivery != base.Add(-ms(1)) || got.LastDelivery != base.Add(ms(30)) {
		t.Fatalf("after all: lost %d delivered %d first %v last %v", got.Lost, got.Delivered, got.FirstDelivery, got.LastDelivery)
	}
}

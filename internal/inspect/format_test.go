package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 128 << 20: "128.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatAgo(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{250 * time.Millisecond, "in 250ms"},
		{-40 * time.Second, "40s ago"},
		{30 * time.Minute, "in 30m"},
		{90*time.Minute + 20*time.Second, "in 1h30m"},
		{-(28*time.Hour + 5*time.Minute), "1d4h ago"},
		{48 * time.Hour, "in 2d"},
	} {
		if got := FormatAgo(now.Add(tc.d), now); got != tc.want {
			t.Errorf("FormatAgo(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestFormatBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		full bool
		cell string
	}{
		{"text", []byte("hello"), false, "hello"},
		{"empty", nil, false, ""},
		{"newline_escaped", []byte("a\tb\n"), false, `a\tb\n`},
		{"unicode", []byte("héllo ✓"), false, "héllo ✓"},
		{"binary", []byte{0, 1, 0xfe}, false, "base64:AAH+"},
		{"invalid_utf8", []byte{'a', 0xff}, false, "base64:Yf8="},
		{"control", []byte("a\x1bb"), false, "base64:YRti"},
		{"long_text", []byte(strings.Repeat("é", 50)), false, strings.Repeat("é", MaxBody) + "…"},
		{"long_text_full", []byte(strings.Repeat("é", 50)), true, strings.Repeat("é", 50)},
		{"long_binary", bytes.Repeat([]byte{0xff}, 60), false, "base64:" + strings.Repeat("/", MaxBody) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := FormatBody(tc.body, tc.full)
			if got := b.cell(); got != tc.cell {
				t.Errorf("cell = %q, want %q", got, tc.cell)
			}
			if b.Size != len(tc.body) {
				t.Errorf("Size = %d, want %d", b.Size, len(tc.body))
			}
		})
	}
}

func TestTable(t *testing.T) {
	tb := newTable("NAME", ">N", "NOTE")
	tb.add("a", "1", "x")
	tb.add("longer", "100", "")
	var out bytes.Buffer
	if err := tb.write(&out); err != nil {
		t.Fatal(err)
	}
	want := "NAME      N  NOTE\na         1  x\nlonger  100\n"
	if out.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", out.String(), want)
	}
}

func TestBar(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	b := NewBar(&out, 500*time.Millisecond, func() time.Time { return now })
	b.Begin("verify", 100)
	b.Add(10)
	now = now.Add(400 * time.Millisecond)
	b.Add(10)
	if out.Len() != 0 {
		t.Fatalf("a scan shorter than the delay drew %q", out.String())
	}
	now = now.Add(200 * time.Millisecond)
	b.Add(10)
	if !strings.Contains(out.String(), "verify") {
		t.Fatalf("after the delay the bar shows %q; want its description", out.String())
	}
	b.End()
	// A new scan starts quiet again.
	out.Reset()
	b.Begin("segments", 10)
	b.Add(1)
	b.End()
	if out.Len() != 0 {
		t.Fatalf("a new quick scan drew %q", out.String())
	}
}

func TestStates(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 30, 0, 0, time.UTC)
	o := Options{Now: now}
	seg := func(start string, entries, done int, err error) *Segment {
		st, _ := time.Parse(time.RFC3339, start)
		return &Segment{Start: st, Duration: time.Hour, Entries: entries, Done: done, Pending: entries - done, Err: err}
	}
	for _, tc := range []struct {
		name string
		s    *Segment
		lead time.Duration
		want State
	}{
		{"current", seg("2026-11-30T04:00:00Z", 3, 1, nil), 0, Loaded},
		{"within_lead", seg("2026-11-30T04:40:00Z", 3, 0, nil), 0, Loaded},
		{"before_lead", seg("2026-11-30T04:41:00Z", 3, 0, nil), 0, Future},
		{"longer_lead", seg("2026-11-30T05:00:00Z", 3, 0, nil), 30 * time.Minute, Loaded},
		{"over", seg("2026-11-30T03:00:00Z", 3, 1, nil), 0, Overdue},
		{"over_at_end", seg("2026-11-30T03:30:00Z", 3, 1, nil), 0, Overdue},
		{"all_done", seg("2026-11-30T03:00:00Z", 3, 3, nil), 0, Done},
		{"empty", seg("2026-11-30T06:00:00Z", 0, 0, nil), 0, Empty},
		{"damaged", seg("2026-11-30T06:00:00Z", 3, 0, errStop), 0, Damaged},
	} {
		o.PreloadLead = tc.lead
		if got := o.state(tc.s); got != tc.want {
			t.Errorf("%s: state %q, want %q", tc.name, got, tc.want)
		}
	}
}

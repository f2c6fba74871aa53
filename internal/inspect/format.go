package inspect

import (
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// FormatSize prints a byte count the way people read it: 512 B, 4.0 KiB,
// 1.5 MiB.
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// FormatAgo prints how far t is from now, in the largest fitting units:
// "in 25m", "3h10m ago", "now".
func FormatAgo(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "in " + formatSpan(d)
	}
	return formatSpan(-d) + " ago"
}

// formatSpan prints a positive duration with at most two units: 3d4h,
// 2h5m, 40s, 250ms.
func formatSpan(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= day:
		return two(d, day, "d", time.Hour, "h")
	case d >= time.Hour:
		return two(d, time.Hour, "h", time.Minute, "m")
	case d >= time.Minute:
		return two(d, time.Minute, "m", time.Second, "s")
	case d >= time.Second:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

func two(d, big time.Duration, bigName string, small time.Duration, smallName string) string {
	a, b := d/big, (d%big)/small
	if b == 0 {
		return fmt.Sprintf("%d%s", a, bigName)
	}
	return fmt.Sprintf("%d%s%d%s", a, bigName, b, smallName)
}

// timeLayout is how times are printed in tables: UTC, to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// Body is a message body made fit for a terminal or JSON.
type Body struct {
	Text      string // the body as text, if it is printable UTF-8
	Base64    string // else standard base64
	Size      int    // the body's length in bytes
	Truncated bool   // Text or Base64 holds only the start of the body
}

// MaxBody is how many characters of a body are shown without --full.
const MaxBody = 40

// FormatBody returns b as text when it is valid UTF-8 made of printable
// characters (spaces, tabs and newlines included), else as base64; unless
// full, at most MaxBody characters of it.
func FormatBody(b []byte, full bool) Body {
	out := Body{Size: len(b)}
	if printable(b) {
		s := string(b)
		if !full && utf8.RuneCountInString(s) > MaxBody {
			s = string([]rune(s)[:MaxBody])
			out.Truncated = true
		}
		out.Text = s
		return out
	}
	s := base64.StdEncoding.EncodeToString(b)
	if !full && len(s) > MaxBody {
		s = s[:MaxBody]
		out.Truncated = true
	}
	out.Base64 = s
	return out
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

// cell renders a Body for a table cell: text with control characters
// escaped, base64 marked as such, "…" after a truncated one.
func (b Body) cell() string {
	var s string
	if b.Base64 != "" || b.Text == "" && b.Size > 0 {
		s = "base64:" + b.Base64
	} else {
		s = strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(b.Text)
	}
	if b.Truncated {
		s += "…"
	}
	return s
}

// table writes aligned columns: text columns left-aligned, the columns
// marked numeric right-aligned, two spaces between columns, no trailing
// spaces.
type table struct {
	head    []string
	numeric []bool
	rows    [][]string
}

func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		num := strings.HasPrefix(c, ">")
		t.head = append(t.head, strings.TrimPrefix(c, ">"))
		t.numeric = append(t.numeric, num)
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	width := make([]int, len(t.head))
	all := append([][]string{t.head}, t.rows...)
	for _, r := range all {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var sb strings.Builder
	for _, r := range all {
		line := make([]string, len(r))
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.numeric[i] {
				line[i] = pad + c
			} else if i < len(r)-1 {
				line[i] = c + pad
			} else {
				line[i] = c
			}
		}
		sb.WriteString(strings.TrimRight(strings.Join(line, "  "), " "))
		sb.WriteByte('\n')
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

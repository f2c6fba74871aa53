package enginebench

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar is a progress bar, or nothing when the run has no Progress writer.
// A nil *Bar is valid and does nothing. Safe for concurrent use.
type Bar struct{ pb *progressbar.ProgressBar }

// NewBar is a bar counting to total messages on w; nil when w is nil.
func NewBar(w io.Writer, total int, what string) *Bar {
	if w == nil {
		return nil
	}
	return &Bar{pb: progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
	)}
}

// Add counts n more.
func (b *Bar) Add(n int) {
	if b != nil {
		b.pb.Add(n)
	}
}

// Set sets the count.
func (b *Bar) Set(n int64) {
	if b != nil {
		b.pb.Set64(n)
	}
}

// Done removes the bar from the terminal.
func (b *Bar) Done() {
	if b != nil {
		b.pb.Finish()
		b.pb.Clear()
	}
}

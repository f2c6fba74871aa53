package enginebench

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// bar is a progress bar, or nothing when the run has no Progress writer.
// A nil *bar is valid and does nothing. Safe for concurrent use.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int, what string) *bar {
	if w == nil {
		return nil
	}
	return &bar{pb: progressbar.NewOptions64(int64(total),
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

func (b *bar) add(n int) {
	if b != nil {
		b.pb.Add(n)
	}
}

func (b *bar) set(n int64) {
	if b != nil {
		b.pb.Set64(n)
	}
}

// done removes the bar from the terminal.
func (b *bar) done() {
	if b != nil {
		b.pb.Finish()
		b.pb.Clear()
	}
}

package inspect

import (
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar is a Progress that draws a progress bar on a terminal, but only for
// a scan that is still running after a delay: quick commands print
// nothing extra. It is cleared when the scan ends. Safe for concurrent use.
type Bar struct {
	w     io.Writer
	delay time.Duration
	now   func() time.Time

	mu      sync.Mutex
	what    string
	total   int64
	done    int64
	started time.Time
	pb      *progressbar.ProgressBar // nil until the delay has passed
}

// NewBar returns a Bar writing to w (a terminal: the caller checks) that
// appears once a scan has run for delay, measured on now.
func NewBar(w io.Writer, delay time.Duration, now func() time.Time) *Bar {
	return &Bar{w: w, delay: delay, now: now}
}

// Begin starts a scan of total units.
func (b *Bar) Begin(what string, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLocked()
	b.what, b.total, b.done, b.started = what, total, 0, b.now()
}

// Add records n more units done, and draws the bar if the scan has taken
// longer than the delay.
func (b *Bar) Add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if b.pb == nil {
		if b.now().Sub(b.started) < b.delay || b.started.IsZero() {
			return
		}
		b.pb = progressbar.NewOptions64(b.total,
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(b.what),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionClearOnFinish(),
		)
	}
	b.pb.Set64(b.done)
}

// End finishes the scan and clears the bar.
func (b *Bar) End() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLocked()
}

func (b *Bar) endLocked() {
	if b.pb != nil {
		b.pb.Finish()
		b.pb.Clear()
		b.pb = nil
	}
	b.started = time.Time{}
}

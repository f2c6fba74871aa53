package measure

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
)

// Tracker accounts for one run's messages, numbered 0 to n-1: which the
// system acknowledged to a producer, and which reached a consumer, when and
// how often. Lost, duplicates and early are deliverycheck's, the one
// definition the server's benchmarks and the crash harness share; the
// Tracker adds lateness and times. It is safe for concurrent use by
// producers and consumers.
type Tracker struct {
	counts *deliverycheck.Counter

	mu        sync.Mutex
	lateness  []time.Duration // guarded by mu: first delivery of each ID
	first     time.Time       // guarded by mu: earliest delivery
	last      time.Time       // guarded by mu: latest first delivery
	done      chan struct{}   // closed when every ID was delivered once
	closeOnce sync.Once
}

// NewTracker returns a Tracker of n messages.
func NewTracker(n int) *Tracker {
	return &Tracker{
		counts:   deliverycheck.New(n, 0),
		lateness: make([]time.Duration, 0, n),
		done:     make(chan struct{}),
	}
}

// Acked records that the system answered a producer OK for id.
func (t *Tracker) Acked(id uint64) {
	if id < uint64(t.counts.Len()) {
		t.counts.Acked(int(id), int(id)+1)
	}
}

// Delivered records that a consumer got id, due at deliverAt, at time at.
func (t *Tracker) Delivered(id uint64, deliverAt, at time.Time) {
	if !t.counts.Delivered(id, deliverAt, at) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lateness = append(t.lateness, at.Sub(deliverAt))
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.last) {
		t.last = at
	}
	if len(t.lateness) == t.counts.Len() {
		t.closeOnce.Do(func() { close(t.done) })
	}
}

// DeliveredBody decodes body and records it as Delivered at time at; a
// body that does not decode counts as unknown.
func (t *Tracker) DeliveredBody(body []byte, at time.Time) {
	id, due, err := DecodeBody(body)
	if err != nil {
		t.counts.Unknown()
		return
	}
	t.Delivered(id, due, at)
}

// AllDelivered is closed once every one of the n messages was delivered.
func (t *Tracker) AllDelivered() <-chan struct{} { return t.done }

// Unique is how many distinct messages were delivered so far.
func (t *Tracker) Unique() int { return int(t.counts.Distinct()) }

// AckedCount is how many distinct messages were acked so far.
func (t *Tracker) AckedCount() int { return int(t.counts.Tally().Acked) }

// Result is what a Tracker counted.
type Result struct {
	Messages int `json:"messages"`
	// Acked: the system answered the producer OK.
	Acked int `json:"acked"`
	// Delivered: distinct messages that reached a consumer.
	Delivered int `json:"delivered"`
	// Lost: acked and never delivered.
	Lost int `json:"lost"`
	// Duplicates: deliveries beyond the first of a message.
	Duplicates int `json:"duplicates"`
	// Early: deliveries before the message's deliverAt.
	Early int `json:"early"`
	// Unknown: deliveries of IDs not in this run or of bodies that did not decode.
	Unknown int `json:"unknown"`
	// UnackedDelivered: delivered though the producer never got an OK for it
	// (its request failed, e.g. in a crash, and was not retried with success).
	UnackedDelivered int `json:"unacked_delivered"`
	// Lateness of first deliveries: delivery - deliverAt.
	LatenessP50, LatenessP99, LatenessMax time.Duration
	// FirstDelivery and LastDelivery are the earliest and latest first deliveries.
	FirstDelivery, LastDelivery time.Time
	// Sorted lateness of every first delivery, for a CDF.
	Sorted []time.Duration `json:"-"`
	// Quantiles of Sorted at 0, 1/QuantilePoints, ..., 1 (nearest rank;
	// the first is the minimum): the CDF kept in the raw JSON, so that a
	// report made later from several runs' files can draw it.
	Quantiles []time.Duration `json:"quantiles,omitempty"`
}

// QuantilePoints is how many steps Result.Quantiles has.
const QuantilePoints = 400

// Result returns what was counted so far.
func (t *Tracker) Result() Result {
	c := t.counts.Tally()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := Result{Messages: int(c.Messages), Acked: int(c.Acked), Delivered: int(c.Delivered), Lost: int(c.Lost),
		Duplicates: int(c.Duplicates), Early: int(c.Early), Unknown: int(c.Unknown), UnackedDelivered: int(c.UnackedDelivered),
		FirstDelivery: t.first, LastDelivery: t.last}
	r.Sorted = slices.Clone(t.lateness)
	slices.Sort(r.Sorted)
	r.LatenessP50 = Percentile(r.Sorted, 50)
	r.LatenessP99 = Percentile(r.Sorted, 99)
	r.LatenessMax = Percentile(r.Sorted, 100)
	if len(r.Sorted) > 0 {
		r.Quantiles = make([]time.Duration, QuantilePoints+1)
		for k := range r.Quantiles {
			r.Quantiles[k] = Percentile(r.Sorted, max(100*float64(k)/QuantilePoints, 1e-9))
		}
	}
	return r
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It is 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Median returns the median of xs (the mean of the middle two for an even
// count), 0 for none. NaNs are not expected.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

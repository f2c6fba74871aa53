package server

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/buildinfo"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/queue"
)

// Metrics collects what /metrics serves and what Stats reports. It is the
// engine's Observer: pass it as engine.Options.Observer and as
// Options.Metrics. Its methods may be called from any goroutine and never
// block for long.
type Metrics struct {
	reg             *prometheus.Registry
	lateness        prometheus.Histogram
	scheduleLatency prometheus.Histogram
	fsync           prometheus.Histogram

	scheduled counterMap // by topic: accepted by Schedule and ScheduleBatch
	delivered counterMap // by topic: done-records durable (engine Done)
	retried   counterMap // by topic: failed sink calls (engine Retried)
	cancelled atomic.Int64
	recent    latencyRing
	fsyncs    latencyRing // recent commitlog fsyncs, ms
	series    topicSeries // which topics have series of their own

	src     atomic.Pointer[sources] // set by New
	streams atomic.Pointer[limiter] // set by New: long polls and streams open
	build   buildinfo.Info
	rpc     *grpcprom.ServerMetrics // per-RPC metrics (rpcmetrics.go)
}

var _ engine.Observer = (*Metrics)(nil)

// Horizons of the pending gauge: a message due within horizons[i] of now
// (and not within the one before) counts under horizonNames[i]; later ones
// count under "beyond".
var (
	horizons     = []time.Duration{time.Minute, 5 * time.Minute, time.Hour, units.Day}
	horizonNames = []string{"1m", "5m", "1h", "1d", "beyond"}
)

var (
	descScheduled    = prometheus.NewDesc("hourglass_scheduled_total", "Messages accepted by Schedule and ScheduleBatch since the server started.", []string{"topic"}, nil)
	descDelivered    = prometheus.NewDesc("hourglass_delivered_total", "Due messages handed to the built-in queue whose delivery is durably recorded.", []string{"topic"}, nil)
	descSinkRetries  = prometheus.NewDesc("hourglass_sink_retries_total", "Messages of failed hand-overs to the queue, to be retried.", []string{"topic"}, nil)
	descCancelled    = prometheus.NewDesc("hourglass_cancelled_total", "Cancel calls answered cancelled (not by topic: a cancel names only an ID).", nil, nil)
	descAppended     = prometheus.NewDesc("hourglass_queue_appended_total", "Messages appended to a queue topic: delivered by the engine, or dead-lettered into it.", []string{"topic"}, nil)
	descAcked        = prometheus.NewDesc("hourglass_acked_total", "Acks that succeeded.", []string{"topic"}, nil)
	descNacked       = prometheus.NewDesc("hourglass_nacked_total", "Nacks that succeeded.", []string{"topic"}, nil)
	descRedelivered  = prometheus.NewDesc("hourglass_redelivered_total", "Messages handed out again: after an expired lease, a Nack without delay, or a restart.", []string{"topic"}, nil)
	descExpired      = prometheus.NewDesc("hourglass_lease_expired_total", "Leases that ran out before an Ack or Nack.", []string{"topic"}, nil)
	descDeadLettered = prometheus.NewDesc("hourglass_dead_lettered_total", "Messages moved to <topic>.dlq after the maximum attempts.", []string{"topic"}, nil)
	descPastExpiry   = prometheus.NewDesc("hourglass_expired_total", "Messages dead-lettered with reason expired: past their expiry (expire_at, ttl_ms) when a Receive reached them, or not acked by then under the policy expiry_unacked.", []string{"topic"}, nil)
	descExpiryDrop   = prometheus.NewDesc("hourglass_expired_dropped_total", "Messages past their expiry dropped instead of dead-lettered (the policy expiry_drop).", []string{"topic"}, nil)
	descReady        = prometheus.NewDesc("hourglass_queue_ready", "Due messages waiting to be received.", []string{"topic"}, nil)
	descLeased       = prometheus.NewDesc("hourglass_queue_leased", "Received messages not yet acked, nacked or expired.", []string{"topic"}, nil)
	descLag          = prometheus.NewDesc("hourglass_queue_lag", "Consumer lag: due messages in the topic not yet acked (waiting to be received, or leased).", []string{"topic"}, nil)
	descOldestReady  = prometheus.NewDesc("hourglass_queue_oldest_ready_age_seconds",
		"Age of the oldest due message waiting to be received (now minus its delivery time; 0 if none). Under topic=\"(other)\" the oldest of those topics.", []string{"topic"}, nil)
	descDeadLetters = prometheus.NewDesc("hourglass_dead_letters", "Dead letters held in <topic>.dlq (waiting or leased), by the topic they came from.", []string{"topic"}, nil)
	descPending     = prometheus.NewDesc("hourglass_pending",
		"Scheduled messages not yet due, by how far ahead they are due: 1m = within a minute (overdue included), 5m = 1 to 5 min, 1h = 5 min to 1 h, 1d = 1 h to 1 day, beyond = later. "+
			"Approximate: counted per schedule bucket and spread evenly over the bucket's remaining time; a bucket not in memory counts the entries written to it, cancelled ones included.",
		[]string{"horizon"}, nil)
	descPendingLoaded = prometheus.NewDesc("hourglass_engine_pending_loaded", "Messages in the in-memory wheel (loaded buckets), exact.", nil, nil)
	descInflight      = prometheus.NewDesc("hourglass_engine_inflight", "Messages handed to the queue, not yet confirmed.", nil, nil)
	descLoaded        = prometheus.NewDesc("hourglass_engine_loaded_buckets", "Schedule buckets in memory.", nil, nil)
	descSegments      = prometheus.NewDesc("hourglass_schedule_segments", "Schedule segments on disk.", nil, nil)
	descReputLag      = prometheus.NewDesc("hourglass_reput_lag_bytes", "Commitlog bytes not yet routed into the schedule segments.", nil, nil)
	descCorrupt       = prometheus.NewDesc("hourglass_corrupt_entries_total", "Damaged schedule entries or regions found when a bucket loads or an entry is due, unreadable segments, and buckets held for a damaged or missing dispatch log.", nil, nil)
	descEngineExpired = prometheus.NewDesc("hourglass_engine_expired_total", "Messages past their expiry when due, not handed to a webhook or NATS sink but recorded dead-lettered.", nil, nil)
	descUnconfirmed   = prometheus.NewDesc("hourglass_unconfirmed_total", "Done-records that failed to be written (those messages are delivered again after a restart).", nil, nil)
	descEngineSched   = prometheus.NewDesc("hourglass_engine_scheduled_total", "Messages the engine accepted (all producers, retries of Nacks included).", nil, nil)
	descDiskBytes     = prometheus.NewDesc("hourglass_disk_bytes", "Bytes of files under the data directory, by log: commitlog, schedule (segments and dispatch logs), queue.", []string{"log"}, nil)
	descStalled       = prometheus.NewDesc("hourglass_stage_stalled", "1 while a stage of the data path (route, load, fire) is failing and retrying, else 0; past the stall bound /readyz is 503.", []string{"stage"}, nil)
	descStreamsOpen   = prometheus.NewDesc("hourglass_streams_open", "Long polls (Receive with a wait) and streams open now, on every protocol: what --max-streams bounds.", nil, nil)
	descBuildInfo     = prometheus.NewDesc("hourglass_build_info", "1, labelled with the version, the VCS revision and the Go version of the running server (internal/buildinfo).",
		[]string{"version", "revision", "goversion"}, nil)
	descDiskFiles = prometheus.NewDesc("hourglass_disk_files", "Files under the data directory, by log: commitlog segments, schedule segments and dispatch logs, queue logs.", []string{"log"}, nil)
)

// NewMetrics returns empty metrics with their own registry, which also
// holds the Go runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		build: buildinfo.Get(),
		rpc:   newRPCMetrics(),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_lateness_seconds",
			Help:    "How late a due message was handed to the queue after its delivery time (the server's clock).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60, 300},
		}),
		scheduleLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_schedule_duration_seconds",
			Help:    "Time the engine took to accept one Schedule or ScheduleBatch call, the commitlog fsync included under --fsync always.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hourglass_commitlog_fsync_seconds",
			Help:    "Duration of each commitlog fsync (one per group commit under --fsync always).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	m.reg.MustRegister(m.lateness, m.scheduleLatency, m.fsync, m,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Fsynced records one commitlog fsync; pass it as engine.Options.OnFsync.
func (m *Metrics) Fsynced(d time.Duration) {
	m.fsync.Observe(d.Seconds())
	m.fsyncs.add(float64(d) / float64(time.Millisecond))
}

// Fired implements engine.Observer.
func (m *Metrics) Fired(topic string, lateness time.Duration) {
	// Handed over early (the engine's HandoffLead) counts as on time: the
	// queue holds the message until its deliverAt.
	lateness = max(lateness, 0)
	m.lateness.Observe(lateness.Seconds())
	m.recent.add(float64(lateness) / float64(time.Millisecond))
}

// Done implements engine.Observer.
func (m *Metrics) Done(topic string, n int) { m.delivered.add(topic, n) }

// Retried implements engine.Observer.
func (m *Metrics) Retried(topic string, n int, err error) { m.retried.add(topic, n) }

func (m *Metrics) attach(s *sources) { m.src.Store(s) }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descScheduled, descDelivered, descSinkRetries, descCancelled, descAppended,
		descAcked, descNacked, descRedelivered, descExpired, descDeadLettered, descPastExpiry, descExpiryDrop, descReady, descLeased, descLag,
		descOldestReady, descDeadLetters, descPending,
		descPendingLoaded, descInflight, descLoaded, descSegments, descReputLag, descCorrupt, descUnconfirmed, descEngineExpired,
		descEngineSched, descDiskBytes, descDiskFiles, descStalled, descBuildInfo, descStreamsOpen} {
		ch <- d
	}
	m.rpc.Describe(ch)
}

// Collect implements prometheus.Collector: it reads the engine's and the
// queue's counters at scrape time.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// Per-topic series: at most MaxTopicSeries topics have their own
	// label, the rest are summed under OtherTopics (series.label).
	byLabel := func(d *prometheus.Desc, snap map[string]int64) {
		sum := map[string]int64{}
		for topic, v := range snap {
			sum[m.series.label(topic)] += v
		}
		for l, v := range sum {
			counter(d, float64(v), l)
		}
	}
	byLabel(descScheduled, m.scheduled.snapshot())
	byLabel(descDelivered, m.delivered.snapshot())
	byLabel(descSinkRetries, m.retried.snapshot())
	counter(descCancelled, float64(m.cancelled.Load()))
	rev := cmp.Or(m.build.Revision, "unknown")
	if m.build.Modified {
		rev += "+modified"
	}
	gauge(descBuildInfo, 1, m.build.Version, rev, m.build.GoVersion)
	if l := m.streams.Load(); l != nil {
		gauge(descStreamsOpen, float64(l.open()))
	}
	m.rpc.Collect(ch)
	src := m.src.Load()
	if src == nil {
		return
	}
	nowMs := src.eng.Now().UnixMilli()
	qs := map[string]queue.TopicStats{}
	oldest := map[string]int64{} // by label: the oldest OldestReady
	dead := map[string]int64{}   // by the origin topic's label
	for topic, s := range src.q.Stats() {
		if origin, ok := strings.CutSuffix(topic, queue.DLQSuffix); ok && origin != "" {
			dead[m.series.label(origin)] += s.Backlog + int64(s.Leased)
		} else {
			dead[m.series.label(topic)] += 0 // a series, 0 until something dies
		}
		l := m.series.label(topic)
		if o, ok := oldest[l]; !ok || s.OldestReady != 0 && (o == 0 || s.OldestReady < o) {
			oldest[l] = s.OldestReady
		}
		a := qs[l]
		a.Delivered += s.Delivered
		a.Acked += s.Acked
		a.Nacked += s.Nacked
		a.Redelivered += s.Redelivered
		a.Expired += s.Expired
		a.DeadLettered += s.DeadLettered
		a.PastExpiry += s.PastExpiry
		a.ExpiryDropped += s.ExpiryDropped
		a.Backlog += s.Backlog
		a.Leased += s.Leased
		qs[l] = a
	}
	for topic, s := range qs {
		counter(descAppended, float64(s.Delivered), topic)
		counter(descAcked, float64(s.Acked), topic)
		counter(descNacked, float64(s.Nacked), topic)
		counter(descRedelivered, float64(s.Redelivered), topic)
		counter(descExpired, float64(s.Expired), topic)
		counter(descDeadLettered, float64(s.DeadLettered), topic)
		counter(descPastExpiry, float64(s.PastExpiry), topic)
		counter(descExpiryDrop, float64(s.ExpiryDropped), topic)
		gauge(descReady, float64(s.Backlog), topic)
		gauge(descLeased, float64(s.Leased), topic)
		gauge(descLag, float64(s.Backlog+int64(s.Leased)), topic)
		age := 0.0
		if o := oldest[topic]; o != 0 {
			age = float64(max(nowMs-o, 0)) / 1000
		}
		gauge(descOldestReady, age, topic)
	}
	for topic, n := range dead {
		gauge(descDeadLetters, float64(n), topic)
	}
	es := src.eng.Stats()
	gauge(descPendingLoaded, float64(es.Pending))
	gauge(descInflight, float64(es.Inflight))
	gauge(descLoaded, float64(es.Loaded))
	gauge(descSegments, float64(es.Segments))
	gauge(descReputLag, float64(es.ReputLag))
	counter(descCorrupt, float64(es.Corrupt))
	counter(descUnconfirmed, float64(es.Unconfirmed))
	counter(descEngineExpired, float64(es.Expired))
	counter(descEngineSched, float64(es.Scheduled))
	stalled := map[string]float64{engine.StageRoute: 0, engine.StageLoad: 0, engine.StageFire: 0}
	for _, st := range src.eng.Stalls() {
		stalled[st.Stage] = 1
	}
	for stage, v := range stalled {
		gauge(descStalled, v, stage)
	}
	now := src.eng.Now()
	if buckets, err := src.pending(now); err == nil {
		h := byHorizon(buckets, now.UnixMilli())
		for i, name := range horizonNames {
			gauge(descPending, h[i], name)
		}
	}
	if src.dataDir != "" {
		for _, u := range diskUsage(src.dataDir) {
			gauge(descDiskBytes, float64(u.bytes), u.log)
			gauge(descDiskFiles, float64(u.files), u.log)
		}
	}
}

// byHorizon spreads each bucket's count evenly over what is left of it
// and adds it up by horizon, in whole messages: each bucket's share of a
// horizon is rounded so that the shares add up to its count (largest
// remainder).
func byHorizon(buckets []bucketCount, nowMs int64) []float64 {
	out := make([]float64, len(horizonNames))
	edges := make([]int64, len(horizons))
	for i, h := range horizons {
		edges[i] = nowMs + h.Milliseconds()
	}
	for _, b := range buckets {
		lo, hi := max(b.start, nowMs), b.end
		if hi <= lo || b.count == 0 {
			out[0] += float64(b.count) // overdue: due within the first horizon
			continue
		}
		span := float64(hi - lo)
		prev := nowMs
		share := make([]float64, len(out))
		whole := make([]float64, len(out))
		left := b.count
		for i := 0; i <= len(edges); i++ {
			end := int64(1<<63 - 1)
			if i < len(edges) {
				end = edges[i]
			}
			a, z := max(lo, prev), min(hi, end)
			if z > a {
				share[i] = float64(b.count) * float64(z-a) / span
				whole[i] = math.Floor(share[i])
				left -= int64(whole[i])
			}
			prev = end
		}
		// The messages the floors left out go to the largest remainders.
		for ; left > 0; left-- {
			best := -1
			for i := range share {
				if r := share[i] - whole[i]; r > 0 && (best < 0 || r > share[best]-whole[best]) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			whole[best]++
			share[best] = whole[best] // its remainder is used
		}
		for i := range out {
			out[i] += whole[i]
		}
	}
	return out
}

// MaxTopicSeries is how many topics have per-topic series of their own on
// /metrics: the first this many topics seen since the server started
// (a topic keeps its series once it has one, so that counters stay
// monotonic). The others are summed under the label OtherTopics. Stats
// reports every topic.
const MaxTopicSeries = 100

// OtherTopics is the topic label of the series that sum the topics beyond
// MaxTopicSeries. It is not a valid topic name.
const OtherTopics = "(other)"

// topicSeries gives topics their label on /metrics.
type topicSeries struct {
	mu    sync.Mutex
	named map[string]bool // guarded by mu; at most MaxTopicSeries
}

// label returns topic's label: the topic itself if it has a series of its
// own or there is room for one, otherwise OtherTopics.
func (t *topicSeries) label(topic string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.named[topic] {
		return topic
	}
	if len(t.named) >= MaxTopicSeries {
		return OtherTopics
	}
	if t.named == nil {
		t.named = map[string]bool{}
	}
	t.named[topic] = true
	return topic
}

// counterMap holds one counter per topic.
type counterMap struct{ m sync.Map } // string -> *atomic.Int64

func (c *counterMap) add(topic string, n int) {
	v, ok := c.m.Load(topic)
	if !ok {
		v, _ = c.m.LoadOrStore(topic, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(int64(n))
}

func (c *counterMap) snapshot() map[string]int64 {
	out := map[string]int64{}
	c.m.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// topicStats is one topic's row of Stats.
type topicStats struct {
	name      string
	q         queue.TopicStats
	scheduled int64
}

// topics merges the queue's topics with the topics scheduled to, sorted
// by name.
func (m *Metrics) topics(qs map[string]queue.TopicStats) []topicStats {
	sched := m.scheduled.snapshot()
	out := make([]topicStats, 0, len(qs))
	for name, s := range qs {
		out = append(out, topicStats{name: name, q: s, scheduled: sched[name]})
	}
	for name, n := range sched {
		if _, ok := qs[name]; !ok {
			out = append(out, topicStats{name: name, scheduled: n})
		}
	}
	slices.SortFunc(out, func(a, b topicStats) int { return cmp.Compare(a.name, b.name) })
	return out
}

// latencyRing keeps the last ringSize latenesses for Stats' percentiles.
type latencyRing struct {
	mu   sync.Mutex
	buf  [ringSize]float64 // ms; guarded by mu
	n    int               // filled slots; guarded by mu
	next int               // guarded by mu
}

const ringSize = 4096

func (r *latencyRing) add(ms float64) {
	r.mu.Lock()
	r.buf[r.next] = ms
	r.next = (r.next + 1) % ringSize
	r.n = min(r.n+1, ringSize)
	r.mu.Unlock()
}

func (r *latencyRing) summary() *hourglassv1.Lateness {
	r.mu.Lock()
	v := append([]float64(nil), r.buf[:r.n]...)
	r.mu.Unlock()
	out := &hourglassv1.Lateness{Count: int64(len(v))}
	if len(v) == 0 {
		return out
	}
	sort.Float64s(v)
	q := func(p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))] }
	out.P50Ms, out.P90Ms, out.P99Ms, out.MaxMs = q(.50), q(.90), q(.99), v[len(v)-1]
	return out
}

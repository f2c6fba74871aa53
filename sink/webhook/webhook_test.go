package webhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

var quiet = slog.New(slog.DiscardHandler)

// hit is one POST a test receiver got.
type hit struct {
	at                           time.Time
	id, origin, topic, deliverAt string
	attempt                      int
	body, custom                 string
}

// receiver answers POSTs with status(attempt, body) and records them.
type receiver struct {
	mu     sync.Mutex
	hits   []hit
	status func(attempt int, body string) int
	got    chan struct{}
}

func newReceiver(t *testing.T, status func(int, string) int) (*receiver, *httptest.Server) {
	r := &receiver{status: status, got: make(chan struct{}, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		a, _ := strconv.Atoi(req.Header.Get("Hourglass-Attempt"))
		h := hit{at: time.Now(), id: req.Header.Get("Hourglass-Id"), origin: req.Header.Get("Hourglass-Origin-Id"),
			topic: req.Header.Get("Hourglass-Topic"), deliverAt: req.Header.Get("Hourglass-Deliver-At"),
			attempt: a, body: string(b), custom: req.Header.Get("X-Custom")}
		r.mu.Lock()
		r.hits = append(r.hits, h)
		r.mu.Unlock()
		w.WriteHeader(r.status(a, string(b)))
		r.got <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return r, srv
}

// waitHits waits (bounded) until the receiver has n hits.
func (r *receiver) waitHits(t *testing.T, n int) []hit {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		if len(r.hits) >= n {
			out := append([]hit(nil), r.hits...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("waited 20s for %d POSTs; got %d", n, len(r.hits))
		}
	}
}

type deadLetters struct {
	mu  sync.Mutex
	got []string // topic/body/attempt
	ch  chan struct{}
}

func (d *deadLetters) add(_ context.Context, topic string, del engine.Delivery) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, topic+"/"+string(del.Message.Body)+"/"+strconv.Itoa(int(del.Message.Attempt)))
	if d.ch != nil {
		d.ch <- struct{}{}
	}
	return nil
}

func (d *deadLetters) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

// open starts a real engine (fsync none) whose sink is a webhook Sink with
// routes; retries come back after 20 ms.
func open(t *testing.T, routes []Route, maxAttempts int, dl *deadLetters) *engine.Engine {
	t.Helper()
	var eng *engine.Engine
	s, err := New(Options{Routes: routes, MaxAttempts: maxAttempts, Logger: quiet,
		Backoff:    func(int) time.Duration { return 20 * time.Millisecond },
		DeadLetter: dl.add,
		Reschedule: func(ctx context.Context, r engine.Request) (message.ID, error) { return eng.Schedule(ctx, r) }})
	if err != nil {
		t.Fatal(err)
	}
	eng, err = engine.Open(engine.Options{Dir: t.TempDir(), Sink: s, Fsync: commitlog.SyncNone, Logger: quiet,
		SegmentDuration: 10 * time.Second, CommitlogSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	<-eng.Ready()
	return eng
}

func TestPostsOnTimeWithHeaders(t *testing.T) {
	r, srv := newReceiver(t, func(int, string) int { return http.StatusNoContent })
	eng := open(t, []Route{{Pattern: "other", URL: "http://127.0.0.1:1/never"}, {Pattern: "ord*", URL: srv.URL}}, 3, &deadLetters{})
	ids := map[string]string{}
	for i := range 20 {
		id, err := eng.Schedule(context.Background(), engine.Request{Topic: "orders", Body: []byte("m" + strconv.Itoa(i)),
			Delay: time.Duration(i*7) * time.Millisecond, Headers: []message.Header{{Key: []byte("X-Custom"), Value: []byte("v")}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[id.String()] = "m" + strconv.Itoa(i)
	}
	hits := r.waitHits(t, 20)
	for _, h := range hits {
		id, err := message.ParseID(h.id)
		if err != nil {
			t.Fatalf("Hourglass-Id %q: %v", h.id, err)
		}
		if ids[h.id] != h.body || h.origin != h.id || h.topic != "orders" || h.attempt != 0 || h.custom != "v" {
			t.Errorf("POST %+v: body, origin, topic, attempt or header wrong", h)
		}
		if h.at.Before(id.Time()) {
			t.Errorf("%s posted %v before its time", h.id, id.Time().Sub(h.at))
		}
		if want := id.Time().UTC().Format("2006-01-02T15:04:05.000Z07:00"); h.deliverAt != want {
			t.Errorf("Hourglass-Deliver-At %q, want %q", h.deliverAt, want)
		}
		delete(ids, h.id)
	}
	if len(ids) != 0 {
		t.Errorf("not posted: %v", ids)
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	// Fails the first two attempts of each message.
	r, srv := newReceiver(t, func(attempt int, _ string) int {
		if attempt < 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	dl := &deadLetters{}
	eng := open(t, []Route{{Pattern: "*", URL: srv.URL}}, 5, dl)
	id, err := eng.Schedule(context.Background(), engine.Request{Topic: "jobs", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	hits := r.waitHits(t, 3)
	for i, h := range hits {
		if h.attempt != i || h.origin != id.String() || h.body != "x" {
			t.Errorf("POST %d: %+v; want attempt %d, origin %s", i, h, i, id)
		}
	}
	if hits[1].id == hits[0].id || hits[2].id == hits[1].id {
		t.Errorf("a retry is a new message with a new ID: %s %s %s", hits[0].id, hits[1].id, hits[2].id)
	}
	if got := dl.list(); len(got) != 0 {
		t.Errorf("dead-lettered %v", got)
	}
}

func TestDeadLettersAfterMaxAttempts(t *testing.T) {
	r, srv := newReceiver(t, func(int, string) int { return http.StatusInternalServerError })
	dl := &deadLetters{ch: make(chan struct{}, 10)}
	eng := open(t, []Route{{Pattern: "jobs", URL: srv.URL}}, 3, dl)
	for _, topic := range []string{"jobs", "unrouted"} {
		if _, err := eng.Schedule(context.Background(), engine.Request{Topic: topic, Body: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
	r.waitHits(t, 3)
	for range 2 {
		select {
		case <-dl.ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("waited 20s for 2 dead letters; got %v", dl.list())
		}
	}
	got := strings.Join(dl.list(), " ")
	if !strings.Contains(got, "jobs/y/2") || !strings.Contains(got, "unrouted/y/0") || len(dl.list()) != 2 {
		t.Fatalf("dead letters %q: want jobs/y/2 (after 3 attempts) and unrouted/y/0", got)
	}
	if hits := r.waitHits(t, 3); len(hits) != 3 {
		t.Errorf("%d POSTs, want 3 attempts", len(hits))
	}
}

func TestParseRoute(t *testing.T) {
	if r, err := ParseRoute("orders.*=http://127.0.0.1:8080/hook"); err != nil || r.Pattern != "orders.*" || r.URL != "http://127.0.0.1:8080/hook" {
		t.Fatalf("got %+v, %v", r, err)
	}
	for _, bad := range []string{"", "orders", "=http://x/", "orders=", "o[=http://x/", "o=ftp://x/", "o=/relative"} {
		if _, err := ParseRoute(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without routes: no error")
	}
}

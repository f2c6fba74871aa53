package jsqueue

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// One pull of a topic's consumer: the request, its watchdog, and giving
// back what came for a caller that went away.

// repullError is a pull that JetStream ended or did not take for a
// reason that may pass (a leader moved, the consumer is gone): a Receive
// with time left looks the consumer up again and pulls again.
type repullError struct{ err error }

func (e repullError) Error() string { return e.err.Error() }
func (e repullError) Unwrap() error { return e.err }

// repull is the pause before a pull that follows one that ended early
// with nothing.
const repull = 100 * time.Millisecond

// pullRequest is JetStream's request for messages of a pull consumer.
type pullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires,omitempty"`
	NoWait    bool          `json:"no_wait,omitempty"`
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
}

// pullHeartbeat is the idle heartbeat of pulls that wait long: a pull
// whose heartbeats stop (its consumer's leader died and the pull with it)
// is ended after two and a half of them and made again, so that a
// Consume stream finds the consumer's new leader as soon as it is
// elected (nats-server's followers campaign after 4-9 s without their
// leader). Each waiting pull costs a status message a second.
const pullHeartbeat = time.Second

// pullGrace is how long a pull without heartbeats is waited for past its
// expiry, at which JetStream ends it with a status: a pull silent that
// long was lost with its consumer's leader. (A message a live but slow
// leader sends later finds no listener and is handed out again when its
// AckWait ends.)
const pullGrace = time.Second

// delivery is a message a pull got, and when (by the node's clock, in
// whole milliseconds): its lease counts from then.
type delivery struct {
	msg *nats.Msg
	got time.Time
}

// fetch sends one pull request for up to n messages that waits up to wait
// for the first and returns as soon as it has any (JetStream's no_wait
// with expires), and collects what it gets.
func (q *Queue) fetch(ctx context.Context, c *consumer, n int, wait time.Duration) ([]delivery, error) {
	ch := make(chan *nats.Msg, n+16)
	inbox := q.nc.NewInbox()
	sub, err := q.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, unavailable("subscribing to a pull's inbox: %v", err)
	}
	defer sub.Unsubscribe()
	req := pullRequest{Batch: n, NoWait: true}
	var hb time.Duration
	if wait > 0 {
		req.Expires = wait
		if wait >= 4*q.hb {
			hb = q.hb
			req.Heartbeat = hb
		}
	}
	body, _ := json.Marshal(req)
	if err := q.nc.PublishRequest(c.next, inbox, body); err != nil {
		return nil, unavailable("pull request to the consumer of topic %q: %v", c.topic, err)
	}
	// The pull ends with a status message (404 or 408) or its n-th
	// message; if JetStream forgets it (its leader died), the watchdog
	// ends it: wait plus pullGrace, or two and a half missed heartbeats.
	watch := wait + pullGrace
	if hb > 0 {
		watch = 2*hb + hb/2
	}
	dog := time.NewTimer(watch)
	defer dog.Stop()
	var out []delivery
	for {
		select {
		case m := <-ch:
			if code := pullStatus(m); code != "" {
				switch code {
				case "100": // idle heartbeat
					dog.Reset(watch)
					continue
				case "404", "408": // nothing (more) now; the wait ran out
					return out, nil
				case "409": // a leader moved, the consumer was deleted, too many pulls waiting
					q.forget(c.topic)
					if len(out) > 0 {
						return out, nil
					}
					if strings.Contains(m.Header.Get("Description"), "Exceeded MaxWaiting") {
						return nil, status.Errorf(codes.ResourceExhausted, "too many Receives wait on topic %q at once (its consumer's MaxWaiting); retry later", c.topic)
					}
					return nil, repullError{unavailable("the consumer of topic %q: %s; retry", c.topic, m.Header.Get("Description"))}
				case "503": // no responders: the consumer is gone, or its leader is being elected
					q.forget(c.topic)
					return out, repullError{unavailable("no JetStream server answers for the consumer of topic %q (a leader election?); retry", c.topic)}
				default:
					return out, unavailable("pull from the consumer of topic %q: status %s %s", c.topic, code, m.Header.Get("Description"))
				}
			}
			out = append(out, delivery{msg: m, got: time.UnixMilli(q.opts.Now().UnixMilli())})
			if len(out) == n {
				return out, nil
			}
			if hb > 0 {
				dog.Reset(watch)
			}
		case <-dog.C:
			return out, nil
		case <-ctx.Done():
			// What came is handed out to nobody: give it back now rather
			// than let JetStream wait out its AckWait (its delivery
			// counts as an attempt either way). Without the inbox's
			// interest JetStream drops the pull and hands what comes
			// next to other pulls.
			q.giveBack(sub, ch, out)
			return nil, ctx.Err()
		}
	}
}

// giveBack ends a pull whose caller went away: it drains its inbox's
// subscription (the server drops its interest while ch still receives),
// waits for a round trip with the server (after it, every message the
// server sent to the inbox before dropping the interest is on ch, and the
// server hands nothing more to the pull), then Naks (without delay) the
// messages it got and those on ch. A plain unsubscribe would drop,
// unseen, a message the server sent before it learned of the unsubscribe:
// that message would wait out its AckWait.
func (q *Queue) giveBack(sub *nats.Subscription, ch chan *nats.Msg, got []delivery) {
	if err := sub.Drain(); err != nil {
		sub.Unsubscribe()
	} else {
		// Best effort: if the round trip fails, AckWait ends the leases
		// of what came after.
		q.nc.FlushTimeout(q.opts.Timeout)
	}
	nak := func(m *nats.Msg) {
		if m.Reply != "" && pullStatus(m) == "" {
			// Best effort: if it is lost, AckWait still ends the lease.
			q.nc.Publish(m.Reply, []byte("-NAK"))
			q.gaveBack.Add(1)
		}
	}
	for _, d := range got {
		nak(d.msg)
	}
	for {
		select {
		case m := <-ch:
			nak(m)
		default:
			return
		}
	}
}

// pullStatus is the status code of a status message of a pull ("100",
// "404", ...), or "" for a message of the stream.
func pullStatus(m *nats.Msg) string {
	if len(m.Data) > 0 || m.Header == nil {
		return ""
	}
	return m.Header.Get("Status")
}

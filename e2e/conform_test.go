package e2e

// The conformance suite: every case of conformCases runs against one
// `serve` process and against a cluster of three `serve --cluster`
// processes on three NATS servers (started once, shared by every case; a
// case owns the topics and schedule names it makes up from its name). A
// case asserts one node's documented behaviour; where cluster mode
// differs, it asks tg.differs(key) and asserts the cluster's behaviour
// instead. The key names a row of conformDifferences, the one list of
// what differs, which docs/CLUSTER.md's table is generated from
// (TestClusterDifferencesDoc). A row that no case checked while the whole
// suite ran fails it, unless the row says why it is not tested here.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// conformLease is every target's default lease: the cases that wait for a
// lease to end wait this long.
const conformLease = 3 * time.Second

// conformArgs are the flags both targets share.
var conformArgs = []string{"--default-lease", conformLease.String(), "--max-attempts", "3"}

// conformTarget is one deployment the cases run against.
type conformTarget struct {
	name    string
	cluster bool
	nodes   []*proc
	next    atomic.Uint32 // the node c hands out next

	mu      sync.Mutex
	checked map[string]bool // differences a case checked; guarded by mu
}

// c returns the next node's client: in a cluster every call goes to
// another node than the one before, so that calls about one message or
// topic are answered by its owner, forwarded or not.
func (tg *conformTarget) c() hourglassv1connect.HourglassServiceClient {
	i := tg.next.Add(1)
	return tg.nodes[int(i)%len(tg.nodes)].client
}

// one returns the first node's client, for calls that must see what a call
// before them did through the same node.
func (tg *conformTarget) one() hourglassv1connect.HourglassServiceClient {
	return tg.nodes[0].client
}

// differs reports whether tg is the cluster, where the difference key
// applies; the case then asserts the cluster's behaviour. key must be a row
// of conformDifferences.
func (tg *conformTarget) differs(t *testing.T, key string) bool {
	t.Helper()
	if !slices.ContainsFunc(conformDifferences, func(d difference) bool { return d.key == key }) {
		t.Fatalf("difference %q is not in conformDifferences", key)
	}
	if tg.cluster {
		tg.mu.Lock()
		tg.checked[key] = true
		tg.mu.Unlock()
	}
	return tg.cluster
}

// conformCase is one behaviour the suite checks on every target.
type conformCase struct {
	name string
	run  func(t *testing.T, tg *conformTarget, topic string)
}

// TestConformance runs every case against one node and against a 3-node
// cluster, each case on both at once and the cases in parallel.
func TestConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	targets := []*conformTarget{{name: "single", nodes: []*proc{start(t, t.TempDir(), nil, conformArgs...)}}}
	if testing.Short() {
		t.Log("cluster target skipped: -short (it starts 3 nats-server and 3 hourglass processes)")
	} else {
		_, nodes := startCluster(t, ctx, 3, 6, conformArgs...)
		targets = append(targets, &conformTarget{name: "cluster", cluster: true, nodes: nodes, checked: map[string]bool{}})
	}
	var ran atomic.Int32
	t.Run("cases", func(t *testing.T) {
		for _, cc := range conformCases {
			t.Run(cc.name, func(t *testing.T) {
				t.Parallel()
				ran.Add(1)
				for _, tg := range targets {
					t.Run(tg.name, func(t *testing.T) {
						t.Parallel()
						cc.run(t, tg, "cf-"+cc.name)
					})
				}
			})
		}
	})
	if t.Failed() || int(ran.Load()) != len(conformCases) || len(targets) < 2 {
		return
	}
	for _, d := range conformDifferences {
		if d.untested == "" && !targets[1].checked[d.key] {
			t.Errorf("difference %q: no case checked it; check it in a case or say in its untested field why not", d.key)
		}
	}
}

// Helpers of the cases: each fails the test on an error it does not expect.

func cfSchedule(t *testing.T, tg *conformTarget, m *hourglassv1.ScheduleRequest) *hourglassv1.ScheduleResponse {
	t.Helper()
	res, err := tg.c().Schedule(ctxT(t), connect.NewRequest(m))
	if err != nil {
		t.Fatalf("Schedule(%v): %v", m, err)
	}
	return res.Msg
}

// cfAt schedules body on topic due in d.
func cfAt(t *testing.T, tg *conformTarget, topic, body string, d time.Duration) string {
	t.Helper()
	return cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(body), When: delayMs(d.Milliseconds())}).Id
}

// cfReceive long-polls topic (lease 0: the topic's) until n messages came,
// failing after within; it checks none came before its time.
func cfReceive(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, n int, within time.Duration) []*hourglassv1.Message {
	t.Helper()
	var out []*hourglassv1.Message
	end := time.Now().Add(within)
	for len(out) < n {
		left := time.Until(end)
		if left <= 0 {
			t.Fatalf("topic %s: %d of %d messages within %v", topic, len(out), n, within)
		}
		res, err := c.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: int32(n - len(out)), WaitMs: left.Milliseconds() + 1}))
		if err != nil {
			t.Fatalf("Receive(%s): %v", topic, err)
		}
		for _, m := range res.Msg.Messages {
			if m.ReceivedAt.AsTime().Before(m.DeliverAt.AsTime()) {
				t.Errorf("%s (%s) handed out at %v, before its time %v", m.Id, m.Body, m.ReceivedAt.AsTime(), m.DeliverAt.AsTime())
			}
		}
		out = append(out, res.Msg.Messages...)
	}
	return out
}

// cfNone checks that a Receive of topic waiting wait gets nothing.
func cfNone(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, wait time.Duration) {
	t.Helper()
	res, err := c.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 100, WaitMs: wait.Milliseconds()}))
	if err != nil {
		t.Fatalf("Receive(%s): %v", topic, err)
	}
	for _, m := range res.Msg.Messages {
		t.Errorf("topic %s: unexpected %s (body %q, attempt %d)", topic, m.Id, m.Body, m.Attempt)
	}
}

func cfAck(t *testing.T, tg *conformTarget, m *hourglassv1.Message) {
	t.Helper()
	if _, err := tg.c().Ack(ctxT(t), connect.NewRequest(&hourglassv1.AckRequest{Topic: m.Topic, Receipt: m.Receipt})); err != nil {
		t.Fatalf("Ack(%s): %v", m.Id, err)
	}
}

func cfGet(t *testing.T, tg *conformTarget, req *hourglassv1.GetRequest) *hourglassv1.GetResponse {
	t.Helper()
	res, err := tg.c().Get(ctxT(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Get(%v): %v", req, err)
	}
	return res.Msg
}

func cfCancel(t *testing.T, tg *conformTarget, req *hourglassv1.CancelRequest) hourglassv1.CancelResult {
	t.Helper()
	res, err := tg.c().Cancel(ctxT(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Cancel(%v): %v", req, err)
	}
	return res.Msg.Result
}

func cfSetPolicy(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, p *hourglassv1.Policy, defaults ...string) *hourglassv1.SetPolicyResponse {
	t.Helper()
	res, err := c.SetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: p, Defaults: defaults}))
	if err != nil {
		t.Fatalf("SetPolicy(%s, %v): %v", topic, p, err)
	}
	return res.Msg
}

// cfTopic is topic's line of Topics.
func cfTopic(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string) *hourglassv1.TopicInfo {
	t.Helper()
	res, err := c.Topics(ctxT(t), connect.NewRequest(&hourglassv1.TopicsRequest{}))
	if err != nil {
		t.Fatalf("Topics: %v", err)
	}
	for _, ti := range res.Msg.Topics {
		if ti.Topic == topic {
			return ti
		}
	}
	return &hourglassv1.TopicInfo{Topic: topic}
}

// cfEventually polls cond (a server's answer) until it holds, failing
// after within.
func cfEventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's answer
	}
}

// wantCode fails unless err has code and, if given, a message containing
// every one of words.
func wantCode(t *testing.T, what string, err error, code connect.Code, words ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v; want %v", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v; want it to name %q", what, err, w)
		}
	}
}

// cfIDs is the IDs of ms in order.
func cfIDs(ms []*hourglassv1.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Id)
	}
	return out
}

// cfBody finds the message with body b.
func cfBody(ms []*hourglassv1.Message, b string) *hourglassv1.Message {
	for _, m := range ms {
		if string(m.Body) == b {
			return m
		}
	}
	return nil
}

var errNoPage = errors.New("List never ended")

// cfList lists topic in state st, pages of size, through rotating nodes.
func cfList(t *testing.T, tg *conformTarget, topic string, st hourglassv1.MessageState, size int32) ([]*hourglassv1.Message, error) {
	t.Helper()
	var out []*hourglassv1.Message
	token := ""
	for range 100 {
		res, err := tg.c().List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, State: st, PageSize: size, PageToken: token}))
		if err != nil {
			return out, err
		}
		out = append(out, res.Msg.Messages...)
		if token = res.Msg.NextPageToken; token == "" {
			return out, nil
		}
	}
	return out, errNoPage
}

func itoa(i int) string { return strconv.Itoa(i) }

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// getState asks Get for id over Connect.
func getState(t *testing.T, p *proc, id string) *hourglassv1.GetResponse {
	t.Helper()
	res, err := p.client.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{Id: id}))
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return res.Msg
}

// waitState polls Get until id is in state want, for at most within.
func waitState(t *testing.T, p *proc, id string, want hourglassv1.MessageState, within time.Duration) *hourglassv1.GetResponse {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		g := getState(t, p, id)
		if g.State == want {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get(%s): state %v after %v, want %v", id, g.State, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listAll pages through List of topic in [from, to) with pages of size,
// calling between after each page.
func listAll(t *testing.T, p *proc, topic string, from, to time.Time, size int32, between func()) []*hourglassv1.Message {
	t.Helper()
	var out []*hourglassv1.Message
	token := ""
	for range 10_000 {
		res, err := p.client.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{
			Topic: topic, From: timestamppb.New(from), To: timestamppb.New(to), PageSize: size, PageToken: token,
		}))
		if err != nil {
			t.Fatalf("List(%s, page %q): %v", topic, token, err)
		}
		if len(res.Msg.Messages) > int(size) {
			t.Fatalf("List page of %d messages, page size %d", len(res.Msg.Messages), size)
		}
		out = append(out, res.Msg.Messages...)
		if res.Msg.NextPageToken == "" {
			return out
		}
		token = res.Msg.NextPageToken
		if between != nil {
			between()
		}
	}
	t.Fatal("List did not end within 10000 pages")
	return nil
}

// TestManage runs Get and List against the real binary: every state a
// message can be in, pages under concurrent writes, a restart, bad input.
func TestManage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	c := p.client
	const topic = "mg"
	base := time.Now().Add(30 * time.Second).Truncate(time.Second)

	// Pending messages over 12 buckets of 2s, none loaded yet (the preload
	// lead is a sixth of the bucket), two per bucket.
	var ids []string
	var wantAt []time.Time
	for i := range 24 {
		at := base.Add(time.Duration(i) * time.Second)
		id := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprintf("m%02d", i)),
			Headers: []*hourglassv1.Header{{Key: "k", Value: fmt.Sprint(i)}},
			When:    &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
		ids, wantAt = append(ids, id), append(wantAt, at)
	}
	for i, id := range ids {
		g := getState(t, p, id)
		if g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING {
			t.Errorf("Get(%s) = %v, want PENDING", id, g.State)
			continue
		}
		m := g.Message
		if m.Id != id || m.Topic != topic || string(m.Body) != fmt.Sprintf("m%02d", i) || !m.DeliverAt.AsTime().Equal(wantAt[i]) ||
			len(m.Headers) != 1 || m.Headers[0].Value != fmt.Sprint(i) || m.Attempt != 0 || m.OriginId != "" {
			t.Errorf("Get(%s) message = %v, want body m%02d at %v", id, m, i, wantAt[i])
		}
	}

	t.Run("cancelled", func(t *testing.T) {
		if r := cancelID(t, c, ids[5]); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
			t.Fatalf("Cancel = %v", r)
		}
		if g := getState(t, p, ids[5]); g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED || string(g.Message.Body) != "m05" {
			t.Errorf("Get of a cancelled message = %v %v, want CANCELLED with its message", g.State, g.Message)
		}
	})

	t.Run("queue_states", func(t *testing.T) {
		const qt = "mg-q"
		var qids []string
		for i := range 3 {
			qids = append(qids, schedule(t, c, &hourglassv1.ScheduleRequest{Topic: qt, Body: []byte{byte('a' + i)}}))
		}
		for _, id := range qids {
			waitState(t, p, id, hourglassv1.MessageState_MESSAGE_STATE_DUE, 10*time.Second)
		}
		got := receive(t, c, qt, 3, 10*time.Second)
		for _, r := range got {
			g := getState(t, p, r.m.Id)
			if g.State != hourglassv1.MessageState_MESSAGE_STATE_LEASED || g.LeaseExpiresAt == nil || g.LeaseExpiresAt.AsTime().Before(time.Now()) {
				t.Errorf("Get of a received message = %v (lease until %v), want LEASED with its lease end ahead", g.State, g.LeaseExpiresAt)
			}
		}
		ack(t, c, qt, qids[0])
		ack(t, c, qt, qids[1])
		for _, id := range qids[:2] {
			if g := getState(t, p, id); g.State != hourglassv1.MessageState_MESSAGE_STATE_ACKED {
				t.Errorf("Get of an acked message = %v, want ACKED", g.State)
			}
		}
		if g := getState(t, p, qids[2]); g.State != hourglassv1.MessageState_MESSAGE_STATE_LEASED {
			t.Errorf("Get of the message still leased = %v", g.State)
		}
		// Get leased nothing: the third message's lease (60 s) is the only one,
		// and nothing else is receivable.
		receiveNone(t, c, qt, 100*time.Millisecond)
	})

	t.Run("not_found", func(t *testing.T) {
		// A seq past the commitlog's end, and a time with no segment.
		for _, id := range []string{"0000019bd6a1f2c0000000007fffffff", "00000000000000010000000000000000"} {
			if g := getState(t, p, id); g.State != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND || g.Message != nil {
				t.Errorf("Get(%s) = %v %v, want NOT_FOUND and no message", id, g.State, g.Message)
			}
		}
	})

	// Pending between two times, in pages of 3, while more are scheduled
	// into the same range between pages.
	from, to := base.Add(2*time.Second), base.Add(20*time.Second) // m02..m19
	t.Run("list_pages_concurrent", func(t *testing.T) {
		var mu sync.Mutex
		var added []string
		n := 0
		between := func() {
			mu.Lock()
			defer mu.Unlock()
			n++
			at := base.Add(time.Duration(n%18+2) * time.Second).Add(time.Duration(n) * time.Millisecond)
			added = append(added, schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("late"),
				When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}}))
			// Another topic's messages in the range are never listed.
			schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "mg-other", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
		}
		// And a writer that schedules into the range all along.
		stop, wrote := make(chan struct{}), make(chan error, 1)
		go func() {
			defer close(wrote)
			for i := range 200 {
				select {
				case <-stop:
					return
				default:
				}
				at := base.Add(time.Duration(i%18+2)*time.Second + 500*time.Millisecond)
				_, err := c.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("conc"),
					When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}}))
				if err != nil {
					wrote <- err
					return
				}
			}
		}()
		got := listAll(t, p, topic, from, to, 3, between)
		close(stop)
		if err := <-wrote; err != nil {
			t.Errorf("concurrent Schedule: %v", err)
		}
		seen := map[string]bool{}
		for i, m := range got {
			if seen[m.Id] {
				t.Errorf("List returned %s twice", m.Id)
			}
			seen[m.Id] = true
			if m.Topic != topic || m.DeliverAt.AsTime().Before(from) || !m.DeliverAt.AsTime().Before(to) {
				t.Errorf("List returned %s of topic %s at %v, outside [%v, %v)", m.Id, m.Topic, m.DeliverAt.AsTime(), from, to)
			}
			if i > 0 && m.Id <= got[i-1].Id {
				t.Errorf("List out of order: %s after %s", m.Id, got[i-1].Id)
			}
		}
		for i := 2; i < 20; i++ {
			if want := !(i == 5); seen[ids[i]] != want {
				t.Errorf("m%02d (%s) listed %v, want %v", i, ids[i], seen[ids[i]], want)
			}
		}
		for _, id := range []string{ids[0], ids[1], ids[20]} {
			if seen[id] {
				t.Errorf("List returned %s, outside the range", id)
			}
		}
	})

	t.Run("client_and_cli", func(t *testing.T) {
		cl, err := client.New(p.url) // grpc-go on h2c
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		id3, err := client.ParseID(ids[3])
		if err != nil {
			t.Fatal(err)
		}
		f, err := cl.Get(ctxT(t), id3)
		if err != nil || f.State != client.StatePending || string(f.Message.Body) != "m03" || f.Message.Headers["k"] != "3" {
			t.Errorf("client Get = %+v, %v; want pending m03", f, err)
		}
		var listed []string
		for m, err := range cl.List(ctxT(t), topic, client.ListOptions{From: from, To: base.Add(6 * time.Second), PageSize: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(string(m.Body), "m") {
				listed = append(listed, string(m.Body))
			}
		}
		if want := []string{"m02", "m03", "m04"}; !slices.Equal(listed, want) {
			t.Errorf("client List = %q, want %q (m05 is cancelled)", listed, want)
		}

		out := runCLI(t, "get", "--addr", p.url, "--json", ids[5])
		var g struct {
			State   string `json:"state"`
			Message struct {
				Body string `json:"body"`
			} `json:"message"`
		}
		if err := json.Unmarshal(out, &g); err != nil || g.State != "cancelled" || g.Message.Body != "m05" {
			t.Errorf("hourglass get --json: %s (%v); want state cancelled, body m05", out, err)
		}
		out = runCLI(t, "list", "--addr", p.url, "--topic", topic, "--from", from.Format(time.RFC3339Nano), "--limit", "4", "--page-size", "3", "--json")
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 4 || !strings.Contains(lines[0], `"body":"m02"`) {
			t.Errorf("hourglass list --limit 4 printed %d lines:\n%s", len(lines), out)
		}
		help := runCLI(t, "list", "--help")
		for _, w := range []string{"--topic", "--from", "RFC 3339", "page"} {
			if !bytes.Contains(help, []byte(w)) {
				t.Errorf("list --help does not mention %q", w)
			}
		}
	})

	t.Run("bad_input", func(t *testing.T) {
		cases := []struct {
			name string
			call func() error
			want string
		}{
			{"bad_id", func() error {
				_, err := c.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{Id: "xyz"}))
				return err
			}, "id"},
			{"empty_id", func() error {
				_, err := c.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{}))
				return err
			}, "name the message by id, or by topic and key"},
			{"from_after_to", func() error {
				_, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, From: timestamppb.New(to), To: timestamppb.New(from)}))
				return err
			}, "from must not be after to"},
			{"page_too_big", func() error {
				_, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageSize: 5000}))
				return err
			}, "from 1 to 1000"},
			{"state_not_supported", func() error {
				_, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_CANCELLED}))
				return err
			}, "List lists PENDING (the default), DUE, LEASED or DEAD_LETTERED"},
			{"bad_token", func() error {
				_, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageToken: "nope"}))
				return err
			}, "page_token"},
			{"bad_topic", func() error {
				_, err := c.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: "no spaces"}))
				return err
			}, "topic"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call()
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("got %v, want InvalidArgument saying %q", err, tc.want)
				}
			})
		}
	})

	// After kill -9, both answer from disk.
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	for i, id := range ids {
		want := hourglassv1.MessageState_MESSAGE_STATE_PENDING
		if i == 5 {
			want = hourglassv1.MessageState_MESSAGE_STATE_CANCELLED
		}
		if g := getState(t, p, id); g.State != want || string(g.Message.Body) != fmt.Sprintf("m%02d", i) {
			t.Errorf("after restart: Get(m%02d) = %v, want %v", i, g.State, want)
		}
	}
	got := listAll(t, p, topic, base, base.Add(24*time.Second), 7, nil)
	var bodies []string
	for _, m := range got {
		if strings.HasPrefix(string(m.Body), "m") {
			bodies = append(bodies, string(m.Body))
		}
	}
	if len(bodies) != 23 || slices.Contains(bodies, "m05") {
		t.Errorf("after restart: List has %d of the 23 pending: %q", len(bodies), bodies)
	}
	p.stop(syscall.SIGTERM)
}

// runCLI runs the hourglass binary with args and returns its stdout.
func runCLI(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("hourglass %q: %v", args, err)
	}
	if err != nil {
		t.Errorf("hourglass %q: %v\n%s", args, err, stderr.String())
	}
	return out
}

package cluster

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// listAll pages through topic's pending messages with pages of size and
// returns their IDs in order.
func listAll(t *testing.T, n *Node, req engine.ListRequest) ([]message.ID, error) {
	t.Helper()
	var ids []message.ID
	token := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("List never ended")
		}
		found, next, err := n.List(ctxT(t), req, token, false)
		if err != nil {
			return ids, err
		}
		for _, f := range found {
			if f.State != engine.StatePending || f.Message.DeliverAt != f.ID.DeliverAt ||
				message.HeaderValue(f.Message.Headers, idHeader) != "" || message.HeaderValue(f.Message.Headers, replacesHeader) != "" {
				t.Fatalf("List answered %+v; want a pending message due at its ID's time without the cluster's headers", f)
			}
			ids = append(ids, f.ID)
		}
		if len(found) > req.Limit || (next != "" && len(found) < req.Limit) {
			t.Fatalf("a page of %d with next token %q for a page size of %d", len(found), next, req.Limit)
		}
		if next == "" {
			return ids, nil
		}
		token = next
	}
}

func sortedIDs(ids []message.ID) []message.ID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b message.ID) int {
		if idAfter(a, b) {
			return 1
		} else if a == b {
			return 0
		}
		return -1
	})
	return out
}

// TestList: a one-node cluster lists a topic's pending messages across
// its 4 partitions in (deliverAt, ID) order, a page at a time, leaving out
// other topics, cancelled and rescheduled ones (the replacement is listed)
// and what is outside [from, to); a message read after others of its
// millisecond with larger IDs (a compaction's copy) is listed in ID order
// across a page boundary. While another node owns partitions it cannot be
// reached at, and while they have no owner, List answers Unavailable
// naming a partition, never a partial page; once this node took them over
// it lists them all again.
func TestList(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	a, err := openNode(t, ns.ClientURL(), "a", 4, newRecordSink())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node never owned its 4 partitions", func() bool { return len(a.Owned()) == 4 })

	base := time.Now().Add(time.Hour).Truncate(time.Second)
	var want []message.ID
	// 30 single Schedules (round robin, some gathered) and 3 batches, with
	// shared delivery times so that IDs break the ties.
	for i := range 30 {
		ids, err := a.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Body: []byte(fmt.Sprint(i)), At: base.Add(time.Duration(i%7) * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	for b := range 3 {
		reqs := make([]engine.Request, 5)
		for i := range reqs {
			reqs[i] = engine.Request{Topic: "t", Body: []byte("b"), At: base.Add(time.Duration(i%3) * time.Millisecond), IdempotencyKey: fmt.Sprintf("b%d-%d", b, i)}
		}
		ids, err := a.ScheduleBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	if _, err := a.ScheduleBatch(ctx, []engine.Request{{Topic: "other", At: base}}); err != nil {
		t.Fatal(err)
	}
	// A copy-like message: an ID of an early sequence, read last.
	p0, seq0, _ := SplitID(want[0])
	early := MakeID(p0, seq0, 900, base.UnixMilli())
	cp := message.Message{DeliverAt: early.DeliverAt, Topic: []byte("t"), Body: []byte("copy"),
		Headers: []message.Header{{Key: []byte(idHeader), Value: appendIDBytes(nil, early)}}}
	if _, err := a.publishIntake(ctx, p0, []message.Message{cp}, ""); err != nil {
		t.Fatal(err)
	}
	want = append(want, early)
	// One cancelled, one rescheduled (its replacement is pending).
	if res, err := a.Cancel(ctx, want[3], false); res != engine.Cancelled || err != nil {
		t.Fatalf("Cancel = %v, %v", res, err)
	}
	res, nid, err := a.Reschedule(ctx, want[4], base.Add(2*time.Second), false)
	if res != engine.Rescheduled || err != nil {
		t.Fatalf("Reschedule = %v, %v", res, err)
	}
	want = append(slices.Delete(slices.Clone(want), 3, 5), nid)
	want = sortedIDs(want)

	for _, size := range []int{1, 2, 7, 100} {
		got, err := listAll(t, a, engine.ListRequest{Topic: "t", Limit: size})
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("List in pages of %d = %v, %v;\nwant %v", size, got, err, want)
		}
	}
	from, to := base.Add(time.Millisecond).UnixMilli(), base.Add(3*time.Millisecond).UnixMilli()
	var window []message.ID
	for _, id := range want {
		if id.DeliverAt >= from && id.DeliverAt < to {
			window = append(window, id)
		}
	}
	if got, err := listAll(t, a, engine.ListRequest{Topic: "t", Limit: 3, From: from, To: to}); err != nil || !slices.Equal(got, window) {
		t.Errorf("List [1ms, 3ms) = %v, %v; want %v", got, err, window)
	}
	found, _, err := a.List(ctx, engine.ListRequest{Topic: "t", Limit: 1}, "", false)
	if err != nil || len(found) != 1 || string(found[0].Message.Topic) != "t" || found[0].Message.Body == nil {
		t.Errorf("first page = %+v, %v; want one message with its topic and body", found, err)
	}

	// Tokens.
	good := listToken{after: want[2]}.encode(4)
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	flipped := slices.Clone(raw)
	flipped[3] ^= 1
	for _, c := range []struct {
		name, token, says string
		forwarded         bool
	}{
		{"not_base64", "!!", "not a token", false},
		{"single_node_id", want[0].String(), "not a token", false},
		{"bad_checksum", base64.RawURLEncoding.EncodeToString(flipped), "checksum", false},
		{"other_layout", listToken{after: want[2]}.encode(8), "8 partitions; this cluster has 4", false},
		{"partitions_from_a_client", listToken{after: want[2], parts: []int{1}}.encode(4), "not a token List returned", false},
		{"forwarded_without_partitions", good, "names no partitions", true},
		{"partition_out_of_range", listToken{parts: []int{4}}.encode(4), "partition list", true},
		{"position_outside", listToken{after: MakeID(7, 1, 0, 1)}.encode(4), "outside this cluster", false},
		{"good", good, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := a.List(ctx, engine.ListRequest{Topic: "t"}, c.token, c.forwarded)
			if c.says == "" {
				if err != nil {
					t.Errorf("err = %v; want none", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err = %v; want InvalidArgument saying %q", err, c.says)
			}
		})
	}
	if _, err := parseListToken(listToken{after: MakeID(7, 1, 0, 1)}.encode(8)[:5], 8); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a truncated token: %v; want InvalidArgument", err)
	}
	if tok, err := parseListToken(listToken{after: want[2], parts: []int{0, 3}}.encode(4), 4); err != nil || tok.after != want[2] || !slices.Equal(tok.parts, []int{0, 3}) {
		t.Errorf("a forwarded token round trip = %+v, %v", tok, err)
	}

	// A second node that cannot be reached takes two partitions: List
	// answers Unavailable naming one; once it closed and a took them back,
	// everything is listed again.
	b, err := openNode(t, ns.ClientURL(), "b", 4, newRecordSink())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b never took 2 partitions", func() bool { return len(b.Owned()) == 2 && len(a.Owned()) == 2 })
	_, _, err = a.List(ctx, engine.ListRequest{Topic: "t"}, "", false)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "partition") {
		t.Errorf("List with an unreachable owner: %v; want Unavailable naming the partition", err)
	}
	b.Close()
	waitFor(t, 10*time.Second, "List never answered again after b closed", func() bool {
		_, _, err := a.List(ctx, engine.ListRequest{Topic: "t"}, "", false)
		if err != nil && (status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "partition")) {
			t.Fatalf("List while b's partitions move: %v; want Unavailable naming a partition", err)
		}
		return err == nil
	})
	if got, err := listAll(t, a, engine.ListRequest{Topic: "t", Limit: 5}); err != nil || !slices.Equal(got, want) {
		t.Errorf("List after the takeover = %v, %v; want %v", got, err, want)
	}
}

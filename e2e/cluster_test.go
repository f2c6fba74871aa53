package e2e

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/natscluster"
	"github.com/hourglassmq/hourglass/message"
)

var partitionLogRE = regexp.MustCompile(`msg="cluster: (partition taken|giving partition up to spread the work|lease lost; stopping partition)" partition=(\d+)`)

// owned reads from a node's log which partitions it runs now.
func owned(p *proc) map[int]bool {
	out := map[int]bool{}
	for _, m := range partitionLogRE.FindAllStringSubmatch(p.log(), -1) {
		n, _ := strconv.Atoi(m[2])
		out[n] = m[1] == "partition taken"
		if !out[n] {
			delete(out, n)
		}
	}
	return out
}

// startCluster starts a 3-node NATS cluster and n `serve --cluster` nodes
// on it (lease TTL 2 s, 3 replicas, partitions partitions, then extra
// flags), stopped when the test ends, and waits until the partitions are
// spread evenly over the nodes (partitions/n each). It returns the NATS
// cluster and the nodes.
func startCluster(t *testing.T, ctx context.Context, n, partitions int, extra ...string) (*natscluster.Cluster, []*proc) {
	t.Helper()
	bin, err := natscluster.Binary(ctx)
	if err != nil {
		t.Fatalf("building nats-server: %v", err)
	}
	nc, err := natscluster.Start(ctx, natscluster.Options{Dir: t.TempDir(), Size: 3, Binary: bin, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Stop() })
	var nodes []*proc
	for i := range n {
		args := append([]string{"--cluster", nc.URLs(), "--node-id", fmt.Sprintf("hg%d", i),
			"--lease-ttl", "2s", "--replicas", "3", "--partitions", strconv.Itoa(partitions)}, extra...)
		nodes = append(nodes, start(t, t.TempDir(), nil, args...))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		spread := true
		for _, p := range nodes {
			if len(owned(p)) != partitions/n {
				spread = false
			}
		}
		if spread {
			return nc, nodes
		}
		if time.Now().After(deadline) {
			var got []map[int]bool
			for _, p := range nodes {
				got = append(got, owned(p))
			}
			t.Fatalf("partitions not spread over the nodes after 30s: %v", got)
		}
		time.Sleep(50 * time.Millisecond) // polling the nodes' logs
	}
}

// sent is one acknowledged Schedule of the cluster test.
type sent struct {
	id        message.ID
	cancelled bool
}

// TestClusterKill9 runs a 3-node NATS cluster and three `serve --cluster`
// nodes, schedules messages through all of them, cancels some through
// other nodes than the ones that took them, then kills -9 one Hourglass
// node and one NATS node while messages are pending. Every acknowledged
// message that was not cancelled must reach the delivery stream exactly
// once and not before its time; no cancelled one may. It prints the
// takeover time: from the kill to the first delivery of a partition the
// killed node owned.
func TestClusterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 3 hourglass processes; takes about 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 6
	nc, nodes := startCluster(t, ctx, 3, partitions, "--log-level", "debug")

	// Wave 1: 600 messages in batches of 20 through every node, due 1.5 s
	// to 7.5 s from now; each with an idempotency key.
	var (
		mu   sync.Mutex
		msgs = map[message.ID]*sent{}
	)
	scheduleBatch := func(p *proc, wave, batch, n int, first, spread time.Duration) error {
		req := &hourglassv1.ScheduleBatchRequest{}
		for j := range n {
			delay := first + spread*time.Duration(j)/time.Duration(n)
			req.Messages = append(req.Messages, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte(fmt.Sprintf("w%d-b%d-%d", wave, batch, j)),
				IdempotencyKey: fmt.Sprintf("w%d-b%d-%d", wave, batch, j), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: delay.Milliseconds()}})
		}
		res, err := p.client.ScheduleBatch(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range res.Msg.Results {
			id, err := message.ParseID(r.Id)
			if err != nil {
				t.Fatalf("bad ID %q: %v", r.Id, err)
			}
			if msgs[id] == nil {
				msgs[id] = &sent{id: id}
			}
		}
		return nil
	}
	start1 := time.Now()
	for b := range 30 {
		if err := scheduleBatch(nodes[b%3], 1, b, 20, 1500*time.Millisecond, 6*time.Second); err != nil {
			t.Fatalf("wave 1 batch %d: %v", b, err)
		}
	}
	t.Logf("wave 1: %d messages acknowledged in %v", len(msgs), time.Since(start1).Round(time.Millisecond))

	// Cancel every 7th message due at least 3 s ahead, through the next
	// node (forwarded unless it owns the partition).
	i, nCancel := 0, 0
	for id, s := range msgs {
		i++
		if i%7 != 0 || time.Until(id.Time()) < 3*time.Second {
			continue
		}
		res, err := nodes[i%3].client.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: id.String()}))
		if err != nil {
			t.Fatalf("cancel %v: %v", id, err)
		}
		if res.Msg.Result != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
			t.Fatalf("cancel %v due in %v: %v, want cancelled", id, time.Until(id.Time()), res.Msg.Result)
		}
		s.cancelled = true
		nCancel++
	}
	// A retry of an acknowledged Schedule with its key gets the same ID.
	before := len(msgs)
	if err := scheduleBatch(nodes[1], 1, 0, 20, 1500*time.Millisecond, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != before {
		t.Fatalf("retrying batch 0 with its idempotency keys added %d messages", len(msgs)-before)
	}

	// Kill -9 Hourglass node 0 and NATS node 1 while messages are pending.
	victim := owned(nodes[0])
	killAt := time.Now()
	if err := nodes[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-nodes[0].exited
	if err := nc.Kill(1); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed hourglass node hg0 (partitions %v) and NATS node %s; %d cancelled", victim, nc.Name(1), nCancel)

	// Wave 2, during the takeover: 10 batches through the survivors, due
	// 0.5 s to 3.5 s from now, retried while the cluster answers errors.
	for b := range 10 {
		for try := 0; ; try++ {
			err := scheduleBatch(nodes[1+b%2], 2, b, 20, 500*time.Millisecond, 3*time.Second)
			if err == nil {
				break
			}
			if try == 50 {
				t.Fatalf("wave 2 batch %d: still failing after 50 tries: %v", b, err)
			}
			t.Logf("wave 2 batch %d: %v (retrying)", b, err)
			time.Sleep(100 * time.Millisecond) // backoff of a producer's retry
		}
	}

	// Read the delivery stream until every message not cancelled is there.
	conn, err := nats.Connect(nc.URL(0) + "," + nc.URL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, _ := jetstream.New(conn)
	// next returns the next message of the delivery stream; it rides out
	// the stream's leader election after the NATS kill (a bounded retry).
	// An ordered consumer can stall for good after its server was killed
	// (a known trait of ephemeral ordered consumers), so after 2 s without
	// a message it is made again from the last sequence read: a stalled
	// reader then cannot pass for lost messages, and lost messages still
	// fail the test once wait is over.
	var cons jetstream.Consumer
	var lastSeq uint64
	next := func(wait time.Duration) (jetstream.Msg, error) {
		end := time.Now().Add(wait)
		for {
			var err error
			if cons == nil {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				cons, err = js.OrderedConsumer(cctx, "HOURGLASS", jetstream.OrderedConsumerConfig{
					DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: lastSeq + 1,
					// nats.go retries making the consumer again without a
					// bound, inside Next and deaf to its wait: bounded,
					// Next fails and this makes a new one.
					MaxResetAttempts: 2})
				ccancel()
				if err != nil {
					cons = nil
				}
			}
			if err == nil {
				var m jetstream.Msg
				if m, err = cons.Next(jetstream.FetchMaxWait(min(max(time.Until(end), 100*time.Millisecond), 2*time.Second))); err == nil {
					md, _ := m.Metadata()
					lastSeq = md.Sequence.Stream
					return m, nil
				}
				cons = nil
				if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
					if time.Now().After(end) {
						return nil, err
					}
					continue // the fetch waited; read again through a new consumer
				}
			}
			if time.Now().After(end) {
				return nil, err
			}
			time.Sleep(100 * time.Millisecond) // the stream is electing a leader
		}
	}
	want := 0
	for _, s := range msgs {
		if !s.cancelled {
			want++
		}
	}
	seen := map[message.ID]bool{}
	var takeover time.Duration = -1
	var lastDue time.Time
	for _, s := range msgs {
		if s.id.Time().After(lastDue) {
			lastDue = s.id.Time()
		}
	}
	for len(seen) < want {
		m, err := next(45 * time.Second) // a sink that failed during the NATS election backs off up to 30 s
		if err != nil {
			missing := 0
			byBatch := map[string]int{} // intake message (partition/sequence) -> messages missing
			for id, s := range msgs {
				if !s.cancelled && !seen[id] {
					missing++
					p, seq, _ := cluster.SplitID(id)
					byBatch[fmt.Sprintf("HG_IN_%d seq %d (due %s)", p, seq, id.Time().Format("15:04:05.000"))]++
				}
			}
			for b, n := range byBatch {
				t.Logf("missing: %d messages of the intake message at %s", n, b)
			}
			logStreams(t, js)
			t.Fatalf("delivery stream: %v; %d of %d acknowledged messages missing", err, missing, want)
		}
		md, _ := m.Metadata()
		id, err := message.ParseID(m.Headers().Get("Hourglass-Id"))
		if err != nil {
			t.Fatalf("delivered message without a valid Hourglass-Id: %v", err)
		}
		s := msgs[id]
		switch {
		case s == nil:
			t.Fatalf("delivered %v, which no Schedule was answered with", id)
		case s.cancelled:
			t.Errorf("delivered %v, which Cancel answered cancelled", id)
		case seen[id]:
			t.Errorf("delivered %v twice (stream seq %d)", id, md.Sequence.Stream)
		case md.Timestamp.Before(id.Time()):
			t.Errorf("%v stored at %v, %v before it was due", id, md.Timestamp, id.Time().Sub(md.Timestamp))
		}
		seen[id] = true
		p, _, _ := cluster.SplitID(id)
		if victim[p] && md.Timestamp.After(killAt) && takeover < 0 {
			takeover = md.Timestamp.Sub(killAt)
		}
	}
	// Nothing cancelled shows up after the rest: wait until the last due
	// time has passed by a lease TTL and read what else is there.
	for {
		m, err := next(time.Until(lastDue.Add(2*time.Second)) + 100*time.Millisecond)
		if err != nil {
			break
		}
		id, _ := message.ParseID(m.Headers().Get("Hourglass-Id"))
		if s := msgs[id]; s == nil || s.cancelled || seen[id] {
			t.Errorf("delivered %v after all others: unknown, cancelled or repeated", id)
		}
	}
	if takeover < 0 {
		t.Fatalf("no delivery of the killed node's partitions %v after the kill", victim)
	}
	fmt.Printf("cluster: %d messages delivered, %d cancelled and not delivered; takeover after kill -9 of an Hourglass node (lease TTL 2s) and a NATS node: %v to the first delivery of its partitions\n",
		want, nCancel, takeover.Round(time.Millisecond))
	for _, p := range nodes[1:] {
		p.stop(syscall.SIGTERM)
	}
}

// logStreams logs the state of the cluster's streams, for a failure's
// report.
func logStreams(t *testing.T, js jetstream.JetStream) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Logf("stream %s: %v", name, err)
			continue
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Logf("stream %s: %v", name, err)
			continue
		}
		leader := ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		t.Logf("stream %s: messages %d, sequences %d to %d, leader %s", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, leader)
	}
}

package jsqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/queue"
)

// ExtendedBucket is the key-value bucket that notes extended leases: key
// extendKey(ack subject), value the lease's new end (UTC ms, decimal).
// JetStream keeps the lease itself (the in-progress ack resets its
// timer); the note only lets whichever node is sent the receipt next
// know that its lease ends later than the receipt's own time says.
const ExtendedBucket = "HG_EXTENDED"

// ackProgress is JetStream's in-progress ack: the consumer's AckWait
// starts again from when its leader gets it.
var ackProgress = []byte("+WPI")

// ExtendReceipt gives the delivery receipt names a new lease of lease
// from now, which must be the topic consumer's AckWait: JetStream's
// in-progress ack starts that AckWait again, and nothing else. It returns
// when the lease ends by this node's clock. Any node may extend any
// node's receipt, as often as it likes while its lease holds.
func (q *Queue) ExtendReceipt(ctx context.Context, topic, receipt string, lease time.Duration) (time.Time, error) {
	c, r, err := q.leased(ctx, topic, receipt)
	if err != nil {
		return time.Time{}, err
	}
	if lease != c.ackWait {
		return time.Time{}, status.Errorf(codes.InvalidArgument,
			"lease_ms %d: in cluster mode Extend starts the lease of topic %q again, its JetStream consumer's AckWait (%v; SetPolicy lease_ms changes it): send lease_ms %d",
			lease.Milliseconds(), topic, c.ackWait, c.ackWait.Milliseconds())
	}
	until := q.opts.Now().Add(c.ackWait)
	if err := q.request(ctx, topic, r.subject, ackProgress); err != nil {
		return time.Time{}, err
	}
	kv, err := q.extendedBucket(ctx, true)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
		_, err = kv.Put(cctx, extendKey(r.subject), []byte(strconv.FormatInt(until.UnixMilli(), 10)))
		cancel()
	}
	if err != nil {
		return time.Time{}, unavailable("extending a lease of topic %q: JetStream restarted its AckWait, but noting it in %s failed: %v; retry (until then the receipt acts until %s)",
			topic, ExtendedBucket, err, time.UnixMilli(r.got).Add(c.ackWait).UTC().Format(time.RFC3339Nano))
	}
	return until, nil
}

// extendedUntil is when the lease of the delivery on ack subject subj
// ends as extended, or zero if it was never extended (or the note
// expired).
func (q *Queue) extendedUntil(ctx context.Context, subj string) (time.Time, error) {
	kv, err := q.extendedBucket(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	e, err := kv.Get(ctx, extendKey(subj))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	ms, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("jsqueue: %s holds %q for a lease, not a time", ExtendedBucket, e.Value())
	}
	return time.UnixMilli(ms), nil
}

// extendedBucket returns the bucket of extended leases; create makes it
// if it does not exist. Its entries outlive the longest lease.
func (q *Queue) extendedBucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	q.mu.Lock()
	kv := q.extended
	q.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	kv, err := q.opts.JS.KeyValue(ctx, ExtendedBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && create {
		kv, err = q.opts.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ExtendedBucket,
			Description: "hourglass: leases extended by Extend (cluster/jsqueue)",
			TTL:         queue.DefaultMaxLease + time.Minute, Replicas: q.opts.Replicas, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = q.opts.JS.KeyValue(ctx, ExtendedBucket)
		}
	}
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.extended = kv
	q.mu.Unlock()
	return kv, nil
}

// extendKey is the bucket key of a delivery: its ack subject names the
// delivery (consumer, delivery count, sequences) and may hold characters
// a key may not.
func extendKey(subj string) string {
	sum := sha256.Sum256([]byte(subj))
	return "d" + hex.EncodeToString(sum[:16])
}

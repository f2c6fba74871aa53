package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"

	"github.com/hourglassmq/hourglass/message"
)

// Limits of cluster IDs. They are part of the ID format: a message's
// partition, the stream sequence of its intake message and its index in
// that intake message share message.ID.Seq, high bits to low:
//
//	+----------------+---------------------+-------------+
//	| partition (12) | intake sequence (42)| index (10)  |
//	+----------------+---------------------+-------------+
const (
	indexBits     = 10
	seqBits       = 42
	partitionBits = 64 - seqBits - indexBits
	// MaxBatch is the most messages one intake message (one
	// ScheduleBatch) may hold: the index field's range. It is at least
	// the server's MaxBatch (1000).
	MaxBatch = 1 << indexBits
	// MaxSeq is the largest intake stream sequence an ID can carry.
	MaxSeq = 1<<seqBits - 1
	// MaxPartitions bounds the number of partitions.
	MaxPartitions = 1 << partitionBits
)

// MakeID returns the cluster ID of message idx of the intake message at
// stream sequence seq of partition p, due at deliverAt (UTC ms).
func MakeID(p int, seq uint64, idx int, deliverAt int64) message.ID {
	return message.ID{DeliverAt: deliverAt,
		Seq: uint64(p)<<(seqBits+indexBits) | (seq&MaxSeq)<<indexBits | uint64(idx)&(MaxBatch-1)}
}

// SplitID returns the partition, the intake sequence and the index of a
// cluster ID.
func SplitID(id message.ID) (p int, seq uint64, idx int) {
	return int(id.Seq >> (seqBits + indexBits)), id.Seq >> indexBits & MaxSeq, int(id.Seq & (MaxBatch - 1))
}

// KeyPartition is the partition of a message with an idempotency key: a
// hash of topic and key, so that a retry lands in the same intake stream,
// whose duplicate window then answers the first message's sequence.
func KeyPartition(topic, key string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// msgID is the Nats-Msg-Id of a single keyed message's intake publish.
func msgID(topic, key string) string { return topic + "\x00" + key }

// batchMsgID is the Nats-Msg-Id of an intake message holding several
// messages, each with an idempotency key: a hash of every (topic, key) in
// order, so that the same batch sent again is deduplicated as a whole.
// It is "" if a message has no key (the publish then has no Nats-Msg-Id
// and is never deduplicated).
func batchMsgID(topics, keys []string) string {
	if len(keys) == 1 {
		if keys[0] == "" {
			return ""
		}
		return msgID(topics[0], keys[0])
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for i, k := range keys {
		if k == "" {
			return ""
		}
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(topics[i])))])
		h.Write([]byte(topics[i]))
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(k)))])
		h.Write([]byte(k))
	}
	return fmt.Sprintf("batch:%d:%s", len(keys), hex.EncodeToString(h.Sum(nil)))
}

// inSubject, inStream, doneSubject and doneStream name partition p's
// JetStream objects.
func inSubject(p int) string   { return fmt.Sprintf("hg.in.%d", p) }
func inStream(p int) string    { return fmt.Sprintf("HG_IN_%d", p) }
func doneSubject(p int) string { return fmt.Sprintf("hg.done.%d", p) }
func doneStream(p int) string  { return fmt.Sprintf("HG_DONE_%d", p) }
func ownerKey(p int) string    { return fmt.Sprintf("p%03d", p) }

// PartitionStreams names partition p's JetStream streams: its intake and
// its done stream.
func PartitionStreams(p int) (intake, done string) { return inStream(p), doneStream(p) }

// idHeader is the local engine's header carrying a message's cluster ID
// (16 bytes, big-endian deliverAt then seq). It is removed before the
// message is delivered.
const idHeader = "hourglass-cluster-id"

func appendIDBytes(dst []byte, id message.ID) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(id.DeliverAt))
	return binary.BigEndian.AppendUint64(dst, id.Seq)
}

func idFromBytes(b []byte) (message.ID, bool) {
	if len(b) != 16 {
		return message.ID{}, false
	}
	return message.ID{DeliverAt: int64(binary.BigEndian.Uint64(b)), Seq: binary.BigEndian.Uint64(b[8:])}, true
}

// replacesHeader marks a Reschedule's replacement in its intake message:
// its value is the rescheduled message's cluster ID (16 bytes, as
// idHeader's). The owner that reads it notes the move, and makes sure
// that only one of the two is ever delivered (partition.requests). It is
// removed before the message is delivered or shown.
const replacesHeader = "hourglass-replaces"

// replaced returns the ID a replacement's header names.
func replaced(hs []message.Header) (message.ID, bool) {
	for _, h := range hs {
		if string(h.Key) == replacesHeader {
			return idFromBytes(h.Value)
		}
	}
	return message.ID{}, false
}

// withoutHeader returns hs without the headers named key, hs itself if it
// has none.
func withoutHeader(hs []message.Header, key string) []message.Header {
	for i, h := range hs {
		if string(h.Key) == key {
			out := append(make([]message.Header, 0, len(hs)-1), hs[:i]...)
			for _, h := range hs[i+1:] {
				if string(h.Key) != key {
					out = append(out, h)
				}
			}
			return out
		}
	}
	return hs
}

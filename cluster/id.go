package cluster

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/hourglassmq/hourglass/message"
)

// Limits of cluster IDs. They are part of the ID format: a message's
// partition and its intake stream sequence share message.ID.Seq.
const (
	// seqBits is how many low bits of ID.Seq hold the intake sequence.
	seqBits = 48
	// MaxSeq is the largest intake stream sequence an ID can carry.
	MaxSeq = 1<<seqBits - 1
	// MaxPartitions bounds the number of partitions (16 bits of ID.Seq).
	MaxPartitions = 1 << (64 - seqBits)
)

// MakeID returns the cluster ID of the message stored at intake sequence
// seq of partition p, due at deliverAt (UTC ms).
func MakeID(p int, seq uint64, deliverAt int64) message.ID {
	return message.ID{DeliverAt: deliverAt, Seq: uint64(p)<<seqBits | seq&MaxSeq}
}

// SplitID returns the partition and the intake sequence of a cluster ID.
func SplitID(id message.ID) (p int, seq uint64) {
	return int(id.Seq >> seqBits), id.Seq & MaxSeq
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

// msgID is the Nats-Msg-Id of a keyed message's intake publish.
func msgID(topic, key string) string { return topic + "\x00" + key }

// inSubject, inStream, doneSubject and doneStream name partition p's
// JetStream objects.
func inSubject(p int) string   { return fmt.Sprintf("hg.in.%d", p) }
func inStream(p int) string    { return fmt.Sprintf("HG_IN_%d", p) }
func doneSubject(p int) string { return fmt.Sprintf("hg.done.%d", p) }
func doneStream(p int) string  { return fmt.Sprintf("HG_DONE_%d", p) }
func ownerKey(p int) string    { return fmt.Sprintf("p%03d", p) }

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

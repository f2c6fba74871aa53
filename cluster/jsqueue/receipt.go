package jsqueue

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// A receipt is when the node got the delivery (UTC ms, decimal), '/', and
// the reply subject JetStream gave the delivery: the subject its consumer
// takes acks on. The subject names the stream, the consumer, how many
// times the message was delivered and its stream and consumer sequences;
// nats-server writes it in one of two forms:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<stored>.<pending>
//	$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<stored>.<pending>[.<token>...]
//
// Any node may ack with it: the consumer's leader answers whoever sends to
// that subject. (Its <stored> is when the stream stored the message, not
// when it was delivered: the lease starts at the receipt's own time.)
type receipt struct {
	subject   string
	stream    string
	consumer  string
	delivered uint64 // 1 on the first delivery
	sseq      uint64 // the message's sequence in the delivery stream
	got       int64  // when the node got the delivery, UTC ms
}

// formatReceipt is the receipt of a delivery the node got at got.
func formatReceipt(got time.Time, subject string) string {
	return strconv.FormatInt(got.UnixMilli(), 10) + "/" + subject
}

// parseReceipt decodes a receipt; ok is false for anything that is not
// one (so that a node never publishes to a subject a client made up).
func parseReceipt(s string) (r receipt, ok bool) {
	if len(s) > maxReceipt {
		return r, false
	}
	ms, subj, found := strings.Cut(s, "/")
	got, err := strconv.ParseInt(ms, 10, 64)
	if !found || err != nil || got < 0 || strconv.FormatInt(got, 10) != ms {
		return r, false
	}
	r, ok = parseAckSubject(subj)
	r.got = got
	return r, ok
}

// parseAckSubject decodes a JetStream ack subject.
func parseAckSubject(s string) (r receipt, ok bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(s, prefix) {
		return r, false
	}
	toks := strings.Split(s[len(prefix):], ".")
	for _, t := range toks {
		if t == "" || strings.ContainsAny(t, "*> \t\r\n") {
			return r, false
		}
	}
	off := 0
	switch {
	case len(toks) == 7:
	case len(toks) >= 9:
		off = 2
	default:
		return r, false
	}
	var nums [5]uint64
	for i := range nums {
		n, err := strconv.ParseUint(toks[off+2+i], 10, 64)
		if err != nil {
			return r, false
		}
		nums[i] = n
	}
	if nums[0] == 0 || nums[1] == 0 {
		return r, false
	}
	return receipt{subject: s, stream: toks[off], consumer: toks[off+1], delivered: nums[0], sseq: nums[1]}, true
}

// maxReceipt bounds a receipt's length: the longest stream and consumer
// names (255 bytes each) and a domain and account with numbers to spare.
const maxReceipt = 1024

// ConsumerName is the durable consumer of topic on the delivery stream:
// "hg_" and the topic with '.' made '_' (a consumer name holds no '.'),
// then 8 hex digits of the topic's SHA-256, so that topics that differ
// only in '.' and '_' get different consumers.
func ConsumerName(topic string) string {
	sum := sha256.Sum256([]byte(topic))
	return "hg_" + strings.ReplaceAll(topic, ".", "_") + "_" + hex.EncodeToString(sum[:4])
}

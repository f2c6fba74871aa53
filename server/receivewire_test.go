package server

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// checkAppendReceived holds appendReceived to proto.Marshal of what the
// Receive handler answers for msgs.
func checkAppendReceived(t *testing.T, msgs []queue.Message) {
	t.Helper()
	want, err := proto.Marshal(&hourglassv1.ReceiveResponse{Messages: toMessages(msgs)})
	got, ok := appendReceived([]byte("prefix"), msgs)
	if !ok {
		if string(got) != "prefix" {
			t.Fatalf("appendReceived refused %+v but wrote %q", msgs, got)
		}
		// Only for texts that are not UTF-8.
		for _, m := range msgs {
			if !validText(m) {
				return
			}
		}
		t.Fatalf("appendReceived refused %+v (proto.Marshal: %v)", msgs, err)
	}
	if err != nil {
		t.Fatalf("appendReceived encoded %+v, which proto.Marshal refuses: %v", msgs, err)
	}
	if !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
		t.Fatalf("appendReceived(%+v)\n= %x\nproto.Marshal\n= %x", msgs, got, want)
	}
}

func validText(m queue.Message) bool {
	ok := func(b []byte) bool { return bytes.Equal(bytes.ToValidUTF8(b, nil), b) }
	for _, h := range m.Headers {
		if !ok(h.Key) || !ok(h.Value) {
			return false
		}
	}
	return ok([]byte(m.Topic)) && ok([]byte(m.Receipt))
}

func receivedSample(i int) queue.Message {
	at := time.Date(2026, 11, 30, 5, 0, 0, 123_000_000, time.UTC)
	id := message.ID{DeliverAt: at.UnixMilli(), Seq: uint64(i) * 4096}
	return queue.Message{ID: id, Topic: "orders", Body: bytes.Repeat([]byte{'b'}, i), DeliverAt: id.DeliverAt,
		ReceivedAt: at.Add(time.Duration(i) * time.Nanosecond), LeaseUntil: at.Add(30 * time.Second), Receipt: "r.1"}
}

func TestAppendReceivedMatchesProto(t *testing.T) {
	retry := receivedSample(3)
	retry.Attempt, retry.Origin = 2, message.ID{DeliverAt: 5, Seq: 9}
	same := receivedSample(4)
	same.Origin = same.ID
	headers := receivedSample(5)
	headers.Headers = []message.Header{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("e")}, {}}
	old := receivedSample(6)
	old.DeliverAt, old.ReceivedAt, old.LeaseUntil = -1_001, time.Time{}, time.Unix(0, 0)
	empty := queue.Message{}
	badHeader := receivedSample(7)
	badHeader.Headers = []message.Header{{Key: []byte{0xff}, Value: []byte("v")}}
	badTopic := receivedSample(8)
	badTopic.Topic = "\xc3"
	big := make([]queue.Message, 1000)
	for i := range big {
		big[i] = receivedSample(i % 300)
	}
	for name, msgs := range map[string][]queue.Message{
		"none":       nil,
		"one":        {receivedSample(1)},
		"no_body":    {receivedSample(0)},
		"retry":      {retry, same},
		"headers":    {headers},
		"old_times":  {old},
		"zero":       {empty},
		"bad_header": {receivedSample(1), badHeader},
		"bad_topic":  {badTopic},
		"1000":       big,
	} {
		t.Run(name, func(t *testing.T) { checkAppendReceived(t, msgs) })
	}
}

func FuzzAppendReceived(f *testing.F) {
	f.Add("orders", []byte("body"), "k", "v", int64(1_700_000_000_123), uint32(0), int64(5), int64(7), int64(-3), "r.1")
	f.Add("", []byte{}, "", "", int64(-1), uint32(1<<31), int64(-62135596800_000_000), int64(0), int64(0), "")
	f.Add("t", []byte{0xff}, "\xff", "\xc3", int64(0), uint32(3), int64(1), int64(2), int64(3), "\xff")
	f.Fuzz(func(t *testing.T, topic string, body []byte, key, value string, deliverAt int64, attempt uint32, received, lease, origin int64, receipt string) {
		m := queue.Message{ID: message.ID{DeliverAt: deliverAt, Seq: uint64(received)}, Topic: topic, Body: body, DeliverAt: deliverAt,
			Attempt: attempt, ReceivedAt: time.Unix(0, received), LeaseUntil: time.Unix(lease, received%1e9), Receipt: receipt}
		if origin != 0 {
			m.Origin = message.ID{DeliverAt: origin, Seq: uint64(origin)}
		}
		if key != "" || value != "" {
			m.Headers = []message.Header{{Key: []byte(key), Value: []byte(value)}}
		}
		checkAppendReceived(t, []queue.Message{m, receivedSample(2)})
	})
}

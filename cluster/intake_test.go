package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/message"
)

func intakeSample() []message.Message {
	return []message.Message{
		{DeliverAt: 1_700_000_000_000, Topic: []byte("orders"), Body: []byte("a")},
		{DeliverAt: 1_700_000_000_500, Attempt: 2, Topic: []byte("mail"), Body: []byte("bb"),
			Headers: []message.Header{{Key: []byte("k"), Value: []byte("v")}}, Origin: message.ID{DeliverAt: 5, Seq: 6}},
	}
}

func TestIntakeRoundTrip(t *testing.T) {
	want := intakeSample()
	src := AppendIntake(nil, want)
	prefix := []message.Message{{Body: []byte("kept")}}
	got, err := DecodeIntake(src, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[0].Body) != "kept" {
		t.Fatalf("decoded %d messages, want the prefix kept and 2 appended", len(got))
	}
	for i, m := range got[1:] {
		if !bytes.Equal(message.AppendSchedule(nil, &m), message.AppendSchedule(nil, &want[i])) {
			t.Fatalf("message %d: %+v, want %+v", i, m, want[i])
		}
	}
	// The largest batch fits the ID's index field.
	big := make([]message.Message, MaxBatch)
	for i := range big {
		big[i] = message.Message{DeliverAt: int64(i), Topic: []byte("t")}
	}
	got, err = DecodeIntake(AppendIntake(nil, big), nil)
	if err != nil || len(got) != MaxBatch || got[MaxBatch-1].DeliverAt != MaxBatch-1 {
		t.Fatalf("batch of %d: %d messages, err %v", MaxBatch, len(got), err)
	}
}

func TestDecodeIntakeRefuses(t *testing.T) {
	good := AppendIntake(nil, intakeSample())
	v1 := message.AppendSchedule(nil, &intakeSample()[0])
	tooMany := appendIntakeHeader(nil, MaxBatch+1)
	for _, tc := range []struct {
		name, src, want string
	}{
		{"empty", "", "version -1"},
		{"version_1_bare_schedule", string(v1), "version 1, want 2"},
		{"zero_count", string([]byte{intakeVersion, 0}), "message count 0"},
		{"count_over_max", string(tooMany), "want 1 to 1024"},
		{"truncated_length", string(good[:len(good)-1]), "past the end"},
		{"missing_message", string(appendIntakeHeader(nil, 3)) + string(good[2:]), "message 2 of 3"},
		{"trailing_byte", string(good) + "x", "1 bytes after the last of 2 messages"},
		{"bad_schedule", string([]byte{intakeVersion, 1, 1, 9}), "message 0 of 1 at offset 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []message.Message{{Body: []byte("kept")}}
			got, err := DecodeIntake([]byte(tc.src), prefix)
			if !errors.Is(err, ErrBadIntake) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want ErrBadIntake naming %q", err, tc.want)
			}
			if len(got) != 1 {
				t.Fatalf("%d messages handed out on error; want only the prefix", len(got))
			}
		})
	}
}

func FuzzDecodeIntake(f *testing.F) {
	f.Add(AppendIntake(nil, intakeSample()))
	f.Add(AppendIntake(nil, intakeSample()[:1]))
	f.Add([]byte{intakeVersion, 1, 0})
	f.Fuzz(func(t *testing.T, src []byte) {
		ms, err := DecodeIntake(src, nil)
		if err != nil {
			if len(ms) != 0 {
				t.Fatalf("%d messages handed out with error %v", len(ms), err)
			}
			return
		}
		if len(ms) < 1 || len(ms) > MaxBatch {
			t.Fatalf("decoded %d messages", len(ms))
		}
		// Uvarints have non-minimal encodings: the re-encoding must decode
		// to the same messages, not be the same bytes.
		again, err := DecodeIntake(AppendIntake(nil, ms), nil)
		if err != nil || len(again) != len(ms) {
			t.Fatalf("re-encoding of %d messages: %d, %v", len(ms), len(again), err)
		}
		for i := range ms {
			if !reflect.DeepEqual(message.AppendSchedule(nil, &ms[i]), message.AppendSchedule(nil, &again[i])) {
				t.Fatalf("message %d changed in a round trip", i)
			}
		}
	})
}

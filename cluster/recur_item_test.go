package cluster

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestControlItem: a schedule's control items round trip through an
// intake message (a put, a delete, a copy with its origin); a message is
// not one; malformed ones are refused saying what is wrong.
func TestControlItem(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	put := message.Control{Kind: message.ControlSchedule, Name: []byte("daily"), Value: []byte(`{"topic":"t","spec":"@daily"}`)}
	del := message.Control{Kind: message.ControlScheduleDelete, Name: []byte("daily")}
	h := func(k string, v []byte) message.Header { return message.Header{Key: []byte(k), Value: v} }
	for _, tc := range []struct {
		name    string
		item    message.Message
		want    message.Control
		origin  uint64
		control bool
		err     string
	}{
		{"put", controlItem(put, 0, now), put, 0, true, ""},
		{"delete", controlItem(del, 0, now), del, 0, true, ""},
		{"copy", controlItem(put, 77, now), put, 77, true, ""},
		{"message", message.Message{DeliverAt: 1, Topic: []byte("t"), Headers: []message.Header{h("k", []byte("v"))}}, message.Control{}, 0, false, ""},
		{"both_kinds", message.Message{Headers: []message.Header{h(recurPutHeader, []byte("a")), h(recurDeleteHeader, []byte("a"))}}, message.Control{}, 0, true, "want one"},
		{"put_twice", message.Message{Headers: []message.Header{h(recurPutHeader, []byte("a")), h(recurPutHeader, []byte("b"))}}, message.Control{}, 0, true, "want one"},
		{"short_origin", message.Message{Headers: []message.Header{h(recurPutHeader, []byte("a")), h(recurOriginHeader, []byte{1, 2})}}, message.Control{}, 0, true, "of 2 bytes"},
		{"origin_twice", message.Message{Headers: []message.Header{h(recurPutHeader, []byte("a")), h(recurOriginHeader, make([]byte, 8)), h(recurOriginHeader, make([]byte, 8))}}, message.Control{}, 0, true, "twice"},
		{"origin_alone", message.Message{Headers: []message.Header{h(recurOriginHeader, make([]byte, 8))}}, message.Control{}, 0, true, "want one"},
		{"no_name", message.Message{Headers: []message.Header{h(recurDeleteHeader, nil)}}, message.Control{}, 0, true, "without a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := DecodeIntake(AppendIntake(nil, []message.Message{tc.item}), nil)
			if err != nil {
				t.Fatal(err)
			}
			c, origin, control, err := itemControl(&ms[0])
			if control != tc.control {
				t.Fatalf("control %v; want %v", control, tc.control)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v; want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || c.Kind != tc.want.Kind || !bytes.Equal(c.Name, tc.want.Name) || !bytes.Equal(c.Value, tc.want.Value) || origin != tc.origin {
				t.Fatalf("itemControl = %+v, %d, %v; want %+v, %d", c, origin, err, tc.want, tc.origin)
			}
		})
	}
}

// FuzzItemControl: whatever decodes as an intake message, itemControl
// either refuses an item or, for a control item, returns one that
// controlItem encodes back to an item read the same.
func FuzzItemControl(f *testing.F) {
	now := time.UnixMilli(1_700_000_000_000)
	f.Add(AppendIntake(nil, []message.Message{
		controlItem(message.Control{Kind: message.ControlSchedule, Name: []byte("n"), Value: []byte("{}")}, 0, now),
		controlItem(message.Control{Kind: message.ControlScheduleDelete, Name: []byte("n")}, 9, now),
		{DeliverAt: 1, Topic: []byte("t")},
	}))
	f.Fuzz(func(t *testing.T, src []byte) {
		ms, err := DecodeIntake(src, nil)
		if err != nil {
			return
		}
		for i := range ms {
			c, origin, control, err := itemControl(&ms[i])
			if !control || err != nil {
				continue
			}
			again := controlItem(c, origin, now)
			c2, o2, control2, err := itemControl(&again)
			if !control2 || err != nil || c2.Kind != c.Kind || !bytes.Equal(c2.Name, c.Name) || o2 != origin ||
				(c.Kind == message.ControlSchedule && !bytes.Equal(c2.Value, c.Value)) {
				t.Fatalf("item %d: %+v origin %d read back as %+v origin %d (%v, %v)", i, c, origin, c2, o2, control2, err)
			}
		}
	})
}

package client

import (
	"context"
	"errors"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func TestMessageRequest(t *testing.T) {
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		m       Message
		wantErr bool
		check   func(*hourglassv1.ScheduleRequest) bool
	}{
		{"now", Message{Topic: "t"}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.When == nil }},
		{"delay_rounds_up", Message{Topic: "t", Delay: 1500 * time.Microsecond}, false,
			func(r *hourglassv1.ScheduleRequest) bool { return r.GetDelayMs() == 2 }},
		{"at", Message{Topic: "t", At: at}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.GetDeliverAt().AsTime().Equal(at) }},
		{"level", Message{Topic: "t", Level: 3}, false, func(r *hourglassv1.ScheduleRequest) bool { return r.GetDelayLevel() == 3 }},
		{"headers", Message{Topic: "t", Headers: map[string]string{"k": "v"}}, false,
			func(r *hourglassv1.ScheduleRequest) bool {
				return len(r.Headers) == 1 && r.Headers[0].Key == "k" && r.Headers[0].Value == "v"
			}},
		{"delay_and_level", Message{Topic: "t", Delay: time.Second, Level: 1}, true, nil},
		{"at_and_delay", Message{Topic: "t", Delay: time.Second, At: at}, true, nil},
		{"negative_delay", Message{Topic: "t", Delay: -time.Second}, true, nil},
		{"negative_level", Message{Topic: "t", Level: -1}, true, nil},
	} {
		r, err := tc.m.request()
		if tc.wantErr {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("%s: err = %v, want ErrInvalidMessage", tc.name, err)
			}
			continue
		}
		if err != nil || !tc.check(r) {
			t.Errorf("%s: %v, %v", tc.name, r, err)
		}
	}
}

func TestDefaultRetryDelay(t *testing.T) {
	for f, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := DefaultRetryDelay(f); got != want {
			t.Errorf("DefaultRetryDelay(%d) = %v, want %v", f, got, want)
		}
	}
}

// TestProducerClosedAndInvalid needs no server: refused messages and a
// closed producer answer at once.
func TestProducerClosedAndInvalid(t *testing.T) {
	p := NewProducer(New("http://127.0.0.1:1"), ProducerOptions{})
	ctx := context.Background()
	if _, err := p.Send(ctx, Message{Topic: "t", Level: 1, Delay: time.Second}).Wait(ctx); !errors.Is(err, ErrInvalidMessage) {
		t.Errorf("invalid message: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Errorf("Flush of nothing: %v", err)
	}
	p.Close()
	if _, err := p.Send(ctx, Message{Topic: "t"}).Wait(ctx); !errors.Is(err, ErrProducerClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, ErrProducerClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}

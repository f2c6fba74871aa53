package jsqueue

import (
	"strings"
	"testing"
	"time"
)

func TestParseReceipt(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
		want receipt
	}{
		{name: "v1", in: "1700000000123/$JS.ACK.HOURGLASS.hg_orders_1.3.42.7.1700000000000000000.5", ok: true,
			want: receipt{stream: "HOURGLASS", consumer: "hg_orders_1", delivered: 3, sseq: 42, got: 1700000000123}},
		{name: "v2", in: "5/$JS.ACK.dom.ACCHASH.HOURGLASS.hg_x.1.9.9.17.0", ok: true,
			want: receipt{stream: "HOURGLASS", consumer: "hg_x", delivered: 1, sseq: 9, got: 5}},
		{name: "v2_token", in: "0/$JS.ACK.dom.ACCHASH.HOURGLASS.hg_x.1.9.9.17.0.abc", ok: true,
			want: receipt{stream: "HOURGLASS", consumer: "hg_x", delivered: 1, sseq: 9}},
		{name: "no_time", in: "$JS.ACK.HOURGLASS.hg_x.1.9.9.17.0"},
		{name: "bad_time", in: "+5/$JS.ACK.HOURGLASS.hg_x.1.9.9.17.0"},
		{name: "negative_time", in: "-5/$JS.ACK.HOURGLASS.hg_x.1.9.9.17.0"},
		{name: "other_prefix", in: "1/$JS.API.HOURGLASS.hg_x.1.9.9.17.0"},
		{name: "short", in: "1/$JS.ACK.HOURGLASS.hg_x.1.9.9.17"},
		{name: "eight_tokens", in: "1/$JS.ACK.a.HOURGLASS.hg_x.1.9.9.17.0"},
		{name: "not_a_number", in: "1/$JS.ACK.HOURGLASS.hg_x.one.9.9.17.0"},
		{name: "wildcard", in: "1/$JS.ACK.HOURGLASS.*.1.9.9.17.0"},
		{name: "full_wildcard", in: "1/$JS.ACK.HOURGLASS.hg_x.1.9.9.17.>"},
		{name: "empty_token", in: "1/$JS.ACK.HOURGLASS..1.9.9.17.0"},
		{name: "zero_delivered", in: "1/$JS.ACK.HOURGLASS.hg_x.0.9.9.17.0"},
		{name: "zero_seq", in: "1/$JS.ACK.HOURGLASS.hg_x.1.0.9.17.0"},
		{name: "space", in: "1/$JS.ACK.HOURGLASS.hg x.1.9.9.17.0"},
		{name: "too_long", in: "1/$JS.ACK.HOURGLASS." + strings.Repeat("x", 1100) + ".1.9.9.17.0"},
		{name: "receipt_of_one_node", in: "0123456789abcdef0123456789abcdef-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := parseReceipt(tc.in)
			if ok != tc.ok {
				t.Fatalf("parseReceipt(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			}
			if !ok {
				return
			}
			_, tc.want.subject, _ = strings.Cut(tc.in, "/")
			if r != tc.want {
				t.Errorf("parseReceipt(%q) = %+v, want %+v", tc.in, r, tc.want)
			}
		})
	}
}

func FuzzParseReceipt(f *testing.F) {
	f.Add("1700000000123/$JS.ACK.HOURGLASS.hg_orders_1.3.42.7.1700000000000000000.5")
	f.Add("0/$JS.ACK.dom.ACCHASH.HOURGLASS.hg_x.1.9.9.17.0.abc")
	f.Fuzz(func(t *testing.T, s string) {
		r, ok := parseReceipt(s)
		if !ok {
			return
		}
		// Whatever parses is a time and an ack subject a node may publish
		// to: no wildcard, no empty token, and the fields are in it.
		subj := r.subject
		if !strings.HasPrefix(subj, "$JS.ACK.") || strings.ContainsAny(subj, "*> \t\r\n") || strings.Contains(subj, "..") || strings.HasSuffix(subj, ".") {
			t.Fatalf("parsed %q", s)
		}
		if formatReceipt(time.UnixMilli(r.got), subj) != s || !strings.Contains(subj, "."+r.stream+"."+r.consumer+".") || r.delivered == 0 || r.sseq == 0 {
			t.Fatalf("parseReceipt(%q) = %+v", s, r)
		}
	})
}

func TestConsumerName(t *testing.T) {
	names := map[string]string{}
	for _, topic := range []string{"orders", "orders.eu", "orders_eu", "orders.dlq", "a-b", "_x." + strings.Repeat("y", 195) + ".dlq"} {
		n := ConsumerName(topic)
		if strings.ContainsAny(n, " \t\r\n\f.*>/\\") || len(n) > 255 {
			t.Errorf("ConsumerName(%q) = %q: not a valid JetStream name", topic, n)
		}
		if other, dup := names[n]; dup {
			t.Errorf("topics %q and %q share consumer %q", other, topic, n)
		}
		names[n] = topic
	}
}

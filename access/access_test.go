package access

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"strings"
	"testing"
)

var good = `
credentials:
  - name: ops
    token_sha256: ` + Digest("ops-token") + `
    role: admin
    topics: ["*"]
  - name: orders-producer
    token_sha256: ` + Digest("orders-token") + `
    role: producer
    topics: ["orders", "orders.*"]
  - name: billing
    certificate: ["billing.internal", "spiffe://example/billing"]
    verbs: [consume, read]
    topics: ["billing"]
`

func TestParse(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := s.Token("orders-token")
	if !ok || c.Name != "orders-producer" {
		t.Fatalf("Token(orders-token) = %v, %v", c, ok)
	}
	if _, ok := s.Token("orders-token "); ok {
		t.Error("a token with a trailing space matched")
	}
	if _, ok := s.Token(Digest("orders-token")); ok {
		t.Error("the digest itself was taken as the token")
	}
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "someone"}, URIs: []*url.URL{{Scheme: "spiffe", Host: "example", Path: "/billing"}}}
	if c, ok := s.Certificate(cert); !ok || c.Name != "billing" {
		t.Errorf("Certificate by URI SAN = %v, %v", c, ok)
	}
	if _, ok := s.Certificate(&x509.Certificate{Subject: pkix.Name{CommonName: "nobody"}}); ok {
		t.Error("an unknown certificate matched")
	}
}

func TestParseErrors(t *testing.T) {
	d := Digest("x")
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown_field", "credentials: [{name: a, token: x, role: admin, topics: ['*']}]", "field token not found"},
		{"no_name", "credentials: [{token_sha256: " + d + ", role: admin, topics: ['*']}]", "credential 1: needs a name"},
		{"duplicate_name", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['*']}, {name: a, token_sha256: " + Digest("y") + ", role: admin, topics: ['*']}]", "name is taken"},
		{"raw_token", "credentials: [{name: a, token_sha256: secret, role: admin, topics: ['*']}]", "never the token itself"},
		{"same_token", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['*']}, {name: b, token_sha256: " + d + ", role: admin, topics: ['*']}]", `credential "a"'s too`},
		{"bad_role", "credentials: [{name: a, token_sha256: " + d + ", role: root, topics: ['*']}]", `role "root" is not one of admin, producer, consumer, viewer`},
		{"bad_verb", "credentials: [{name: a, token_sha256: " + d + ", verbs: [delete], topics: ['*']}]", `verb "delete" is not one of produce, consume`},
		{"role_and_verbs", "credentials: [{name: a, token_sha256: " + d + ", role: admin, verbs: [read], topics: ['*']}]", "a role or verbs, not both"},
		{"no_topics", "credentials: [{name: a, token_sha256: " + d + ", role: admin}]", "needs topics"},
		{"bad_pattern", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['[']}]", `topic pattern "["`},
		{"no_secret", "credentials: [{name: a, role: admin, topics: ['*']}]", "needs token_sha256"},
		{"quota_unknown_field", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['*'], quota: {pending_messages: 1}}]", "field pending_messages not found"},
		{"quota_empty", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['*'], quota: {}}]", "needs max_pending_messages, max_pending_bytes or both"},
		{"quota_negative", "quotas: [{topics: 'a.*', max_pending_bytes: -1}]", "quota 1 (topics \"a.*\"): max_pending_messages 0, max_pending_bytes -1: neither may be negative"},
		{"quota_no_topics", "quotas: [{max_pending_messages: 5}]", "needs topics"},
		{"quota_credential_topics", "credentials: [{name: a, token_sha256: " + d + ", role: admin, topics: ['*'], quota: {topics: x, max_pending_messages: 1}}]", "takes no topics of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestAllow(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	prod, _ := s.Token("orders-token")
	admin, _ := s.Token("ops-token")
	for _, tc := range []struct {
		name  string
		c     *Credential
		verb  Verb
		topic string
		want  string // "" allowed, else part of the error
	}{
		{"producer_own_topic", prod, Produce, "orders", ""},
		{"producer_pattern", prod, Produce, "orders.eu", ""},
		{"producer_other_topic", prod, Produce, "payments", `may not produce on topic "payments": its topics are orders, orders.*`},
		{"producer_consume", prod, Consume, "orders", "its role producer allows produce, cancel, read"},
		{"producer_no_topic", prod, Read, "", `may not read on every topic`},
		{"admin_no_topic", admin, Manage, "", ""},
		{"admin_any", admin, Audit, "x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Allow(tc.verb, tc.topic)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var de *DeniedError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a DeniedError containing %q", err, tc.want)
			}
		})
	}
}

// FuzzParse: no content makes Parse panic, and a Set it accepts answers.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("credentials: [{name: a}]"))
	f.Add([]byte("credentials: [{name: a, certificate: [x], verbs: [read, read], topics: ['o.*']}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		for _, c := range s.Credentials() {
			if c.Name == "" || len(c.Topics) == 0 || len(c.verbs) == 0 {
				t.Fatalf("accepted an incomplete credential %+v", c)
			}
		}
	})
}

func TestQuotas(t *testing.T) {
	s, err := Parse([]byte(`
credentials:
  - {name: app, token_sha256: ` + Digest("a") + `, role: producer, topics: ["orders.*"], quota: {max_pending_messages: 10}}
  - {name: other, token_sha256: ` + Digest("b") + `, role: producer, topics: ["*"]}
quotas:
  - {topics: "orders.eu", max_pending_bytes: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	app, _ := s.Token("a")
	other, _ := s.Token("b")
	if !s.HasQuotas() {
		t.Error("HasQuotas = false")
	}
	qs := s.Quotas(app)
	if len(qs) != 2 || qs[0].Name != `credential "app"` || qs[0].MaxPendingMessages != 10 || qs[1].Name != `topics "orders.eu"` || qs[1].MaxPendingBytes != 1000 {
		t.Fatalf("Quotas(app) = %+v", qs)
	}
	if !qs[0].Applies("orders.us") || qs[0].Applies("payments") || !qs[1].Applies("orders.eu") || qs[1].Applies("orders.us") {
		t.Error("Applies does not follow the patterns")
	}
	if qs := s.Quotas(other); len(qs) != 1 || qs[0].Name != `topics "orders.eu"` {
		t.Errorf("Quotas(other) = %+v; want the pattern's only", qs)
	}
	if qs := s.Quotas(Admin("admin")); len(qs) != 1 {
		t.Errorf("Quotas(--auth-token's admin) = %+v; want the pattern's only", qs)
	}
}

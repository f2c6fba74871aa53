package access

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DigestPrefix starts a token's digest in a credentials file.
const DigestPrefix = "sha256:"

// fileCredential is one entry of the credentials file, as written.
type fileCredential struct {
	Name        string   `yaml:"name"`
	Token       string   `yaml:"token_sha256"`
	Certificate []string `yaml:"certificate"`
	Role        string   `yaml:"role"`
	Verbs       []string `yaml:"verbs"`
	Topics      []string `yaml:"topics"`
	// Quota bounds what the credential's topics hold pending.
	Quota *fileQuota `yaml:"quota"`
}

type file struct {
	Credentials []fileCredential `yaml:"credentials"`
	// Quotas bound what the topics of a pattern hold pending.
	Quotas []fileQuota `yaml:"quotas"`
}

// Set is the credentials of one credentials file. It is immutable and
// safe for concurrent use.
type Set struct {
	byDigest  map[[sha256.Size]byte]*Credential
	bySubject map[string]*Credential
	all       []*Credential
	quotas    []*Quota // the file's quotas list
}

// Digest returns the digest a credentials file stores for token:
// "sha256:" and 64 hex digits.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return DigestPrefix + hex.EncodeToString(d[:])
}

// Load reads and checks a credentials file.
func Load(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse checks a credentials file's content (YAML; docs/OPERATIONS.md
// "Access" describes it) and returns its Set. Every mistake is an
// ErrInvalid that names the entry and what is allowed.
func Parse(b []byte) (*Set, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s := &Set{byDigest: map[[sha256.Size]byte]*Credential{}, bySubject: map[string]*Credential{}}
	names := map[string]bool{}
	for i, fc := range f.Credentials {
		c, err := s.add(fc, names)
		if err != nil {
			who := fmt.Sprintf("credential %d", i+1)
			if fc.Name != "" {
				who = fmt.Sprintf("credential %q", fc.Name)
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, who, err)
		}
		s.all = append(s.all, c)
	}
	for i, fq := range f.Quotas {
		q, err := topicQuota(fq)
		if err != nil {
			return nil, fmt.Errorf("%w: quota %d (topics %q): %v", ErrInvalid, i+1, fq.Topics, err)
		}
		s.quotas = append(s.quotas, q)
	}
	return s, nil
}

func (s *Set) add(fc fileCredential, names map[string]bool) (*Credential, error) {
	if fc.Name == "" {
		return nil, errors.New("needs a name")
	}
	if names[fc.Name] {
		return nil, errors.New("the name is taken by an earlier credential")
	}
	names[fc.Name] = true
	verbs, err := parseVerbs(fc.Role, fc.Verbs)
	if err != nil {
		return nil, err
	}
	if err := checkPatterns(fc.Topics); err != nil {
		return nil, err
	}
	c := &Credential{Name: fc.Name, Role: fc.Role, Topics: fc.Topics, verbs: verbs}
	if fq := fc.Quota; fq != nil {
		if err := fq.check(true); err != nil {
			return nil, err
		}
		c.quota = &Quota{Name: fmt.Sprintf("credential %q", c.Name), MaxPendingMessages: fq.MaxPendingMessages, MaxPendingBytes: fq.MaxPendingBytes, applies: c.Covers}
	}
	if fc.Token == "" && len(fc.Certificate) == 0 {
		return nil, errors.New("needs token_sha256 (hourglass credentials hash makes one) or certificate (names of client certificates)")
	}
	if fc.Token != "" {
		d, err := parseDigest(fc.Token)
		if err != nil {
			return nil, err
		}
		if other, ok := s.byDigest[d]; ok {
			return nil, fmt.Errorf("its token is credential %q's too: each token names one credential", other.Name)
		}
		s.byDigest[d] = c
	}
	for _, n := range fc.Certificate {
		if n == "" {
			return nil, errors.New("a certificate name is empty")
		}
		if other, ok := s.bySubject[n]; ok {
			return nil, fmt.Errorf("certificate name %q is credential %q's too", n, other.Name)
		}
		s.bySubject[n] = c
	}
	return c, nil
}

func parseDigest(s string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	h, ok := strings.CutPrefix(s, DigestPrefix)
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != sha256.Size {
		return d, fmt.Errorf("token_sha256 must be %q and 64 hex digits, as hourglass credentials hash prints it (never the token itself)", DigestPrefix)
	}
	copy(d[:], b)
	return d, nil
}

// Token returns the credential of a bearer token. Tokens are compared by
// their SHA-256 digests: what a lookup's time tells is about the digest
// of the guess, not about a token.
func (s *Set) Token(token string) (*Credential, bool) {
	if s == nil {
		return nil, false
	}
	c, ok := s.byDigest[sha256.Sum256([]byte(token))]
	return c, ok
}

// Certificate returns the credential of a verified client certificate:
// the first of its subject's common name, its DNS names, email addresses
// and URIs that a credential's certificate list names.
func (s *Set) Certificate(cert *x509.Certificate) (*Credential, bool) {
	if s == nil || cert == nil {
		return nil, false
	}
	for _, n := range CertificateNames(cert) {
		if c, ok := s.bySubject[n]; ok {
			return c, true
		}
	}
	return nil, false
}

// CertificateNames are the names a certificate may be matched by, in the
// order they are tried: the subject's common name, then its SANs (DNS
// names, email addresses, URIs).
func CertificateNames(cert *x509.Certificate) []string {
	var ns []string
	if cert.Subject.CommonName != "" {
		ns = append(ns, cert.Subject.CommonName)
	}
	ns = append(ns, cert.DNSNames...)
	ns = append(ns, cert.EmailAddresses...)
	for _, u := range cert.URIs {
		ns = append(ns, u.String())
	}
	return ns
}

// Credentials returns every credential of the file, in its order.
func (s *Set) Credentials() []*Credential {
	if s == nil {
		return nil
	}
	return s.all
}

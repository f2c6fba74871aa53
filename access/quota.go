package access

import (
	"errors"
	"fmt"
	"path"
)

// Quota bounds what the topics it applies to may hold pending (scheduled
// and not yet handed to consumers, cancelled or expired): a Schedule that
// would take them past it is refused. It is a credential's (the topics its
// patterns cover, whoever scheduled their messages; checked on that
// credential's calls) or a topic pattern's (checked on every call).
type Quota struct {
	// Name says whose quota it is, for errors: `credential "orders-app"`,
	// `topics "orders.*"`.
	Name string
	// MaxPendingMessages and MaxPendingBytes are the limits; 0 is none.
	MaxPendingMessages int64
	MaxPendingBytes    int64

	applies func(topic string) bool
}

// Applies reports whether topic counts against q.
func (q *Quota) Applies(topic string) bool { return q.applies(topic) }

// fileQuota is a quota as the credentials file writes it: in a
// credential's entry (quota:), or in the file's quotas list with the
// pattern of the topics it bounds.
type fileQuota struct {
	Topics             string `yaml:"topics"`
	MaxPendingMessages int64  `yaml:"max_pending_messages"`
	MaxPendingBytes    int64  `yaml:"max_pending_bytes"`
}

func (fq fileQuota) check(inCredential bool) error {
	if inCredential && fq.Topics != "" {
		return errors.New("a credential's quota bounds the credential's topics: it takes no topics of its own (use the file's quotas list for a pattern)")
	}
	if fq.MaxPendingMessages < 0 || fq.MaxPendingBytes < 0 {
		return fmt.Errorf("max_pending_messages %d, max_pending_bytes %d: neither may be negative (0 is no limit)", fq.MaxPendingMessages, fq.MaxPendingBytes)
	}
	if fq.MaxPendingMessages == 0 && fq.MaxPendingBytes == 0 {
		return errors.New("a quota needs max_pending_messages, max_pending_bytes or both")
	}
	return nil
}

// topicQuota returns the quota of a pattern of the file's quotas list.
func topicQuota(fq fileQuota) (*Quota, error) {
	if fq.Topics == "" {
		return nil, errors.New(`needs topics: the pattern of the topics it bounds, such as "orders.*"`)
	}
	if err := checkPatterns([]string{fq.Topics}); err != nil {
		return nil, err
	}
	if err := fq.check(false); err != nil {
		return nil, err
	}
	p := fq.Topics
	return &Quota{Name: fmt.Sprintf("topics %q", p), MaxPendingMessages: fq.MaxPendingMessages, MaxPendingBytes: fq.MaxPendingBytes,
		applies: func(t string) bool {
			ok, _ := path.Match(p, t)
			return ok || p == "*"
		}}, nil
}

// Quotas returns the quotas a call of c must keep: c's own and every
// topic pattern's of the file.
func (s *Set) Quotas(c *Credential) []*Quota {
	if s == nil {
		return nil
	}
	qs := s.quotas
	if c != nil && c.quota != nil && s.has(c) {
		qs = append([]*Quota{c.quota}, qs...)
	}
	return qs
}

// HasQuotas reports whether the file sets any quota.
func (s *Set) HasQuotas() bool {
	if s == nil {
		return false
	}
	if len(s.quotas) > 0 {
		return true
	}
	for _, c := range s.all {
		if c.quota != nil {
			return true
		}
	}
	return false
}

func (s *Set) has(c *Credential) bool {
	for _, x := range s.all {
		if x == c {
			return true
		}
	}
	return false
}

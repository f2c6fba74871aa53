// Package access is who may do what on a Hourglass server: named
// credentials, each a bearer token (stored as its SHA-256 digest) or a
// client certificate's name, with a role or a set of verbs and the topic
// patterns they apply to.
//
// It knows nothing of the network: the server authenticates a call (a
// token, a verified certificate), asks a Set for the Credential, and asks
// the Credential whether it may do a verb on a topic.
//
// A Set is immutable; a reload builds a new one (Load) and swaps it in.
package access

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Verb is one kind of action a credential may be allowed.
type Verb string

// The verbs. Every RPC needs exactly one (server's table says which).
const (
	// Produce schedules messages (Schedule, ScheduleBatch, ScheduleStream).
	Produce Verb = "produce"
	// Consume receives and settles messages (Receive, ReceiveStream,
	// Consume, Ack, AckBatch, Nack, Extend).
	Consume Verb = "consume"
	// Cancel cancels and reschedules scheduled messages.
	Cancel Verb = "cancel"
	// Read looks without changing: Get, List, Stats, Topics, GetPolicy,
	// GetSchedule, ListSchedules, /metrics.
	Read Verb = "read"
	// Manage changes topics: Redrive, Purge, DeleteTopic, SetPolicy, and
	// the server's profiles (/debug/pprof/).
	Manage Verb = "manage"
	// Schedule changes recurring schedules: CreateSchedule,
	// UpdateSchedule, PauseSchedule, ResumeSchedule, DeleteSchedule.
	Schedule Verb = "schedule"
	// Audit reads the audit trail.
	Audit Verb = "audit"
)

// Verbs lists every verb, in the order docs and errors name them.
var Verbs = []Verb{Produce, Consume, Cancel, Read, Manage, Schedule, Audit}

// Roles are the named sets of verbs a credential may take instead of
// listing verbs.
var Roles = map[string][]Verb{
	"admin":    Verbs,
	"producer": {Produce, Cancel, Read},
	"consumer": {Consume, Read},
	"viewer":   {Read, Audit},
}

// RoleNames lists the roles, in the order docs and errors name them.
var RoleNames = []string{"admin", "producer", "consumer", "viewer"}

// Sentinel errors. Check with errors.Is; the error's text says which
// credential and what was wrong.
var (
	// ErrInvalid marks a credentials file that cannot be used.
	ErrInvalid = errors.New("access: invalid credentials")
)

// Credential is one named identity and what it may do. Its fields are
// read-only once the Set that holds it is built.
type Credential struct {
	// Name identifies the credential in errors, logs and the audit trail.
	Name string
	// Role is the role it was given, or "" when it lists its verbs.
	Role string
	// Topics are the patterns of the topics it may act on (path.Match
	// syntax: "orders.*", "*"); a verb on a call that names no topic
	// (Stats, Cancel by id) needs a pattern that matches every topic.
	Topics []string

	verbs []Verb
	quota *Quota // nil: none
}

// Verbs returns the verbs the credential may do.
func (c *Credential) Verbs() []Verb { return slices.Clone(c.verbs) }

// Admin is the credential of the server's --auth-token, and of every
// caller of a server with no credentials at all.
func Admin(name string) *Credential {
	return &Credential{Name: name, Role: "admin", Topics: []string{"*"}, verbs: Verbs}
}

// Has reports whether the credential may do v on some topic.
func (c *Credential) Has(v Verb) bool { return slices.Contains(c.verbs, v) }

// Covers reports whether one of the credential's patterns matches topic.
// "*" matches every topic (path.Match's would not match one with a '/',
// which is no valid topic: its caller then hears what is wrong with it).
func (c *Credential) Covers(topic string) bool {
	for _, p := range c.Topics {
		if ok, _ := path.Match(p, topic); ok || p == "*" {
			return true
		}
	}
	return false
}

// AllTopics reports whether the credential's patterns match every topic.
func (c *Credential) AllTopics() bool { return slices.Contains(c.Topics, "*") }

// DeniedError says what a credential may not do. The server answers it
// with PermissionDenied.
type DeniedError struct {
	Credential string
	Verb       Verb
	// Topic is the topic refused, or "" for a call that names no topic
	// (and so needs the verb on every topic).
	Topic string
	// Why says what the credential lacks and what it has.
	Why string
}

func (e *DeniedError) Error() string {
	if e.Topic == "" {
		return fmt.Sprintf("credential %q may not %s on every topic (this call names no topic): %s", e.Credential, e.Verb, e.Why)
	}
	return fmt.Sprintf("credential %q may not %s on topic %q: %s", e.Credential, e.Verb, e.Topic, e.Why)
}

// Allow returns nil if the credential may do v on topic ("" for a call
// that names none: then on every topic), or a *DeniedError.
func (c *Credential) Allow(v Verb, topic string) error {
	if !c.Has(v) {
		return &DeniedError{Credential: c.Name, Verb: v, Topic: topic, Why: c.describe()}
	}
	if topic == "" {
		if c.AllTopics() {
			return nil
		}
		return &DeniedError{Credential: c.Name, Verb: v, Why: "its topics are " + strings.Join(c.Topics, ", ") + ", not \"*\""}
	}
	if !c.Covers(topic) {
		return &DeniedError{Credential: c.Name, Verb: v, Topic: topic, Why: "its topics are " + strings.Join(c.Topics, ", ")}
	}
	return nil
}

// describe says what the credential may do, for errors.
func (c *Credential) describe() string {
	vs := make([]string, len(c.verbs))
	for i, v := range c.verbs {
		vs[i] = string(v)
	}
	s := "its verbs are " + strings.Join(vs, ", ")
	if c.Role != "" {
		s = "its role " + c.Role + " allows " + strings.Join(vs, ", ")
	}
	return s + " on " + strings.Join(c.Topics, ", ")
}

// parseVerbs resolves a role or a list of verbs.
func parseVerbs(role string, verbs []string) ([]Verb, error) {
	switch {
	case role != "" && len(verbs) > 0:
		return nil, errors.New("give a role or verbs, not both")
	case role != "":
		vs, ok := Roles[role]
		if !ok {
			return nil, fmt.Errorf("role %q is not one of %s (or list verbs instead)", role, strings.Join(RoleNames, ", "))
		}
		return vs, nil
	case len(verbs) == 0:
		return nil, fmt.Errorf("needs a role (%s) or verbs", strings.Join(RoleNames, ", "))
	}
	var out []Verb
	for _, s := range verbs {
		v := Verb(s)
		if !slices.Contains(Verbs, v) {
			return nil, fmt.Errorf("verb %q is not one of %s", s, verbList())
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return slices.Index(Verbs, out[i]) < slices.Index(Verbs, out[j]) })
	return out, nil
}

func verbList() string {
	s := make([]string, len(Verbs))
	for i, v := range Verbs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// checkPatterns refuses patterns path.Match cannot use, or none.
func checkPatterns(ps []string) error {
	if len(ps) == 0 {
		return errors.New(`needs topics: patterns such as "orders", "orders.*" or "*" for every topic`)
	}
	for _, p := range ps {
		if p == "" {
			return errors.New("a topic pattern is empty")
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("topic pattern %q: %v (patterns use *, ? and [a-z])", p, err)
		}
	}
	return nil
}

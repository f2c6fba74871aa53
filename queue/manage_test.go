package queue

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

func listAll(t *testing.T, q *Queue, topic string, st ListState, page int) []Message {
	t.Helper()
	var out []Message
	tok := ""
	for range 1000 {
		ms, next, err := q.List(context.Background(), topic, st, tok, page)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ms...)
		if next == "" {
			return out
		}
		tok = next
	}
	t.Fatal("List never ended")
	return nil
}

// List shows due and leased messages page by page, in queue order, and
// changes nothing: what it showed is then received as before.
func TestList(t *testing.T) {
	ctx := context.Background()
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	ids := deliver(t, q, "t", "a", "b", "c", "d", "e")
	leased := recv(t, q, "t", 2, time.Minute) // a, b
	if err := q.Nack(ctx, "t", ids[1], NackOptions{Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	due := listAll(t, q, "t", ListDue, 2)
	if got := bodies(due); len(got) != 4 || got[0] != "b" || got[1] != "c" || got[3] != "e" {
		t.Fatalf("due = %v, want b (given back) then c, d, e", got)
	}
	if due[0].Attempt != 1 || due[0].Receipt != "" {
		t.Fatalf("the given-back message listed as %+v", due[0])
	}
	ls := listAll(t, q, "t", ListLeased, 1)
	if len(ls) != 1 || ls[0].ID != leased[0].ID || !ls[0].LeaseUntil.Equal(leased[0].LeaseUntil) {
		t.Fatalf("leased = %+v", ls)
	}
	// Listing changed nothing.
	if got := bodies(recv(t, q, "t", 10, time.Minute)); len(got) != 4 {
		t.Fatalf("received after listing: %v", got)
	}
	if _, _, err := q.List(ctx, "t", ListDue, "zz", 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad token: %v", err)
	}
	if ms, next, err := q.List(ctx, "nosuch", ListDue, "", 10); err != nil || len(ms) != 0 || next != "" {
		t.Fatalf("unknown topic: %v %q %v", ms, next, err)
	}
}

// TestListTokens: List takes only the page tokens it issued, for the same
// topic and state, whose message is still where the token says; anything
// else is ErrInvalid, never corruption, and never an empty page.
func TestListTokens(t *testing.T) {
	ctx := context.Background()
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	deliver(t, q, "t", "a", "b", "c", "d")
	deliver(t, q, "u", "x", "y")
	recv(t, q, "u", 2, time.Minute)
	_, next, err := q.List(ctx, "t", ListDue, "", 2)
	if err != nil || next == "" {
		t.Fatalf("first page: %q %v", next, err)
	}
	_, leasedNext, err := q.List(ctx, "u", ListLeased, "", 1)
	if err != nil || leasedNext == "" {
		t.Fatalf("first leased page: %q %v", leasedNext, err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(next)
	flipped := slices.Clone(raw)
	flipped[5] ^= 1 // another offset
	other := newTokenKey()
	for _, tc := range []struct {
		name, topic, token string
		state              ListState
	}{
		{"decimal_offset", "t", "1", ListDue},
		{"past_the_end", "t", "50", ListDue},
		{"garbage", "t", "zz", ListDue},
		{"flipped_offset", "t", base64.RawURLEncoding.EncodeToString(flipped), ListDue},
		{"another_key", "t", other.encode("t", listToken{state: ListDue, off: 1}), ListDue},
		{"another_topic", "u", next, ListDue},
		{"another_state", "t", next, ListLeased},
		{"leased_token_as_due", "u", leasedNext, ListDue},
		{"long", "t", strings.Repeat("A", 4096), ListDue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, nx, err := q.List(ctx, tc.topic, tc.state, tc.token, 10)
			if !errors.Is(err, ErrInvalid) || len(ms) != 0 || nx != "" {
				t.Fatalf("List(%s, %q): %d messages, next %q, %v; want ErrInvalid", tc.topic, tc.token, len(ms), nx, err)
			}
			if _, ok := errors.AsType[*segfile.CorruptionError](err); ok || strings.Contains(err.Error(), q.dir) {
				t.Fatalf("List(%s, %q): %v; want no corruption and no path", tc.topic, tc.token, err)
			}
		})
	}
	if ms, _, err := q.List(ctx, "t", ListDue, next, 10); err != nil || len(bodies(ms)) != 2 || bodies(ms)[0] != "c" {
		t.Fatalf("second page by its token: %v %v; want c and d", bodies(ms), err)
	}
	// A token that outlived its topic: deleted and made again, with other
	// records at other offsets.
	if _, _, err := q.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	deliver(t, q, "t", strings.Repeat("long ", 40), "b")
	if ms, _, err := q.List(ctx, "t", ListDue, next, 10); !errors.Is(err, ErrInvalid) || len(ms) != 0 {
		t.Fatalf("a token of the deleted topic: %d messages, %v; want ErrInvalid", len(ms), err)
	}
	if _, _, err := q.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.List(ctx, "t", ListDue, next, 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a token of a topic that no longer exists: %v; want ErrInvalid", err)
	}
	if q.Health() != nil {
		t.Fatalf("health after forged tokens: %v", q.Health())
	}
}

// PurgeDue removes what waits to be received, durably (a restart brings
// none of it back), and leaves leased messages and later deliveries.
func TestPurgeDue(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	ids := deliver(t, q, "t", "a", "b", "c", "d")
	recv(t, q, "t", 2, time.Minute) // a, b leased
	if err := q.Nack(ctx, "t", ids[1], NackOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := q.PurgeDue(ctx, "t")
	if err != nil || n != 3 {
		t.Fatalf("PurgeDue = %d, %v; want 3 (b given back, c, d)", n, err)
	}
	if ms := recv(t, q, "t", 10, time.Minute); len(ms) != 0 {
		t.Fatalf("received %v after the purge", bodies(ms))
	}
	deliver(t, q, "t", "e")
	if got := bodies(recv(t, q, "t", 10, time.Minute)); len(got) != 1 || got[0] != "e" {
		t.Fatalf("after the purge a new delivery is received: %v", got)
	}
	if err := q.Ack(ctx, "t", ids[0]); err != nil {
		t.Fatalf("the leased message survives the purge: %v", err)
	}
	q.Close()
	q = openQ(t, dir, nil)
	defer q.Close()
	if got := bodies(recv(t, q, "t", 10, time.Minute)); len(got) != 1 || got[0] != "e" {
		t.Fatalf("after a restart: %v, want only e (leased, not acked)", got)
	}
}

// DeleteTopic removes the topic's files and policy; the topic can be used
// again from nothing.
func TestDeleteTopic(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	defer q.Close()
	if err := q.SetPolicy("t", Policy{MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	deliver(t, q, "t", "a", "b", "c")
	recv(t, q, "t", 1, time.Minute)
	n, ok, err := q.DeleteTopic(ctx, "t")
	if err != nil || !ok || n != 3 {
		t.Fatalf("DeleteTopic = %d, %v, %v; want 3 held", n, ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "topics", "t")); !os.IsNotExist(err) {
		t.Fatalf("the topic's directory is still there: %v", err)
	}
	if p := q.Policy("t"); p != (Policy{}) {
		t.Fatalf("policy kept: %+v", p)
	}
	if _, ok := q.Stats()["t"]; ok {
		t.Fatal("Stats still lists the deleted topic")
	}
	if _, ok, err := q.DeleteTopic(ctx, "t"); ok || err != nil {
		t.Fatalf("deleting it again: %v %v", ok, err)
	}
	deliver(t, q, "t", "z")
	if got := bodies(recv(t, q, "t", 10, time.Minute)); len(got) != 1 || got[0] != "z" {
		t.Fatalf("the topic used again: %v", got)
	}
}

// Take leases one waiting message out of turn: acked, the reader skips it
// later; given back or lost in a crash, it is handed out once in turn.
func TestTake(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	deliver(t, q, "t", "a", "b", "c", "d")
	due := listAll(t, q, "t", ListDue, 10)
	off := func(body string) int64 {
		for _, m := range due {
			if string(m.Body) == body {
				return m.Offset
			}
		}
		t.Fatalf("%s not listed", body)
		return 0
	}
	mc, err := q.Take(ctx, "t", off("c"), time.Minute)
	if err != nil || string(mc.Body) != "c" {
		t.Fatalf("Take(c) = %+v, %v", mc, err)
	}
	if _, err := q.Take(ctx, "t", off("c"), time.Minute); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("Take of a leased message: %v", err)
	}
	if err := q.AckReceipt(ctx, "t", mc.Receipt); err != nil {
		t.Fatal(err)
	}
	mb, err := q.Take(ctx, "t", off("b"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.NackReceipt(ctx, "t", mb.Receipt, NackOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Take(ctx, "t", off("d"), time.Minute); err != nil { // outstanding at the crash
		t.Fatal(err)
	}
	inTurn := drain(t, q, "t")
	if got := bodies(inTurn); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("received in turn %v, want a, b (c acked, d leased)", got)
	}
	for _, m := range inTurn {
		if err := q.AckReceipt(ctx, "t", m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	q = openQ(t, dir, nil)
	defer q.Close()
	if got := bodies(drain(t, q, "t")); len(got) != 1 || got[0] != "d" {
		t.Fatalf("after a restart %v, want d (taken, not acked)", got)
	}
}

package queue

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/hourglassmq/hourglass/message"
)

// A List page token names where the next page starts: a position in the
// topic's queue log, the message found there when the token was issued,
// and the state listed. It is signed with a key the queue draws when it
// opens, over the topic's name too, so that List takes only the tokens it
// issued, for that topic and state, since the queue opened: a client
// cannot name a position of its own choosing (the middle of a record,
// past the end). The message it names is checked again when the page is
// read, so a token that outlived its topic (deleted and made again) is
// refused too. Tokens are opaque to clients; the format is not stored.
//
//	version 1 | state 1 | offset 8 | deliverAt 8 | seq 8 | mac 12   (big-endian)
//
// base64url without padding: 51 characters.
const (
	tokenVersion = 1
	tokenMACLen  = 12
	tokenRawLen  = 1 + 1 + 8 + 8 + 8 + tokenMACLen
)

// listToken is a decoded page token.
type listToken struct {
	state ListState
	off   int64
	id    message.ID
}

// tokenKey is the key page tokens are signed with.
type tokenKey [32]byte

func newTokenKey() tokenKey {
	var k tokenKey
	rand.Read(k[:]) // never fails (crypto/rand)
	return k
}

// mac is the signature of a token's first bytes for topic.
func (k *tokenKey) mac(topic string, head []byte) []byte {
	h := hmac.New(sha256.New, k[:])
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(head)
	return h.Sum(nil)[:tokenMACLen]
}

// encode returns the page token of tok for topic.
func (k *tokenKey) encode(topic string, tok listToken) string {
	b := make([]byte, 0, tokenRawLen)
	b = append(b, tokenVersion, byte(tok.state))
	b = binary.BigEndian.AppendUint64(b, uint64(tok.off))
	b = binary.BigEndian.AppendUint64(b, uint64(tok.id.DeliverAt))
	b = binary.BigEndian.AppendUint64(b, tok.id.Seq)
	b = append(b, k.mac(topic, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decode checks and decodes a page token List issued for topic and
// state; any other text is an error wrapping ErrInvalid.
func (k *tokenKey) decode(topic string, state ListState, s string) (listToken, error) {
	bad := func(why string) (listToken, error) {
		shown := fmt.Sprintf("%q", s)
		if len(s) > 80 {
			shown = fmt.Sprintf("of %d bytes", len(s))
		}
		return listToken{}, fmt.Errorf("%w: page token %s %s: pass the next page token of the page before, "+
			"for the same topic and state, or none for the first page (a token does not outlive a restart)", ErrInvalid, shown, why)
	}
	if base64.RawURLEncoding.DecodedLen(len(s)) != tokenRawLen {
		return bad("is not one this server issued")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != tokenRawLen || b[0] != tokenVersion {
		return bad("is not one this server issued")
	}
	head := b[:tokenRawLen-tokenMACLen]
	if !hmac.Equal(b[len(head):], k.mac(topic, head)) {
		return bad(fmt.Sprintf("is not one this server issued for topic %q", topic))
	}
	tok := listToken{state: ListState(b[1]), off: int64(binary.BigEndian.Uint64(b[2:])),
		id: message.ID{DeliverAt: int64(binary.BigEndian.Uint64(b[10:])), Seq: binary.BigEndian.Uint64(b[18:])}}
	if tok.state != state {
		return bad("was issued for another state")
	}
	if tok.off < 0 {
		return bad("is not one this server issued")
	}
	return tok, nil
}

// staleToken is List's error for a token whose message is no longer where
// the token says: the topic was deleted and made again since.
func staleToken(topic string) error {
	return fmt.Errorf("%w: the page token no longer names a message of topic %q (the topic was deleted and made again since it was issued): list again from the first page", ErrInvalid, topic)
}

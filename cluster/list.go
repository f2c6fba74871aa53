package cluster

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// List of a topic's pending messages: every partition's owner lists its
// own from its local engine, and the node that took the call merges their
// pages in the single-node order, (deliverAt, ID).

// List returns at most req.Limit pending messages of req.Topic with
// deliverAt in [req.From, req.To), ordered by (deliverAt, ID), that come
// after the page token (empty for the first page), and the token of the
// next page ("" after a short page). The owner of every partition is
// asked (a call per node, forwarded there unless forwarded is set); a
// partition without an owner makes the call Unavailable, never a partial
// page. req.After is ignored: the token says where a page starts.
//
// Cluster IDs are ordered across partitions (deliverAt, then partition,
// intake sequence and index), so one position, the last message of the
// previous page, is where every partition's next page starts: as on one
// node, a message scheduled during the listing before that point never
// shifts later pages, and one pending throughout is on exactly one page.
func (n *Node) List(ctx context.Context, req engine.ListRequest, token string, forwarded bool) ([]engine.Found, string, error) {
	if req.Limit == 0 {
		req.Limit = engine.DefaultListLimit
	}
	tok, err := parseListToken(token, n.opts.Partitions)
	if err != nil {
		return nil, "", err
	}
	parts := tok.parts
	switch {
	case forwarded && len(parts) == 0:
		return nil, "", status.Errorf(codes.InvalidArgument, "a forwarded List names no partitions")
	case !forwarded && len(parts) > 0:
		return nil, "", status.Errorf(codes.InvalidArgument, "page_token: not a token List returned (want the next_page_token of the previous page, or empty for the first page)")
	case !forwarded:
		for p := range n.opts.Partitions {
			parts = append(parts, p)
		}
	}
	type group struct {
		fw    forward
		parts []int
	}
	var local []*partition
	remote := map[string]*group{}
	for _, p := range parts {
		pt, fw, err := n.route(ctx, p, forwarded, "List")
		if err != nil {
			return nil, "", err
		}
		if pt != nil {
			local = append(local, pt)
			continue
		}
		g := remote[fw.owner.URL]
		if g == nil {
			g = &group{fw: fw}
			remote[fw.owner.URL] = g
		}
		g.parts = append(g.parts, p)
	}

	var mu sync.Mutex
	var out []engine.Found
	var firstErr error
	add := func(fs []engine.Found, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out = append(out, fs...)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, pt := range local {
		wg.Go(func() { add(pt.list(ctx, req, tok.after)) })
	}
	for _, g := range remote {
		wg.Go(func() {
			add(n.listRemote(ctx, g.fw, req, listToken{after: tok.after, parts: g.parts}, n.opts.Partitions))
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, "", firstErr
	}
	sortFound(out)
	if len(out) > req.Limit {
		out = out[:req.Limit]
	}
	next := ""
	if len(out) == req.Limit && !forwarded {
		next = listToken{after: out[len(out)-1].ID}.encode(n.opts.Partitions)
	}
	return out, next, nil
}

// listRemote asks the owner fw for the page of its partitions tok names.
func (n *Node) listRemote(ctx context.Context, fw forward, req engine.ListRequest, tok listToken, partitions int) ([]engine.Found, error) {
	o := client.ListOptions{State: client.StatePending, PageSize: req.Limit}
	if req.From > 0 {
		o.From = time.UnixMilli(req.From)
	}
	if req.To > 0 {
		o.To = time.UnixMilli(req.To)
	}
	page, _, err := fw.c.ListPage(ctx, req.Topic, o, tok.encode(partitions))
	if err != nil {
		return nil, fw.err("List", err)
	}
	out := make([]engine.Found, len(page))
	for i, s := range page {
		id, err := message.ParseID(s.ID.String())
		if err != nil {
			return nil, fw.err("List", err)
		}
		m := message.Message{DeliverAt: s.DeliverAt.UnixMilli(), Attempt: s.Attempt, Topic: []byte(s.Topic), Body: s.Body}
		if !s.OriginID.IsZero() {
			m.Origin, _ = message.ParseID(s.OriginID.String())
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			m.Headers = append(m.Headers, message.Header{Key: []byte(k), Value: []byte(s.Headers[k])})
		}
		out[i] = engine.Found{ID: id, State: engine.StatePending, Message: m}
	}
	return out, nil
}

// list returns the first req.Limit pending messages of req.Topic in this
// partition after the cluster ID after, in cluster-ID order, once the
// intake stream is read to its end (a Schedule answered before the call
// is listed).
//
// The local engine orders by (deliverAt, local seq), and within one
// millisecond that is not always the cluster IDs' order (a compaction's
// copy is read after originals with larger IDs), so every message of the
// last millisecond a page reaches is read before the page is cut: the
// memory is two pages, the time grows with the messages that share that
// millisecond.
func (pt *partition) list(ctx context.Context, req engine.ListRequest, after message.ID) ([]engine.Found, error) {
	if err := pt.caughtUp(ctx); err != nil {
		return nil, err
	}
	pt.mu.Lock()
	eng := pt.mu.eng
	pt.mu.Unlock()
	limit := req.Limit
	lreq := engine.ListRequest{Topic: req.Topic, From: max(req.From, after.DeliverAt), To: req.To, Limit: limit}
	var out []engine.Found
	for {
		page, err := eng.List(ctx, lreq)
		if err != nil {
			return nil, unavailable("listing partition %d's local engine: %v", pt.p, err)
		}
		pt.mu.Lock()
		for _, f := range page {
			id, hs := splitIDHeader(f.Message.Headers)
			if id.IsZero() || id.DeliverAt < req.From || (req.To > 0 && id.DeliverAt >= req.To) || !idAfter(id, after) {
				continue
			}
			if _, done := pt.mu.done[id]; done || pt.mu.firing[id] {
				continue // cancelled, delivered or being delivered
			}
			f.ID = id
			f.Message.DeliverAt = id.DeliverAt
			f.Message.Headers = withoutHeader(hs, replacesHeader)
			out = append(out, f)
		}
		pt.mu.Unlock()
		sortFound(out)
		if len(out) > limit {
			out = out[:limit]
		}
		if len(page) < lreq.Limit {
			return out, nil
		}
		last := page[len(page)-1]
		if len(out) == limit && last.Message.DeliverAt > out[limit-1].ID.DeliverAt {
			return out, nil
		}
		lreq.After = last.ID
	}
}

// caughtUp waits until the partition's local engine is open and holds
// every intake message the stream stored before the call.
func (pt *partition) caughtUp(ctx context.Context) error {
	if err := pt.waitReady(ctx); err != nil {
		return err
	}
	info, err := pt.n.inStreams[pt.p].Info(ctx)
	if err != nil {
		return unavailable("reading the state of %s: %v", inStream(pt.p), err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	return pt.waitConsumed(ctx, info.State.LastSeq)
}

// idAfter reports whether a comes after b in List's order; everything
// comes after the zero ID.
func idAfter(a, b message.ID) bool {
	if b.IsZero() {
		return true
	}
	return a.DeliverAt > b.DeliverAt || (a.DeliverAt == b.DeliverAt && a.Seq > b.Seq)
}

func sortFound(fs []engine.Found) {
	slices.SortFunc(fs, func(a, b engine.Found) int {
		switch {
		case a.ID == b.ID:
			return 0
		case idAfter(a.ID, b.ID):
			return 1
		}
		return -1
	})
}

// listToken is a cluster List's page token: where the next page starts
// (the last message of the previous page; zero for the first), and, in a
// List one node forwards to another, the partitions the receiver lists.
// It is encoded, in unpadded URL-safe base64, as
//
//	ver u8 (=1) | partitions uvarint | deliverAt varint | seq uvarint |
//	count uvarint | count × partition uvarint | crc32 (IEEE, of the rest) u32
//
// partitions is the cluster's partition count: a token of a cluster with
// another layout is refused. The format is the API's (clients hold
// tokens across a node's upgrade): it must not change without a new
// version byte.
type listToken struct {
	after message.ID
	parts []int
}

const listTokenVersion = 1

func (t listToken) encode(partitions int) string {
	b := []byte{listTokenVersion}
	b = binary.AppendUvarint(b, uint64(partitions))
	b = binary.AppendVarint(b, t.after.DeliverAt)
	b = binary.AppendUvarint(b, t.after.Seq)
	b = binary.AppendUvarint(b, uint64(len(t.parts)))
	for _, p := range t.parts {
		b = binary.AppendUvarint(b, uint64(p))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseListToken decodes a page token of a cluster with partitions
// partitions; "" is the first page. A malformed token, or one of a
// cluster with another partition count, is InvalidArgument saying so.
func parseListToken(s string, partitions int) (listToken, error) {
	var t listToken
	if s == "" {
		return t, nil
	}
	bad := func(why string) (listToken, error) {
		return listToken{}, status.Errorf(codes.InvalidArgument,
			"page_token %q: %s; want the next_page_token of the previous page of this cluster's List, or empty for the first page", s, why)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+4 {
		return bad("not a token a cluster's List returned")
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return bad("not a token a cluster's List returned (its checksum does not match)")
	}
	if body[0] != listTokenVersion {
		return bad("a token of version " + strconv.Itoa(int(body[0])) + "; this node reads version " + strconv.Itoa(listTokenVersion))
	}
	off := 1
	uv := func() (uint64, bool) {
		v, k := binary.Uvarint(body[off:])
		if k <= 0 {
			return 0, false
		}
		off += k
		return v, true
	}
	np, ok := uv()
	if !ok {
		return bad("truncated")
	}
	if np != uint64(partitions) {
		return bad("a token of a cluster with " + strconv.Itoa(int(min(np, 1<<20))) + " partitions; this cluster has " + strconv.Itoa(partitions) + " (the cluster's layout changed: start the listing again)")
	}
	at, k := binary.Varint(body[off:])
	if k <= 0 {
		return bad("truncated")
	}
	off += k
	seq, ok := uv()
	if !ok {
		return bad("truncated")
	}
	t.after = message.ID{DeliverAt: at, Seq: seq}
	if p, _, _ := SplitID(t.after); !t.after.IsZero() && (p >= partitions || at < 0) {
		return bad("it names a position outside this cluster")
	}
	count, ok := uv()
	if !ok || count > uint64(partitions) {
		return bad("a bad partition count")
	}
	seen := map[int]bool{}
	for range count {
		p, ok := uv()
		if !ok || p >= uint64(partitions) || seen[int(p)] {
			return bad("a bad partition list")
		}
		seen[int(p)] = true
		t.parts = append(t.parts, int(p))
	}
	if off != len(body) {
		return bad("bytes after its end")
	}
	return t, nil
}

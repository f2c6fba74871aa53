package wheel

// The wheel keeps three bits of state per ref, in pages of pageRefs
// consecutive refs that exist only while one of their refs is pending or has
// a stale copy stored:
//
//	live  the ref is pending: it has exactly one stored copy that will fire,
//	      the one whose generation bit equals gen
//	stale a removed copy of the ref is still stored (at most one); its
//	      generation bit is the opposite of gen, so it can never be taken for
//	      the pending copy
//	gen   the generation bit the ref's pending or next copy carries
//
// The three words covering 64 refs sit together, so that checking a ref as
// it fires costs one cache miss. Pages are found through a three-level radix
// directory (bucket, then 10 and 10 bits of the index), which stays small for
// dense refs.
const (
	pageBits  = 12
	pageRefs  = 1 << pageBits
	pageWords = pageRefs / 64
	dirBits   = 10
	dirSize   = 1 << dirBits
)

// refBits holds the state of 64 consecutive refs, one bit each.
type refBits struct{ live, stale, gen uint64 }

type page [pageWords]refBits

// A leaf directory keeps the use counts of its pages, rather than the pages
// themselves, so that updating a count is not a second cache miss.
type leafDir struct {
	pages [dirSize]*page
	refs  [dirSize]int32 // refs of each page whose live or stale bit is set
	used  int            // non-nil pages
}

type midDir struct {
	leaves [dirSize]*leafDir
	used   int // non-nil leaves
}

// refTable finds the state of a ref.
type refTable struct {
	top [1 << (RefBits - 2*dirBits - pageBits)]*midDir
}

// split returns the directory indexes of ref's page.
func split(ref uint64) (t, m, l uint64) {
	return ref >> (pageBits + 2*dirBits), ref >> (pageBits + dirBits) & (dirSize - 1), ref >> pageBits & (dirSize - 1)
}

// state returns the word holding ref's bits, the use count of its page and
// ref's mask in the word; or nils if none of the refs of its page has state.
func (t *refTable) state(ref uint64) (*refBits, *int32, uint64) {
	ti, mi, li := split(ref)
	md := t.top[ti]
	if md == nil {
		return nil, nil, 0
	}
	ld := md.leaves[mi]
	if ld == nil {
		return nil, nil, 0
	}
	p := ld.pages[li]
	if p == nil {
		return nil, nil, 0
	}
	return &p[ref>>6&(pageWords-1)], &ld.refs[li], 1 << (ref & 63)
}

// stateOrCreate is state, creating ref's page if needed.
func (t *refTable) stateOrCreate(ref uint64) (*refBits, *int32, uint64) {
	ti, mi, li := split(ref)
	md := t.top[ti]
	if md == nil {
		md = new(midDir)
		t.top[ti] = md
	}
	ld := md.leaves[mi]
	if ld == nil {
		ld = new(leafDir)
		md.leaves[mi] = ld
		md.used++
	}
	p := ld.pages[li]
	if p == nil {
		p = new(page)
		ld.pages[li] = p
		ld.used++
	}
	return &p[ref>>6&(pageWords-1)], &ld.refs[li], 1 << (ref & 63)
}

// unuse notes that one more ref of ref's page, whose use count is n, has
// neither a pending nor a stale copy, and frees the page (and emptied
// directories) when none has.
func (t *refTable) unuse(ref uint64, n *int32) {
	*n--
	if *n > 0 {
		return
	}
	ti, mi, li := split(ref)
	md := t.top[ti]
	ld := md.leaves[mi]
	ld.pages[li] = nil
	ld.used--
	if ld.used > 0 {
		return
	}
	md.leaves[mi] = nil
	md.used--
	if md.used == 0 {
		t.top[ti] = nil
	}
}

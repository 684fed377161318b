package sotw

import (
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// sentSet is a set of entries a client holds, by name. Reached through
// sentSets, it is shared by every stream that was sent the same responses
// (from the same set), and never changes.
type sentSet struct{ m map[string]*view.Entry }

// noneSent is the empty set every type starts from.
var noneSent = &sentSet{m: map[string]*view.Entry{}}

// holding is what a client holds of one type, as far as the server knows:
// a shared base set and the stream's own changes to it (own; a nil entry
// marks a name dropped), so that streams sent the same responses share
// what they hold, and a push of one resource costs one entry of own.
type holding struct {
	base *sentSet
	own  map[string]*view.Entry // nil until the first change of the stream's own
	n    int                    // names held
}

func newHolding() holding { return holding{base: noneSent} }

func (h *holding) get(n string) *view.Entry {
	if e, ok := h.own[n]; ok {
		return e
	}
	return h.base.m[n]
}

func (h *holding) len() int { return h.n }

func (h *holding) set(e *view.Entry) {
	if h.get(e.Name) == nil {
		h.n++
	}
	if h.own == nil {
		h.own = map[string]*view.Entry{}
	}
	h.own[e.Name] = e
}

func (h *holding) drop(n string) {
	if h.get(n) == nil {
		return
	}
	h.n--
	if h.base.m[n] == nil {
		delete(h.own, n)
		return
	}
	if h.own == nil {
		h.own = map[string]*view.Entry{}
	}
	h.own[n] = nil
}

// each calls f for every entry held.
func (h *holding) each(f func(e *view.Entry)) {
	for n, e := range h.base.m {
		if _, mine := h.own[n]; !mine {
			f(e)
		}
	}
	for _, e := range h.own {
		if e != nil {
			f(e)
		}
	}
}

// replace records a full-state response sent: entries replace what the
// client held. key names the response's body (at revision rev) exactly;
// "" for a body of the stream's own, which is not shared.
func (h *holding) replace(sets *sentSets, rev int64, key string, entries []*view.Entry) {
	if key == "" {
		h.base, h.own = build(noneSent, entries), nil
	} else {
		h.base, h.own = sets.next(rev, nil, key, entries), nil
	}
	h.n = len(h.base.m)
}

// merge records a response of named resources sent: entries are held
// besides the rest. A stream with no changes of its own takes the shared
// set that follows its base when the response replaces much of it (a
// first response); otherwise (a push of a few resources) the entries go
// to own, at the cost of the entries alone.
func (h *holding) merge(sets *sentSets, rev int64, key string, entries []*view.Entry) {
	if key != "" && len(h.own) == 0 && 4*len(entries) >= len(h.base.m) {
		h.base = sets.next(rev, h.base, key, entries)
		h.own = nil
		h.n = len(h.base.m)
		return
	}
	for _, e := range entries {
		h.set(e)
	}
}

// build returns from with entries added (entries alone if from is nil).
func build(from *sentSet, entries []*view.Entry) *sentSet {
	if from == nil {
		from = noneSent
	}
	s := &sentSet{m: make(map[string]*view.Entry, len(from.m)+len(entries))}
	for n, e := range from.m {
		s.m[n] = e
	}
	for _, e := range entries {
		s.m[e.Name] = e
	}
	return s
}

// sentSets shares sent sets among the streams (xdsstream.SharedSets).
type sentSets struct{ xdsstream.SharedSets[sentSet] }

// next returns the shared set that from (nil: none, for a full-state
// response) becomes with entries, sent at revision rev in the response
// whose body key is key.
func (c *sentSets) next(rev int64, from *sentSet, key string, entries []*view.Entry) *sentSet {
	return c.Next(rev, from, key, func() *sentSet { return build(from, entries) })
}

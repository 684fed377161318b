package delta

import (
	"strconv"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// held is what the client holds of one resource.
type held struct {
	// rev is the version, the resource's mod_revision; -1 for a version
	// presented in initial_resource_versions that names none.
	rev   int64
	scope string // "" when only the version is known (initial_resource_versions)
}

// heldSet is a set of held resources by name (the alias for a VHDS
// alias). Reached through heldSets, it is shared by every stream that sent
// the same responses from the same set, and never changes.
type heldSet struct{ m map[string]held }

// noneHeld is the empty set every type starts from.
var noneHeld = &heldSet{m: map[string]held{}}

// apply records a response sent: removed names dropped, out held.
func (s *heldSet) apply(out []item, removed []string) {
	for _, n := range removed {
		delete(s.m, n)
	}
	for _, it := range out {
		s.m[it.Key()] = held{rev: it.Entry.ModRevision, scope: it.source}
	}
}

// holding is what a client holds of one type: a shared base set and the
// stream's own changes to it (own; rev 0 marks a name dropped), so that
// streams that were sent the same responses share what they hold, and a
// push changing one resource costs one entry of own.
type holding struct {
	base *heldSet
	own  map[string]held // nil until the first change of the stream's own
	n    int             // names held
}

func newHolding() holding { return holding{base: noneHeld} }

func (h *holding) get(n string) (held, bool) {
	if x, ok := h.own[n]; ok {
		return x, x.rev != 0
	}
	x, ok := h.base.m[n]
	return x, ok
}

func (h *holding) has(n string) bool {
	_, ok := h.get(n)
	return ok
}

func (h *holding) len() int { return h.n }

func (h *holding) set(n string, x held) {
	if !h.has(n) {
		h.n++
	}
	if h.own == nil {
		h.own = map[string]held{}
	}
	h.own[n] = x
}

func (h *holding) drop(n string) {
	if !h.has(n) {
		return
	}
	h.n--
	if _, inBase := h.base.m[n]; !inBase {
		delete(h.own, n)
		return
	}
	if h.own == nil {
		h.own = map[string]held{}
	}
	h.own[n] = held{} // rev 0: dropped
}

// each calls f for every name held.
func (h *holding) each(f func(n string, x held)) {
	for n, x := range h.base.m {
		if _, mine := h.own[n]; !mine {
			f(n, x)
		}
	}
	for n, x := range h.own {
		if x.rev != 0 {
			f(n, x)
		}
	}
}

// sent records a response sent at revision rev under body key key. A
// stream with no changes of its own takes the shared set that follows
// its base, when the response replaces much of it (an initial sync):
// every stream of its group sent that response shares it. Otherwise (a
// push of a few resources) the changes go to own, at the cost of the
// changes alone.
func (h *holding) sent(sets *heldSets, rev int64, key string, out []item, removed []string) {
	if len(h.own) == 0 && 4*(len(out)+len(removed)) >= len(h.base.m) {
		h.base = sets.next(rev, h.base, key, out, removed)
		h.own = nil
		h.n = len(h.base.m)
		return
	}
	for _, n := range removed {
		h.drop(n)
	}
	for _, it := range out {
		h.set(it.Key(), held{rev: it.Entry.ModRevision, scope: it.source})
	}
}

// parseRev is the revision a presented version names, -1 if none (a
// version this server would not write: not its decimal form).
func parseRev(v string) int64 {
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != v {
		return -1
	}
	return rev
}

// heldSets shares held sets among the streams (xdsstream.SharedSets).
type heldSets struct{ xdsstream.SharedSets[heldSet] }

// next returns the shared set that from becomes once the response named
// key, sent at revision rev, is applied.
func (c *heldSets) next(rev int64, from *heldSet, key string, out []item, removed []string) *heldSet {
	return c.Next(rev, from, key, func() *heldSet {
		s := &heldSet{m: make(map[string]held, len(from.m)+len(out))}
		for k, x := range from.m {
			s.m[k] = x
		}
		s.apply(out, removed)
		return s
	})
}

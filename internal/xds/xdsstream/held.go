package xdsstream

// heldSet is a set of what a client holds, by name. Reached through
// HeldSets, it is shared by every stream that was sent the same responses
// from the same set, and never changes.
type heldSet[V comparable] struct{ m map[string]V }

// Holding is what a client holds of one type, as far as the server knows:
// V per name (SotW: the entry it was sent; delta: the version and source
// of the resource). It is a shared base set plus the stream's own changes
// to it (own), so that streams sent the same responses share what they
// hold, and a push of one resource costs one entry of own. The zero value
// of V marks a name dropped in own, so no value held may be V's zero. The
// zero Holding holds nothing and is ready to use; it is owned by its
// stream's goroutine.
type Holding[V comparable] struct {
	base *heldSet[V]  // nil: the empty set
	own  map[string]V // nil until the first change of the stream's own
	n    int          // names held
}

// baseMap is the base set's map; nil when the base is empty.
func (h *Holding[V]) baseMap() map[string]V {
	if h.base == nil {
		return nil
	}
	return h.base.m
}

// Get returns what the client holds by name n, and whether it holds it.
func (h *Holding[V]) Get(n string) (V, bool) {
	if x, ok := h.own[n]; ok {
		var none V
		return x, x != none
	}
	x, ok := h.baseMap()[n]
	return x, ok
}

// Has reports whether the client holds a resource by name n.
func (h *Holding[V]) Has(n string) bool {
	_, ok := h.Get(n)
	return ok
}

// Len is the number of names held.
func (h *Holding[V]) Len() int { return h.n }

// Set records that the client holds x by name n. x must not be V's zero.
func (h *Holding[V]) Set(n string, x V) {
	if !h.Has(n) {
		h.n++
	}
	if h.own == nil {
		h.own = map[string]V{}
	}
	h.own[n] = x
}

// Drop records that the client no longer holds name n. Once it holds
// nothing, the holding lets go of its base and own changes: a client
// that unsubscribes from everything keeps no mark per name it dropped.
func (h *Holding[V]) Drop(n string) {
	if !h.Has(n) {
		return
	}
	h.n--
	if h.n == 0 {
		h.base, h.own = nil, nil
		return
	}
	if _, inBase := h.baseMap()[n]; !inBase {
		delete(h.own, n)
		return
	}
	if h.own == nil {
		h.own = map[string]V{}
	}
	var dropped V
	h.own[n] = dropped
}

// Each calls f for every name held and what is held by it.
func (h *Holding[V]) Each(f func(n string, x V)) {
	for n, x := range h.baseMap() {
		if _, mine := h.own[n]; !mine {
			f(n, x)
		}
	}
	var dropped V
	for n, x := range h.own {
		if x != dropped {
			f(n, x)
		}
	}
}

// Sent records a response sent at revision rev, whose body key is key
// ("" for a body of the stream's own, which is not shared): it carried
// count resources, at(i) giving the name and value the client holds of
// the i-th, and removed the names in removed. A stream with no changes of
// its own takes the shared set that follows its base when the response
// replaces much of it (a first response): every stream of its group sent
// that response shares it. Otherwise (a push of a few resources) the
// changes go to own, at the cost of the changes alone.
func (h *Holding[V]) Sent(sets *HeldSets[V], rev int64, key string, count int, at func(i int) (string, V), removed []string) {
	if key != "" && len(h.own) == 0 && 4*(count+len(removed)) >= len(h.baseMap()) {
		h.base = sets.next(rev, h.base, key, count, at, removed)
		h.own = nil
		h.n = len(h.base.m)
		return
	}
	for _, n := range removed {
		h.Drop(n)
	}
	for i := range count {
		h.Set(at(i))
	}
}

// Replace records a response sent at revision rev that replaces what the
// client holds (a full-state response): it carried count resources, at(i)
// giving the name and value of the i-th. key names the response's body
// exactly; "" for a body of the stream's own, which is not shared.
func (h *Holding[V]) Replace(sets *HeldSets[V], rev int64, key string, count int, at func(i int) (string, V)) {
	if key == "" {
		h.base = build(nil, count, at, nil)
	} else {
		h.base = sets.next(rev, nil, key, count, at, nil)
	}
	h.own = nil
	h.n = len(h.base.m)
}

// HeldSets shares held sets among the streams of a server
// (SharedSets): streams holding the same set that send the same response
// hold the same set after it. The zero value is ready to use; its methods
// may be called concurrently.
type HeldSets[V comparable] struct{ shared SharedSets[heldSet[V]] }

// next returns the shared set that from (nil: the empty set) becomes with
// the response named key, sent at revision rev, applied.
func (c *HeldSets[V]) next(rev int64, from *heldSet[V], key string, count int, at func(i int) (string, V), removed []string) *heldSet[V] {
	return c.shared.Next(rev, from, key, func() *heldSet[V] { return build(from, count, at, removed) })
}

// build returns a new set: from (nil: the empty set) with the names in
// removed dropped and count names, at(i) the i-th, held.
func build[V comparable](from *heldSet[V], count int, at func(i int) (string, V), removed []string) *heldSet[V] {
	var m map[string]V
	if from != nil {
		m = from.m
	}
	s := &heldSet[V]{m: make(map[string]V, len(m)+count)}
	for n, x := range m {
		s.m[n] = x
	}
	for _, n := range removed {
		delete(s.m, n)
	}
	for i := range count {
		n, x := at(i)
		s.m[n] = x
	}
	return s
}

package xdsstream

import "iter"

// foldMin is how many changes a Subscribed keeps beside its base at
// least before folding them in: a handful of names is cheaper to keep
// than to intern.
const foldMin = 32

// Subscribed is a delta stream's explicit subscriptions of one type: an
// interned base set (NameSets), shared with the streams subscribed
// alike, and the stream's own changes since, names added (not in the
// base) and removed (from it). A request costs what it names, whatever
// the stream holds: the changes are folded into a new interned base
// only once they outnumber a quarter of it (and foldMin), so that
// folding, which costs the whole set, is paid once per that many
// changes. The zero value is empty. It is owned by its stream's
// goroutine.
type Subscribed struct {
	base           *NameSet
	added, removed map[string]bool // nil while empty
	// addedCost and removedCost are the NameCost of added and removed.
	addedCost, removedCost int
}

// Has reports whether n is subscribed.
func (s *Subscribed) Has(n string) bool {
	if s.added[n] {
		return true
	}
	return s.base.Has(n) && !s.removed[n]
}

// Len is the number of names subscribed.
func (s *Subscribed) Len() int { return s.base.Len() + len(s.added) - len(s.removed) }

// Cost is what the names subscribed cost (NameCost summed).
func (s *Subscribed) Cost() int { return s.base.Cost() + s.addedCost - s.removedCost }

// All yields the names subscribed, in no order.
func (s *Subscribed) All() iter.Seq[string] {
	return func(yield func(string) bool) {
		for n := range s.base.All() {
			if !s.removed[n] && !yield(n) {
				return
			}
		}
		for n := range s.added {
			if !yield(n) {
				return
			}
		}
	}
}

// Add subscribes n, reporting whether it was not already.
func (s *Subscribed) Add(n string) bool {
	if s.base.Has(n) {
		if !s.removed[n] {
			return false
		}
		delete(s.removed, n)
		s.removedCost -= NameCost(n)
		return true
	}
	if s.added[n] {
		return false
	}
	s.added = MarkName(s.added, n)
	s.addedCost += NameCost(n)
	return true
}

// Remove unsubscribes n, reporting whether it was subscribed.
func (s *Subscribed) Remove(n string) bool {
	if s.added[n] {
		delete(s.added, n)
		s.addedCost -= NameCost(n)
		return true
	}
	if !s.base.Has(n) || s.removed[n] {
		return false
	}
	s.removed = MarkName(s.removed, n)
	s.removedCost += NameCost(n)
	return true
}

// Settle folds the changes into a new base interned in sets once they
// outnumber a quarter of the base (and foldMin). Call it after each
// request's changes.
func (s *Subscribed) Settle(sets *NameSets) {
	changes := len(s.added) + len(s.removed)
	if changes == 0 || changes <= max(foldMin, s.base.Len()/4) {
		return
	}
	m := make(map[string]bool, s.Len())
	for n := range s.All() {
		m[n] = true
	}
	s.base, s.added, s.removed = sets.Intern(m), nil, nil
	s.addedCost, s.removedCost = 0, 0
}

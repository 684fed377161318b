package xdsstream

import (
	"hash/maphash"
	"iter"
	"runtime"
	"sort"
	"sync"
	"weak"
)

// NameSet is an immutable set of resource names a stream subscribes to.
// Streams subscribed to the same names share one (NameSets). The nil
// set is empty. Its methods may be called concurrently.
type NameSet struct {
	m      map[string]bool
	cost   int // NameCost summed
	sorted func() []string
}

func newNameSet(m map[string]bool) *NameSet {
	s := &NameSet{m: m}
	for n := range m {
		s.cost += NameCost(n)
	}
	s.sorted = sync.OnceValue(func() []string {
		out := make([]string, 0, len(m))
		for n := range m {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	})
	return s
}

// Has reports whether n is in the set.
func (s *NameSet) Has(n string) bool { return s != nil && s.m[n] }

// Len is the number of names.
func (s *NameSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.m)
}

// Cost is what subscribing to the names costs (NameCost summed).
func (s *NameSet) Cost() int {
	if s == nil {
		return 0
	}
	return s.cost
}

// All yields the names, in no order.
func (s *NameSet) All() iter.Seq[string] {
	return func(yield func(string) bool) {
		if s == nil {
			return
		}
		for n := range s.m {
			if !yield(n) {
				return
			}
		}
	}
}

// Sorted returns the names in order. The slice is shared: it must not be
// changed.
func (s *NameSet) Sorted() []string {
	if s == nil {
		return nil
	}
	return s.sorted()
}

// Same reports whether names, "*" left out, are exactly the set.
func (s *NameSet) Same(names []string) bool {
	n := 0
	for _, x := range names {
		if x == "*" {
			continue
		}
		if !s.Has(x) {
			return false
		}
		n++
	}
	// Duplicates in names count twice: then the set is not told the same
	// (the caller builds it again, which finds this one).
	return n == s.Len()
}

func (s *NameSet) sameMap(m map[string]bool) bool {
	if s.Len() != len(m) {
		return false
	}
	for n := range m {
		if !s.m[n] {
			return false
		}
	}
	return true
}

// NameSets interns name sets: Get returns the set a stream subscribed to
// the same names already holds, if any, so that a thousand streams of one
// group subscribed to the same 200 endpoint sets hold one set. It keeps
// the sets weakly: a set no stream holds is collected and forgotten. The
// zero value is ready; its methods may be called concurrently.
type NameSets struct {
	mu sync.Mutex // guards m
	// m: the sets by the sum of their names' hashes (order-independent).
	m map[uint64][]weak.Pointer[NameSet]
}

var nameSeed = maphash.MakeSeed()

// Get returns the set of names ("*" left out), shared with every stream
// that asked for the same set while this one lives.
func (c *NameSets) Get(names []string) *NameSet {
	var sum uint64
	for _, n := range names {
		if n != "*" {
			sum += maphash.String(nameSeed, n)
		}
	}
	if s := c.find(sum, func(s *NameSet) bool { return s.Same(names) }); s != nil {
		return s
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		if n != "*" {
			m[n] = true
		}
	}
	return c.Intern(m)
}

// Intern returns the set of the names of m, shared with every stream
// that asked for the same set while this one lives. It takes m: the
// caller must not change it after.
func (c *NameSets) Intern(m map[string]bool) *NameSet {
	if len(m) == 0 {
		return nil
	}
	var sum uint64
	for n := range m {
		sum += maphash.String(nameSeed, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.m[sum] {
		if s := w.Value(); s != nil && s.sameMap(m) {
			return s
		}
	}
	s := newNameSet(m)
	if c.m == nil {
		c.m = map[uint64][]weak.Pointer[NameSet]{}
	}
	c.m[sum] = append(c.m[sum], weak.Make(s))
	runtime.AddCleanup(s, c.forget, sum)
	return s
}

// find returns the live set of hash sum that same accepts, if any.
func (c *NameSets) find(sum uint64, same func(*NameSet) bool) *NameSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.m[sum] {
		if s := w.Value(); s != nil && same(s) {
			return s
		}
	}
	return nil
}

// forget drops the collected sets of hash sum.
func (c *NameSets) forget(sum uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.m[sum][:0]
	for _, w := range c.m[sum] {
		if w.Value() != nil {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		delete(c.m, sum)
		return
	}
	c.m[sum] = ws
}

// MarkName adds n to m, a set of names a stream keeps (those that may
// have changed, those to send again, ...), made if nil, and returns it:
// such sets are nil while empty.
func MarkName(m map[string]bool, n string) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[n] = true
	return m
}

// ReuseNames empties m, a set of names, for the next changes: a small
// one (at most 8) is kept, so that a push allocates no new map, a large
// one (a first response's) let go.
func ReuseNames(m map[string]bool) map[string]bool {
	if len(m) > 8 {
		return nil
	}
	clear(m)
	return m
}

// SortedNames returns the names in m, sorted.
func SortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

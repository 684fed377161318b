package scope

import (
	"sort"
	"strings"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
)

// Visible returns the entry a node of chain c sees for name: that of the
// most specific scope of c holding one.
func Visible(snap *view.Snapshot, t *resource.Type, c Chain, name string) *view.Entry {
	if !c.Layered() {
		if c != "" {
			if e, ok := snap.Get(t, string(c), name); ok {
				return e
			}
		}
		e, _ := snap.Get(t, store.DefaultScope, name)
		return e
	}
	var found *view.Entry
	c.Each(func(s string) bool {
		found, _ = snap.Get(t, s, name)
		return found == nil
	})
	return found
}

// Entries returns, sorted by name, what a node of chain c sees of type t:
// everything (wildcard) or the named resources that exist.
func Entries(snap *view.Snapshot, t *resource.Type, c Chain, names []string, wildcard bool) []*view.Entry {
	if !wildcard {
		out := make([]*view.Entry, 0, len(names))
		for _, n := range names {
			if n == "*" {
				continue
			}
			if e := Visible(snap, t, c, n); e != nil {
				out = append(out, e)
			}
		}
		SortEntries(out)
		return dedupe(out)
	}
	if c.Layered() {
		return layeredEntries(snap, t, c)
	}
	group := string(c)
	var out []*view.Entry
	snap.Walk(t, store.DefaultScope, func(e *view.Entry) bool {
		if group != "" {
			if g, ok := snap.Get(t, group, e.Name); ok {
				e = g
			}
		}
		out = append(out, e)
		return true
	})
	if group != "" {
		snap.Walk(t, group, func(e *view.Entry) bool {
			if _, ok := snap.Get(t, store.DefaultScope, e.Name); !ok {
				out = append(out, e)
			}
			return true
		})
		SortEntries(out)
	}
	return out
}

// layeredEntries is every entry of type t a node of layered chain c sees:
// per name, the most specific scope's.
func layeredEntries(snap *view.Snapshot, t *resource.Type, c Chain) []*view.Entry {
	byName := map[string]*view.Entry{}
	scopes := c.Scopes()
	for i := len(scopes) - 1; i >= 0; i-- { // least specific first, overridden after
		snap.Walk(t, scopes[i], func(e *view.Entry) bool {
			byName[e.Name] = e
			return true
		})
	}
	out := make([]*view.Entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	SortEntries(out)
	return out
}

// UnchangedSince reports whether what a node of chain c would receive for
// type t (the named resources, or all) is the same as at revision v.
func UnchangedSince(snap *view.Snapshot, t *resource.Type, c Chain, names []string, wildcard bool, v int64) bool {
	if v > snap.Revision || v < snap.HistoryFrom-1 {
		return false // changes before the view's history are unknown
	}
	var scopes []string
	if c.Layered() {
		scopes = c.Scopes()
	} else {
		var buf [2]string // on the stack: a group and the default scope
		scopes = append(buf[:0], store.DefaultScope)
		if c != "" {
			scopes = append(scopes, string(c))
		}
	}
	setUnchanged := true
	for _, s := range scopes {
		setUnchanged = setUnchanged && snap.LastChange(t, s) <= v
	}
	if wildcard || setUnchanged {
		return setUnchanged
	}
	for _, n := range names {
		for _, s := range scopes {
			if e, ok := snap.Get(t, s, n); ok && e.ModRevision > v {
				return false
			}
			if r, ok := snap.DeletedAt(t, s, n); ok && r > v {
				return false
			}
		}
	}
	return true
}

// ShadowChangedSince reports whether a group's scope more specific in c
// than scope changed its resources of type t after revision rev: a
// client holding an entry of scope from rev may then have held another's
// of the same name (an override deleted since), which one apply may have
// written at the same revision. A rollout's overlay never shares a
// revision with another scope's entry (it is written, and removed, in
// transactions of its own), so its changes are not counted: a version
// names the overlay's entry or another's, never both.
func ShadowChangedSince(snap *view.Snapshot, t *resource.Type, c Chain, scope string, rev int64) bool {
	changed := false
	c.Each(func(s string) bool {
		if s == scope {
			return false
		}
		changed = !strings.HasPrefix(s, resource.ReservedScopePrefix) && snap.LastChange(t, s) > rev
		return !changed
	})
	return changed
}

// SortEntries sorts entries by name.
func SortEntries(es []*view.Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
}

func dedupe(es []*view.Entry) []*view.Entry {
	out := es[:0]
	for i, e := range es {
		if i > 0 && es[i-1].Name == e.Name {
			continue
		}
		out = append(out, e)
	}
	return out
}

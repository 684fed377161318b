package scope

import (
	"sort"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
)

// Visible returns the entry a node of group sees for name: the group's,
// else the default scope's.
func Visible(snap *view.Snapshot, t *resource.Type, group, name string) *view.Entry {
	if group != "" {
		if e, ok := snap.Get(t, group, name); ok {
			return e
		}
	}
	e, _ := snap.Get(t, store.DefaultScope, name)
	return e
}

// Entries returns, sorted by name, what a node of group sees of type
// t: everything (wildcard) or the named resources that exist.
func Entries(snap *view.Snapshot, t *resource.Type, group string, names []string, wildcard bool) []*view.Entry {
	if !wildcard {
		out := make([]*view.Entry, 0, len(names))
		for _, n := range names {
			if n == "*" {
				continue
			}
			if e := Visible(snap, t, group, n); e != nil {
				out = append(out, e)
			}
		}
		SortEntries(out)
		return dedupe(out)
	}
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

// UnchangedSince reports whether what a node of group would receive for
// type t (the named resources, or all) is the same as at revision v.
func UnchangedSince(snap *view.Snapshot, t *resource.Type, group string, names []string, wildcard bool, v int64) bool {
	if v > snap.Revision || v < snap.HistoryFrom-1 {
		return false // changes before the view's history are unknown
	}
	setUnchanged := snap.LastChange(t, store.DefaultScope) <= v && (group == "" || snap.LastChange(t, group) <= v)
	if wildcard || setUnchanged {
		return setUnchanged
	}
	for _, n := range names {
		for _, scope := range []string{group, store.DefaultScope} {
			if scope == "" {
				continue
			}
			if e, ok := snap.Get(t, scope, n); ok && e.ModRevision > v {
				return false
			}
			if r, ok := snap.DeletedAt(t, scope, n); ok && r > v {
				return false
			}
		}
	}
	return true
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

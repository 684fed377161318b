package scope

import (
	"strings"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
)

// Members returns, sorted by name, what a node of chain c sees of the
// glob collection glob (xRFC TP1 "Glob", in normalized form,
// xdstp://AUTHORITY/TYPE/DIR/*?PARAMS): every resource of type t named
// directly under DIR with the same context parameters, each from the
// most specific scope of c holding it. Names share their directory as a
// prefix, so only the collection's range of the view is walked, never
// the whole type.
func Members(snap *view.Snapshot, t *resource.Type, c Chain, glob string) []*view.Entry {
	if !xdstp.IsGlob(glob) {
		return nil
	}
	dir, _, _ := strings.Cut(glob, "?")
	dir = strings.TrimSuffix(dir, "*") // the members' common prefix
	var out []*view.Entry
	seen := map[string]bool{}
	for _, s := range mostSpecificFirst(c) {
		snap.WalkNamePrefix(t, s, dir, func(e *view.Entry) bool {
			if !seen[e.Name] {
				if g, ok := xdstp.CollectionOf(e.Name); ok && g == glob {
					seen[e.Name] = true
					out = append(out, e)
				}
			}
			return true
		})
	}
	SortEntries(out)
	return out
}

// mostSpecificFirst is the scopes of c, the one that wins a name first.
func mostSpecificFirst(c Chain) []string {
	if c.Layered() {
		return c.Scopes()
	}
	if c == "" {
		return []string{store.DefaultScope}
	}
	return []string{string(c), store.DefaultScope}
}

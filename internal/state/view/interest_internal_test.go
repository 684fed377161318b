package view

import (
	"fmt"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// TestVisitByBatch: a change visits the interests of one batching key
// one after the other, whatever order they registered in, in the
// changed scope only when only a scope changed, and in every scope for a
// change of the default one.
func TestVisitByBatch(t *testing.T) {
	var r interests
	const conns, perConn = 50, 10
	conn := map[*Interest]int{}
	// Registered interleaved, as streams open: one per batch (the
	// streams of one connection) in turn, in two scopes.
	for range perConn {
		for c := range conns {
			scope := "g1"
			if c%2 == 1 {
				scope = "g2"
			}
			i := &Interest{reg: &r, scope: scope, batch: fmt.Sprint("conn", c), wake: make(chan struct{}, 1)}
			i.types.Store(1 << resource.Endpoint.Order)
			r.add(i)
			conn[i] = c
		}
	}
	for _, tc := range []struct {
		name   string
		scope  string
		visits int
	}{
		{"scoped", "g1", conns / 2 * perConn},
		{"default", store.DefaultScope, conns * perConn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Changes: []EntryChange{{Key: store.Key{Type: resource.Endpoint, Scope: tc.scope, Name: "e"}}}}
			var order []int
			r.visit(s, false, func(i *Interest, catchUp bool) {
				if catchUp {
					t.Errorf("conn %d visited for a catch-up", conn[i])
				}
				if tc.scope != store.DefaultScope && i.scope != tc.scope {
					t.Errorf("an interest of scope %q visited for a change of %q", i.scope, tc.scope)
				}
				order = append(order, conn[i])
			})
			if len(order) != tc.visits {
				t.Fatalf("%d visits, want %d", len(order), tc.visits)
			}
			done := map[int]bool{}
			for k, c := range order {
				if k > 0 && order[k-1] != c {
					if done[c] {
						t.Fatalf("batch %d's interests visited in two runs: %v", c, order)
					}
					done[order[k-1]] = true
				}
			}
		})
	}
	// Removing every interest leaves no empty set behind.
	for i := range conn {
		r.remove(i)
	}
	if len(r.byScope) != 0 {
		t.Errorf("%d scopes left after removing every interest", len(r.byScope))
	}
}

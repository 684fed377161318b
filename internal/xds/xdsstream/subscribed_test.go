package xdsstream

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// TestSubscribed: adds and removes, in any mix, leave the set a map
// changed the same way holds; folded, streams that made the same changes
// share one base.
func TestSubscribed(t *testing.T) {
	var sets NameSets
	var a, b Subscribed
	want := map[string]bool{}
	check := func(s *Subscribed, step string) {
		t.Helper()
		got := slices.Sorted(s.All())
		if !slices.Equal(got, slices.Sorted(maps.Keys(want))) || s.Len() != len(want) {
			t.Fatalf("%s: %v (len %d), want %v", step, got, s.Len(), slices.Sorted(maps.Keys(want)))
		}
		for n := range want {
			if !s.Has(n) {
				t.Fatalf("%s: Has(%s) false", step, n)
			}
		}
		if s.Has("never") {
			t.Fatalf("%s: Has(never)", step)
		}
		cost := 0
		for n := range want {
			cost += NameCost(n)
		}
		if s.Cost() != cost {
			t.Fatalf("%s: Cost %d, want %d", step, s.Cost(), cost)
		}
	}
	for round := range 5 {
		for i := range 100 {
			n := fmt.Sprintf("n%03d", (i*7+round*13)%150)
			add := (i+round)%3 != 0
			var changedA, changedB bool
			if add {
				changedA, changedB = a.Add(n), b.Add(n)
			} else {
				changedA, changedB = a.Remove(n), b.Remove(n)
			}
			if changedA != (want[n] != add) || changedB != changedA {
				t.Fatalf("round %d: %v %s reported %v, want %v", round, add, n, changedA, want[n] != add)
			}
			if add {
				want[n] = true
			} else {
				delete(want, n)
			}
			if i%10 == 9 {
				a.Settle(&sets)
				b.Settle(&sets)
				check(&a, fmt.Sprintf("round %d step %d", round, i))
			}
		}
		check(&b, fmt.Sprintf("round %d", round))
	}
	if a.base == nil || a.base != b.base {
		t.Errorf("two streams that made the same changes hold bases %p and %p, want one shared", a.base, b.base)
	}
	// A removed name of the base added back is the base's again.
	n := slices.Sorted(a.base.All())[0]
	if !a.Remove(n) || a.Has(n) || !a.Add(n) || !a.Has(n) || len(a.removed) != 0 && a.removed[n] {
		t.Errorf("%s removed and added back: Has %v, removed %v", n, a.Has(n), a.removed)
	}
}

// BenchmarkSubscribeOneName: a one-name change to a stream holding
// 10,000 names costs what the name does, not the set: subscribe and
// unsubscribe of a new name, and a resubscribe of a held one (no change).
func BenchmarkSubscribeOneName(b *testing.B) {
	var sets NameSets
	var s Subscribed
	for i := range 10_000 {
		s.Add(fmt.Sprintf("cluster-%05d-%s", i, "padding-to-a-realistic-length"))
	}
	s.Settle(&sets)
	b.Run("add-remove", func(b *testing.B) {
		for b.Loop() {
			s.Add("one-more")
			s.Settle(&sets)
			s.Remove("one-more")
			s.Settle(&sets)
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			s.Add("cluster-00042-padding-to-a-realistic-length")
			s.Settle(&sets)
		}
	})
}

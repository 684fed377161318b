package xdsstream

import "testing"

// TestSharedSets: streams in the same state sending the same response at
// the table's revision share one set, built once; another state or key
// gets its own; a newer revision replaces the table, and an older one is
// built for the stream alone.
func TestSharedSets(t *testing.T) {
	type set struct{ n int }
	var c SharedSets[set]
	builds := 0
	build := func() *set { builds++; return &set{builds} }
	a := c.Next(5, nil, "k", build)
	if b := c.Next(5, nil, "k", build); b != a || builds != 1 {
		t.Fatalf("same state and response: %p and %p, %d builds; want one shared set", a, b, builds)
	}
	if b := c.Next(5, a, "k", build); b == a {
		t.Fatal("another state shared the set")
	}
	if b := c.Next(5, nil, "other", build); b == a {
		t.Fatal("another response shared the set")
	}
	newer := c.Next(6, nil, "k", build)
	if newer == a {
		t.Fatal("a newer revision reused the older revision's set")
	}
	old1, old2 := c.Next(5, nil, "k", build), c.Next(5, nil, "k", build)
	if old1 == old2 || old1 == a {
		t.Fatal("sets of a revision older than the table's were shared")
	}
	if c.Next(6, nil, "k", build) != newer {
		t.Fatal("the newer revision's set was not kept")
	}
}

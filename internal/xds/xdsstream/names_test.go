package xdsstream

import (
	"runtime"
	"testing"
	"time"
)

func TestNameSetsShare(t *testing.T) {
	var c NameSets
	a := c.Get([]string{"x", "y", "z"})
	if a.Len() != 3 || !a.Has("y") || a.Has("w") || a.Has("*") {
		t.Fatalf("set %v, want x, y, z", a.Sorted())
	}
	for _, names := range [][]string{{"z", "x", "y"}, {"x", "y", "z", "x"}, {"*", "y", "z", "x"}} {
		if b := c.Get(names); b != a {
			t.Errorf("Get(%q) made a new set, want the one of x, y, z", names)
		}
	}
	if b := c.Get([]string{"x", "y"}); b == a || b.Len() != 2 {
		t.Errorf("Get(x, y) = %v, want a set of its own", b.Sorted())
	}
	if got := c.Intern(map[string]bool{"z": true, "y": true, "x": true}); got != a {
		t.Error("Intern(x, y, z) made a new set")
	}
	if !a.Same([]string{"z", "y", "x"}) || a.Same([]string{"x", "y"}) || a.Same([]string{"x", "y", "z", "w"}) {
		t.Error("Same is wrong")
	}
	if c.Get(nil) != nil || c.Get([]string{"*"}) != nil {
		t.Error("an empty set is not nil")
	}
	var none *NameSet
	if none.Len() != 0 || none.Has("x") || !none.Same(nil) || none.Sorted() != nil {
		t.Error("the nil set is not empty")
	}
	if got := a.Sorted(); len(got) != 3 || got[0] != "x" || got[2] != "z" {
		t.Errorf("Sorted = %q", got)
	}
}

// A set no stream holds any more is forgotten.
func TestNameSetsForget(t *testing.T) {
	var c NameSets
	c.Get([]string{"gone-1", "gone-2"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		c.mu.Lock()
		n := len(c.m)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table still holds %d hashes of collected sets", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

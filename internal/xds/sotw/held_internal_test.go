package sotw

import (
	"fmt"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
)

func sentEntries(rev int64, names ...string) []*view.Entry {
	out := make([]*view.Entry, len(names))
	for i, n := range names {
		out[i] = &view.Entry{Key: store.Key{Type: resource.Endpoint, Scope: store.DefaultScope, Name: n}, ModRevision: rev}
	}
	return out
}

// Streams sent the same responses share what they hold; a push of one
// resource goes to the stream's own changes.
func TestHoldingShared(t *testing.T) {
	var sets sentSets
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("e%d", i)
	}
	all := sentEntries(5, names...)
	a, b := newHolding(), newHolding()
	a.merge(&sets, 5, "k1", all)
	b.merge(&sets, 5, "k1", all)
	if a.base != b.base || a.own != nil || a.len() != 8 {
		t.Fatalf("the two holdings share no set or hold %d, want 8", a.len())
	}
	base := a.base
	changed := sentEntries(6, "e1")
	a.merge(&sets, 6, "k2", changed)
	if a.base != base || len(a.own) != 1 || a.len() != 8 || a.get("e1") != changed[0] || b.get("e1") != all[1] {
		t.Fatal("a push did not go to the stream's own changes")
	}
	a.drop("e2")
	if a.len() != 7 || a.get("e2") != nil || b.get("e2") == nil {
		t.Error("a drop is not the stream's own")
	}
	n := 0
	a.each(func(*view.Entry) { n++ })
	if n != 7 {
		t.Errorf("each yields %d entries, want 7", n)
	}
	// A full-state response replaces what is held, shared by its key.
	a.replace(&sets, 6, "w", sentEntries(6, "x", "y"))
	b.replace(&sets, 6, "w", sentEntries(6, "x", "y"))
	if a.base != b.base || a.len() != 2 || a.get("e1") != nil {
		t.Error("a full-state response did not replace the set, shared")
	}
	// A body of the stream's own ("" key) is not shared.
	a.replace(&sets, 6, "", sentEntries(6, "x"))
	if a.base == b.base || a.len() != 1 {
		t.Error("an unshared response took a shared set")
	}
}

// TestSetNamesSameList: a request naming the very list the last one did
// (the codec shares one list among the requests naming the same) is taken
// without a look at its names; the same names in another list are
// compared.
func TestSetNamesSameList(t *testing.T) {
	st := &stream{s: &Server{}}
	ts := &typeState{t: resource.Endpoint, sent: newHolding()}
	list := []string{"a", "b"}
	st.setNames(ts, list, true)
	if len(ts.dirty) != 2 {
		t.Fatalf("first names: %d marked, want 2", len(ts.dirty))
	}
	ts.dirty = nil
	ts.names = nil // were the names compared, both would be new
	st.setNames(ts, list, true)
	if len(ts.dirty) != 0 {
		t.Errorf("the same list again: %d names marked, want none", len(ts.dirty))
	}
	st.setNames(ts, []string{"a", "b"}, true)
	if len(ts.dirty) != 2 {
		t.Errorf("the same names in another list: %d marked, want 2 (compared with the set)", len(ts.dirty))
	}
}

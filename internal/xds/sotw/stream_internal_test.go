package sotw

import (
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
)

// TestSetNamesSameList: a request naming the very list the last one did
// (the codec shares one list among the requests naming the same) is taken
// without a look at its names; the same names in another list are
// compared.
func TestSetNamesSameList(t *testing.T) {
	st := &stream{s: &Server{}}
	ts := &typeState{t: resource.Endpoint}
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

package scope_test

import (
	"slices"
	"testing"

	"github.com/legation-io/legation/internal/state/scope"
)

// TestChainOrder: a chain is looked up overlays over the group first,
// then the group, the overlays over the default scope, the default scope;
// a chain with no overlay is the group's name itself.
func TestChainOrder(t *testing.T) {
	for _, tc := range []struct {
		c      scope.Chain
		group  string
		scopes []string
	}{
		{scope.Of(""), "", []string{"default"}},
		{scope.Of("team"), "team", []string{"team", "default"}},
		{scope.Layered("team", nil, nil), "team", []string{"team", "default"}},
		{scope.Layered("team", []string{"~a"}, nil), "team", []string{"~a", "team", "default"}},
		{scope.Layered("team", []string{"~a", "~b"}, []string{"~c"}), "team", []string{"~a", "~b", "team", "~c", "default"}},
		{scope.Layered("", nil, []string{"~c", "~d"}), "", []string{"~c", "~d", "default"}},
	} {
		if got := tc.c.Scopes(); !slices.Equal(got, tc.scopes) {
			t.Errorf("%q.Scopes() = %q, want %q", tc.c, got, tc.scopes)
		}
		if got := tc.c.Group(); got != tc.group {
			t.Errorf("%q.Group() = %q, want %q", tc.c, got, tc.group)
		}
		for _, s := range tc.scopes {
			if !tc.c.Has(s) {
				t.Errorf("%q.Has(%q) = false", tc.c, s)
			}
		}
		if tc.c.Has("other") {
			t.Errorf("%q.Has(other) = true", tc.c)
		}
	}
	if scope.Of("team") != scope.Layered("team", nil, nil) || scope.Of("team").Layered() {
		t.Error("a chain with no overlay is not its group's")
	}
}

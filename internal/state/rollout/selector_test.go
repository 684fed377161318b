package rollout_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/rollout"
)

// TestSelector: each kind of selector picks what it says, and a bad one
// is refused with an error naming it.
func TestSelector(t *testing.T) {
	for _, tc := range []struct {
		sel   string
		id    string
		group string
		want  bool
	}{
		{"node:edge-eu-*", "edge-eu-1", "", true},
		{"node:edge-eu-*", "edge-us-1", "", false},
		{"node:edge-?", "edge-1", "", true},
		{"node:edge-?", "edge-12", "", false},
		{"node:a.b", "axb", "", false}, // '.' is a dot, not any character
		{"node:a/*", "a/b/c", "", true},
		{"group:canary", "x", "canary", true},
		{"group:canary", "x", "stable", false},
		{"100%", "anything", "", true},
	} {
		s, err := rollout.ParseSelector(tc.sel)
		if err != nil {
			t.Fatalf("ParseSelector(%q): %v", tc.sel, err)
		}
		if got := s.Matches(tc.id, tc.group); got != tc.want {
			t.Errorf("%q.Matches(%q, %q) = %v, want %v", tc.sel, tc.id, tc.group, got, tc.want)
		}
	}
	for sel, want := range map[string]string{
		"":            "want a share of nodes",
		"0%":          "a percentage above 0",
		"101%":        "a percentage above 0",
		"x%":          "a percentage above 0",
		"NaN%":        "a percentage above 0",
		"0.001%":      "in steps of 0.01",
		"node:":       "node: needs a pattern",
		"group:":      "empty scope",
		"group:a b":   "scopes may not hold",
		"group:~x":    "reserved for rollouts",
		"canary-1234": "want a share of nodes",
	} {
		_, err := rollout.ParseSelector(sel)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", sel)) {
			t.Errorf("ParseSelector(%q) = %v, want an error naming it and saying %q", sel, err, want)
		}
	}
}

// TestShareSelector: a share picks about that share of nodes, the same
// ones every time, and those of a smaller share among those of a larger.
func TestShareSelector(t *testing.T) {
	ten, _ := rollout.ParseSelector("10%")
	five, _ := rollout.ParseSelector("5%")
	picked := 0
	for i := range 20000 {
		id := fmt.Sprintf("envoy-%d", i)
		in10, in5 := ten.Matches(id, ""), five.Matches(id, "")
		if in5 && !in10 {
			t.Fatalf("%s is in 5%% but not in 10%%", id)
		}
		if in10 != ten.Matches(id, "") {
			t.Fatalf("%s: not the same answer twice", id)
		}
		if in10 {
			picked++
		}
	}
	if picked < 1800 || picked > 2200 {
		t.Errorf("10%% of 20,000 nodes picked %d, want about 2,000", picked)
	}
}

// FuzzParseSelector: no input panics; one accepted matches without
// panicking and reads back as given.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"10%", "0.5%", "node:edge-*", "group:canary", "node:[", "node:\\", "%", "1e2%"} {
		f.Add(s, "edge-1")
	}
	f.Fuzz(func(t *testing.T, s, id string) {
		sel, err := rollout.ParseSelector(s)
		if err != nil {
			return
		}
		sel.Matches(id, id)
		if sel.String() != s {
			t.Errorf("String() = %q, want %q", sel.String(), s)
		}
	})
}

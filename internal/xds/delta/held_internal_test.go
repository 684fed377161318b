package delta

import "testing"

func TestParseRev(t *testing.T) {
	for v, want := range map[string]int64{"12": 12, "012": -1, "": -1, "x": -1, "-3": -1, "0": -1} {
		if got := parseRev(v); got != want {
			t.Errorf("parseRev(%q) = %d, want %d", v, got, want)
		}
	}
}

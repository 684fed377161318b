package xdsstream_test

import (
	"slices"
	"testing"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// TestNormalNames: xdstp names are normalized, others and malformed
// ones kept; a list or map that needs no change is returned as is.
func TestNormalNames(t *testing.T) {
	const c = "xdstp://a/envoy.config.cluster.v3.Cluster/svc"
	plain := []string{"a", "b", "*"}
	if got := xdsstream.NormalNames(plain); &got[0] != &plain[0] {
		t.Errorf("NormalNames of names that need no change copied them")
	}
	in := []string{"a", c + "?b=2&a=1", c + "?bad", c}
	want := []string{"a", c + "?a=1&b=2", c + "?bad", c}
	if got := xdsstream.NormalNames(in); !slices.Equal(got, want) || in[1] != c+"?b=2&a=1" {
		t.Errorf("NormalNames(%q) = %q, want %q (and the input unchanged)", in, got, want)
	}
	v := map[string]string{c + "?z=1&y=2": "7", "plain": "3"}
	got := xdsstream.NormalVersions(v)
	if len(got) != 2 || got[c+"?y=2&z=1"] != "7" || got["plain"] != "3" || len(v) != 2 || v[c+"?z=1&y=2"] != "7" {
		t.Errorf("NormalVersions(%v) = %v", v, got)
	}
	same := map[string]string{"plain": "3"}
	if got := xdsstream.NormalVersions(same); len(got) != 1 {
		t.Errorf("NormalVersions(%v) = %v", same, got)
	}
}

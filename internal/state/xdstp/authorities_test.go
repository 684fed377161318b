package xdstp_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/xdstp"
)

// TestAuthorities: a cluster serves old-style names, xdstp names of the
// empty authority and of the authorities it is given; bad authority
// names are refused, naming them.
func TestAuthorities(t *testing.T) {
	a, err := xdstp.NewAuthorities([]string{"fed-b", "fed-a", "xds.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Names(); !slices.Equal(got, []string{"fed-a", "fed-b", "xds.example.com:443"}) {
		t.Errorf("Names = %q", got)
	}
	const c = "/envoy.config.cluster.v3.Cluster/svc"
	for name, want := range map[string]bool{
		"plain":                           true,
		"xdstp://" + c:                    true,
		"xdstp://fed-a" + c:               true,
		"xdstp://fed-%61" + c:             true, // decoded, the authority is fed-a
		"xdstp://xds.example.com:443" + c: true,
		"xdstp://fed-c" + c:               false,
		"xdstp://fed-a" + c + "?bad":      false,
	} {
		if got := a.Serves(name); got != want {
			t.Errorf("Serves(%q) = %v, want %v", name, got, want)
		}
	}
	var none xdstp.Authorities
	if !none.Serves("plain") || !none.Serves("xdstp://"+c) || none.Serves("xdstp://fed-a"+c) {
		t.Errorf("the zero Authorities must serve old-style and empty-authority names only")
	}
	for _, bad := range [][]string{{""}, {"a/b"}, {"a b"}, {"fed-a", "fed-a"}, {"a?b"}} {
		if _, err := xdstp.NewAuthorities(bad); err == nil || !strings.Contains(err.Error(), "authority") {
			t.Errorf("NewAuthorities(%q) = %v, want an error naming the authority", bad, err)
		}
	}
}

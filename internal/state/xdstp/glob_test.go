package xdstp_test

import (
	"testing"

	"github.com/legation-io/legation/internal/state/xdstp"
)

func mustParse(t *testing.T, s string) xdstp.Name {
	t.Helper()
	n, err := xdstp.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestContains(t *testing.T) {
	const l = "xdstp://some-authority/" + listenerType + "/"
	tests := []struct {
		name         string
		glob, member string
		want         bool
	}{
		{"TP1: Client requests .../foo/*; Server responds with resources .../foo/bar", l + "foo/*", l + "foo/bar", true},
		{"TP1: ... .../foo/baz", l + "foo/*", l + "foo/baz", true},
		{"TP1: A request for .../foo/*?some=thing will match a resource .../foo/bar?some=thing",
			l + "foo/*?some=thing", l + "foo/bar?some=thing", true},
		{"TP1: ... but not .../foo/bar", l + "foo/*?some=thing", l + "foo/bar", false},
		{"TP1: context parameters in the request must be matched in responses, not exceeded",
			l + "foo/*", l + "foo/bar?some=thing", false},
		{"TP1: context parameters match modulo ordering", l + "foo/*?a=1&b=2", l + "foo/bar?b=2&a=1", true},
		{"a different value", l + "foo/*?some=thing", l + "foo/bar?some=other", false},
		{"cncf/xds#91: a glob holds its direct children only", l + "foo/*", l + "foo/bar/baz", false},
		{"TP1: Globs can exist in arbitrary path locations", l + "some/longer/path/*", l + "some/longer/path/resourceName", true},
		{"cncf/xds#91: not some/longer/*", l + "some/longer/*", l + "some/longer/path/resourceName", false},
		{"the directory itself is no member", l + "foo/*", l + "foo", false},
		{"a sibling directory", l + "foo/*", l + "food/bar", false},
		{"a glob is no member of a glob", l + "foo/*", l + "foo/*", false},
		{"a nested glob is no member", l + "foo/*", l + "foo/bar/*", false},
		{"the glob over the whole type holds top-level ids", l + "*", l + "bar", true},
		{"the glob over the whole type holds only them", l + "*", l + "foo/bar", false},
		{"another authority", l + "foo/*", "xdstp://other/" + listenerType + "/foo/bar", false},
		{"no authority", l + "foo/*", "xdstp:///" + listenerType + "/foo/bar", false},
		{"another type", l + "foo/*", "xdstp://some-authority/" + clusterType + "/foo/bar", false},
		{"%2F in the member is a '/'", l + "foo/*", l + "foo%2Fbar", true},
		{"a singleton contains nothing", l + "foo/bar", l + "foo/bar", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, m := mustParse(t, tc.glob), mustParse(t, tc.member)
			if got := g.Contains(m); got != tc.want {
				t.Errorf("%q.Contains(%q) = %v, want %v", tc.glob, tc.member, got, tc.want)
			}
			// Collection is the lookup key for the same relation.
			if !m.Glob {
				if got := m.Collection().Equal(g); got != tc.want {
					t.Errorf("%q.Collection() = %q; equal to %q = %v, want %v", tc.member, m.Collection(), tc.glob, got, tc.want)
				}
			}
		})
	}
}

func TestCollection(t *testing.T) {
	const l = "xdstp://a/" + listenerType + "/"
	tests := []struct {
		in, want string
	}{
		{l + "foo/bar", l + "foo/*"},
		{l + "foo/bar?b=2&a=1", l + "foo/*?a=1&b=2"},
		{l + "x/y/z", l + "x/y/*"},
		{l + "bar", l + "*"},
		{l + "foo/*?k=v", l + "foo/*?k=v"},
		{l + "*", l + "*"},
		{"xdstp:///" + listenerType + "/a%2Fb", "xdstp:///" + listenerType + "/a/*"},
	}
	for _, tc := range tests {
		n := mustParse(t, tc.in)
		c := n.Collection()
		if got := c.String(); got != tc.want {
			t.Errorf("Parse(%q).Collection() = %q, want %q", tc.in, got, tc.want)
		}
		if !c.Glob {
			t.Errorf("Parse(%q).Collection() is no glob", tc.in)
		}
		if !n.Glob && !c.Contains(n) {
			t.Errorf("%q does not contain %q", c, tc.in)
		}
	}
}

// TestCollectionCopies checks that Collection shares no memory with its
// receiver: changing the collection's parameters leaves the member alone.
func TestCollectionCopies(t *testing.T) {
	n := mustParse(t, "xdstp://a/"+listenerType+"/foo/bar?k=v")
	c := n.Collection()
	c.Params[0].Value = "changed"
	if n.Params[0].Value != "v" {
		t.Errorf("changing Collection().Params changed the member: %v", n.Params)
	}
}

func TestCollectionOf(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1", "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*", true},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?x=1&y=2", "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*?x=1&y=2", true},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/e1", "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/*", true},
		{"xdstp:///envoy.config.endpoint.v3.LbEndpoint/p/q/e1", "xdstp:///envoy.config.endpoint.v3.LbEndpoint/p/q/*", true},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*", "", false},
		{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/*?x=1", "", false},
		{"c1/e1", "", false},
		{"", "", false},
	} {
		got, ok := xdstp.CollectionOf(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CollectionOf(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIsGlob(t *testing.T) {
	for name, want := range map[string]bool{
		"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*":       true,
		"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/*?x=1":      true,
		"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1":      false,
		"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?x=/*": false,
		"c1/*": false,
		"":     false,
	} {
		if got := xdstp.IsGlob(name); got != want {
			t.Errorf("IsGlob(%q) = %v, want %v", name, got, want)
		}
	}
}

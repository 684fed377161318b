package delta

import (
	"fmt"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/limits"
)

func TestMatchDomain(t *testing.T) {
	tests := []struct {
		domain, host string
		rank         int
	}{
		{"a.example.com", "a.example.com", 4},
		{"*.example.com", "a.example.com", 3},
		{"*.example.com", ".example.com", 0},
		{"a.example.*", "a.example.org", 2},
		{"*", "anything", 1},
		{"b.example.com", "a.example.com", 0},
		{"*.example.com", "example.org", 0},
	}
	for _, tc := range tests {
		if got, _ := matchDomain(tc.domain, tc.host); got != tc.rank {
			t.Errorf("matchDomain(%q, %q) = %d, want %d", tc.domain, tc.host, got, tc.rank)
		}
	}
}

// TestAliasIndexMatchesScan: the alias index resolves every alias to the
// virtual host the scan of every virtual host (resolveAlias, the matching
// VHDS had before the index) picks: exact domains, "*.suffix" and
// "prefix.*" wildcards of every length, "*", domains with a "*" at both
// ends, upper case, ties (the first virtual host in name order), other
// route configurations and a group's overrides.
func TestAliasIndexMatchesScan(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	vh := func(name string, domains ...string) *routev3.VirtualHost {
		return &routev3.VirtualHost{Name: name, Domains: domains}
	}
	rev := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/exact", "a.example.com", "API.example.com")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/exact-tie", "a.example.com")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/suffix", "*.example.com", "*ample.com")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/suffix-long", "*.deep.example.com")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/prefix", "www.*", "www.example.*")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/both", "*mid*")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/any", "*")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc1/any-tie", "*", "*.example.com")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("rc2/only", "b.test", "*.test")),
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vh("novhds", "*")),
		xdstest.Put(t, resource.VirtualHost, "team", vh("rc2/only", "c.test")),
		xdstest.Put(t, resource.VirtualHost, "team", vh("rc3/team", "*.team")),
	})
	snap, err := e.View.WaitRevision(t.Context(), rev)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{
		"a.example.com", "A.Example.COM", "api.example.com", "b.example.com", "x.deep.example.com",
		".deep.example.com", "deep.example.com", "example.com", ".example.com", "xample.com", "ample.com",
		"www.example.org", "www.example.", "www.", "www.x", "www.example.com", "midway", "amid", "mid", "*mid*",
		"*", "nothing.test", "b.test", "c.test", "test", ".test", "x.team", "a", "",
	}
	for _, group := range []string{"", "team"} {
		x := buildAliasIndex(snap, scope.Of(group))
		for _, rc := range []string{"rc1", "rc2", "rc3", "novhds", "", "rc1/sub"} {
			for _, h := range hosts {
				alias := rc + "/" + h
				want, got := resolveAlias(snap, scope.Of(group), alias), x.resolve(alias)
				if got != want {
					t.Errorf("group %q alias %q: index resolves to %s, scan to %s", group, alias, entryName(got), entryName(want))
				}
			}
		}
		if got := x.resolve("rc1"); got != nil {
			t.Errorf("group %q: an alias without a host resolves to %s", group, entryName(got))
		}
	}
}

func entryName(e *view.Entry) string {
	if e == nil {
		return "nothing"
	}
	return e.Scope + "/" + e.Name
}

// TestAliasIndexesShared: streams at one revision and group share one
// index, and groups without virtual hosts of their own share the default
// scope's; another group with its own or a newer revision builds its own;
// an older revision is served without replacing the newer.
func TestAliasIndexesShared(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, &routev3.VirtualHost{Name: "rc/v", Domains: []string{"*"}}),
		xdstest.Put(t, resource.VirtualHost, "g", &routev3.VirtualHost{Name: "rc/g", Domains: []string{"g"}}),
	})
	s1, err := e.View.WaitRevision(t.Context(), r1)
	if err != nil {
		t.Fatal(err)
	}
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.VirtualHost, store.DefaultScope, &routev3.VirtualHost{Name: "rc/w", Domains: []string{"x"}})})
	s2, err := e.View.WaitRevision(t.Context(), r2)
	if err != nil {
		t.Fatal(err)
	}
	builds := 0
	c := aliasIndexes{built: func() { builds++ }}
	steps := []struct {
		snap  *view.Snapshot
		group string
		want  int // builds so far
	}{
		{s1, "", 1}, {s1, "", 1}, {s1, "g", 2}, {s1, "no-own", 2}, {s2, "", 3}, {s2, "", 3}, {s1, "", 4}, {s2, "", 4}, {s2, "g", 5}, {s2, "other", 5},
	}
	for i, st := range steps {
		x, err := c.get(st.snap, scope.Of(st.group))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if x.resolve("rc/x") == nil {
			t.Fatalf("step %d: the index resolves nothing", i)
		}
		if builds != st.want {
			t.Fatalf("step %d (revision %d, group %q): %d builds, want %d", i, st.snap.Revision, st.group, builds, st.want)
		}
	}
}

// TestAliasIndexesBounded: past max groups with virtual hosts of their
// own at one revision, get refuses with RESOURCE_EXHAUSTED naming
// --max-vhds-groups and counts the refusal; the default scope's index,
// shared by the groups without virtual hosts of their own however many,
// does not count; a newer revision starts over.
func TestAliasIndexesBounded(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	puts := []store.Put{xdstest.Put(t, resource.VirtualHost, store.DefaultScope, &routev3.VirtualHost{Name: "rc/v", Domains: []string{"*"}})}
	for _, g := range []string{"g1", "g2", "g3"} {
		puts = append(puts, xdstest.Put(t, resource.VirtualHost, g, &routev3.VirtualHost{Name: "rc/" + g, Domains: []string{g}}))
	}
	snap, err := e.View.WaitRevision(t.Context(), e.Apply(t, puts))
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	c := aliasIndexes{max: limits.Max(2), full: func() { refused++ }}
	for i := range 100 {
		if _, err := c.get(snap, scope.Of(fmt.Sprintf("made-up-%d", i))); err != nil {
			t.Fatalf("group without virtual hosts %d: %v", i, err)
		}
	}
	for _, g := range []string{"g1", "g2"} {
		if _, err := c.get(snap, scope.Of(g)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.get(snap, "g3")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-vhds-groups") || refused != 1 {
		t.Fatalf("third group's index: %v, %d refusals; want RESOURCE_EXHAUSTED naming --max-vhds-groups, 1 refusal", err, refused)
	}
	if _, err := c.get(snap, "g1"); err != nil {
		t.Errorf("an index already built: %v", err)
	}
	next, err := e.View.WaitRevision(t.Context(), e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, &routev3.VirtualHost{Name: "rc/w", Domains: []string{"w"}})}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(next, "g3"); err != nil {
		t.Errorf("a newer revision: %v", err)
	}
}

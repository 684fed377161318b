package delta_test

import (
	"fmt"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

func vhost(name string, domains ...string) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: []*routev3.Route{{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}},
	}}}
}

type vhdsGot struct {
	Name    string
	Version string
	Aliases []string
}

func vhdsResources(resp *discoveryv3.DeltaDiscoveryResponse) []vhdsGot {
	var out []vhdsGot
	for _, r := range resp.GetResources() {
		out = append(out, vhdsGot{r.GetName(), r.GetVersion(), r.GetAliases()})
	}
	return out
}

// TestDeltaVHDSAliases: on-demand virtual hosts are subscribed by
// "<route configuration>/<host>" and answered with the matching virtual
// host, the alias attached; a host nothing matches is removed.
func TestDeltaVHDSAliases(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/exact", "a.example.com")),
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/wild", "*.example.com")),
		xdstest.Put(t, resource.VirtualHost, "default", vhost("rc2/other", "a.example.com")),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.VirtualHost.URL,
		ResourceNamesSubscribe: []string{"rc1/a.example.com", "rc1/b.example.com", "rc1/nothing.test"}})
	resp := s.Expect()
	want := []vhdsGot{
		{"rc1/exact", fmt.Sprint(r1), []string{"rc1/a.example.com"}},
		{"rc1/wild", fmt.Sprint(r1), []string{"rc1/b.example.com"}},
	}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" {
		t.Fatalf("first response (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"rc1/nothing.test"}, resp.GetRemovedResources()); diff != "" {
		t.Fatalf("removed (-want +got):\n%s", diff)
	}
	s.Ack(resp)
	s.ExpectNone()

	// The exact virtual host goes: the alias now resolves to the wildcard.
	r2 := e.Apply(t, nil, store.Key{Type: resource.VirtualHost, Scope: "default", Name: "rc1/exact"})
	resp = s.Expect()
	want = []vhdsGot{{"rc1/wild", fmt.Sprint(r1), []string{"rc1/a.example.com"}}}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" || len(resp.GetRemovedResources()) != 0 {
		t.Fatalf("after deleting rc1/exact at %d (-want +got):\n%s removed %v", r2, diff, resp.GetRemovedResources())
	}
	s.Ack(resp)

	// A virtual host of another route configuration changes: nothing.
	e.Apply(t, []store.Put{xdstest.Put(t, resource.VirtualHost, "default", vhost("rc2/other", "c.example.com"))})
	s.ExpectNone()

	// A host that appears is sent.
	r4 := e.Apply(t, []store.Put{xdstest.Put(t, resource.VirtualHost, "default", vhost("rc1/late", "nothing.test"))})
	resp = s.Expect()
	want = []vhdsGot{{"rc1/late", fmt.Sprint(r4), []string{"rc1/nothing.test"}}}
	if diff := cmp.Diff(want, vhdsResources(resp)); diff != "" {
		t.Fatalf("late host (-want +got):\n%s", diff)
	}
}

// BenchmarkVHDSAliases measures one flush of a VHDS subscription of
// 10,000 aliases against 1,000 virtual hosts (the target: under 200 ms):
// each op a new stream subscribing every alias at a new revision (so the
// alias index is built in the op) and the response of 10,000 virtual
// hosts received. 1,000 aliases name a domain exactly, 9,000 match a
// "*.suffix" wildcard.
func BenchmarkVHDSAliases(b *testing.B) {
	const vhosts, aliases = 1000, 10000
	e := newEnv(b)
	for i := 0; i < vhosts; i += 100 {
		var puts []store.Put
		for j := i; j < i+100; j++ {
			puts = append(puts, xdstest.Put(b, resource.VirtualHost, store.DefaultScope,
				vhost(fmt.Sprintf("rc/vh-%d", j), fmt.Sprintf("host-%d.example.com", j), fmt.Sprintf("*.wild-%d.example.com", j))))
		}
		e.Apply(b, puts)
	}
	names := make([]string, 0, aliases)
	for i := range aliases {
		if i < vhosts {
			names = append(names, fmt.Sprintf("rc/host-%d.example.com", i))
		} else {
			names = append(names, fmt.Sprintf("rc/a%d.wild-%d.example.com", i, i%vhosts))
		}
	}
	cc := e.dial(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A new revision: the op builds the index, as the first stream
		// after a change does.
		e.Apply(b, []store.Put{xdstest.Put(b, resource.VirtualHost, store.DefaultScope, vhost(fmt.Sprintf("other/%d", i), "x"))})
		s := xdstest.OpenDelta(b, cc)
		b.StartTimer()
		s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.VirtualHost.URL, ResourceNamesSubscribe: names})
		resp := s.Expect()
		if n := len(resp.GetResources()); n != aliases {
			b.Fatalf("%d virtual hosts sent, want %d", n, aliases)
		}
	}
}

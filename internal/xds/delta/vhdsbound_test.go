package delta_test

import (
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/limits"
)

// TestVHDSGroupsBounded: with --max-vhds-groups 1, the streams of the one
// group with virtual hosts of its own and of any number of groups without
// (which share the default scope's index) resolve aliases; a stream of a
// second group with its own ends with RESOURCE_EXHAUSTED naming the flag,
// counted in limit_hits_total{limit="vhds_groups"}.
func TestVHDSGroupsBounded(t *testing.T) {
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.MaxVHDSGroups = limits.Max(1) })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.VirtualHost, store.DefaultScope, vhost("rc/all", "*")),
		xdstest.Put(t, resource.VirtualHost, "team-a", vhost("rc/a", "a.test")),
		xdstest.Put(t, resource.VirtualHost, "team-b", vhost("rc/b", "b.test")),
	})
	subscribe := func(group, alias string) *xdstest.DeltaStream {
		s := e.deltaADS(t)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n-"+group, group), TypeUrl: resource.VirtualHost.URL,
			ResourceNamesSubscribe: []string{alias}})
		return s
	}
	for group, alias := range map[string]string{"team-a": "rc/a.test", "made-up-1": "rc/x.test", "made-up-2": "rc/y.test"} {
		if got := vhdsResources(subscribe(group, alias).Expect()); len(got) != 1 {
			t.Errorf("group %s: got %v, want one virtual host", group, got)
		}
	}
	err := subscribe("team-b", "rc/b.test").ExpectErr()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-vhds-groups") {
		t.Fatalf("a second group with virtual hosts of its own: %v, want RESOURCE_EXHAUSTED naming --max-vhds-groups", err)
	}
	if got := xdstest.CounterSum(t, e.reg, "legation_delta_limit_hits_total", "limit", "vhds_groups"); got != 1 {
		t.Errorf("limit_hits_total{limit=vhds_groups} = %v, want 1", got)
	}
}

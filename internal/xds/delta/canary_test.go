package delta_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// deltaConnectMS is the connect timeout, in milliseconds, of the one
// cluster of resp, and its version.
func deltaConnectMS(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse) (int64, string) {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("%d resources, want 1: %s", len(resp.GetResources()), xdstest.Summary(resp))
	}
	r := resp.GetResources()[0]
	m, err := resource.Unmarshal(resource.Cluster, r.GetResource().GetValue())
	if err != nil {
		t.Fatal(err)
	}
	return m.(*clusterv3.Cluster).GetConnectTimeout().AsDuration().Milliseconds(), r.GetVersion()
}

// TestCanaryRolloutDelta: a delta client of a canary node is sent the
// rollout's change and, aborted, the current resource again at another
// version; a node the selector does not pick is sent neither; a canary
// node reconnecting after the abort with the canary version it held is
// sent the current resource.
func TestCanaryRolloutDelta(t *testing.T) {
	var l xdstest.LateRollouts
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.Rollouts = &l })
	l.Set(e.Rollouts(t))
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1000))})
	open := func(id string, held map[string]string) (*xdstest.DeltaStream, *discoveryv3.DeltaDiscoveryResponse) {
		s := e.deltaADS(t)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: resource.Cluster.URL, InitialResourceVersions: held})
		resp := s.ExpectType(resource.Cluster)
		s.Ack(resp)
		return s, resp
	}
	canary, _ := open("canary-1", nil)
	stable, _ := open("stable-1", nil)
	rs := e.RolloutStore()
	r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:canary-*", Promote: rollout.PromoteManual,
		Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 2000))}})
	if err != nil {
		t.Fatal(err)
	}
	got := canary.ExpectType(resource.Cluster)
	ms, canaryVersion := deltaConnectMS(t, got)
	if ms != 2000 {
		t.Fatalf("canary node: %d ms, want the rollout's 2000", ms)
	}
	canary.Ack(got)
	stable.ExpectNone()
	if _, err := rs.Abort(ctx, r.ID, "test abort"); err != nil {
		t.Fatal(err)
	}
	back := canary.ExpectType(resource.Cluster)
	if ms, v := deltaConnectMS(t, back); ms != 1000 || v == canaryVersion {
		t.Errorf("aborted: canary node at %d ms, version %s; want the current 1000 at another version than %s", ms, v, canaryVersion)
	}
	stable.ExpectNone()
	_, again := open("canary-1", map[string]string{"c1": canaryVersion})
	if ms, _ := deltaConnectMS(t, again); ms != 1000 {
		t.Errorf("canary node reconnecting with the canary version: %d ms, want 1000", ms)
	}
}

package runner

import (
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/loadgen"
)

// TestApplierKeepsEndpointsWithClusters: over many applies, some begun
// as canary rollouts and ended either way, the default scope never
// holds the endpoints of a cluster it does not hold (a cluster created
// again only in a canary, then aborted, left its endpoints behind for
// later changes to write, and SotW clients, which no longer ask for
// them, were held to them), and rollouts both promote and abort.
func TestApplierKeepsEndpointsWithClusters(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	if _, err := (&loadgen.StoreTarget{Store: e.Store}).Seed(ctx, fixture.NewSet(8, 2, 2, 10000)); err != nil {
		t.Fatal(err)
	}
	a := newApplier(e.Store, 6, 8, 2, 2)
	a.ro = newRollouts(rollout.NewStore(e.Store, e.Client, "test"), 6)
	names := func(typ *resource.Type) map[string]bool {
		l, err := e.Store.List(ctx, store.ListOptions{Type: typ, Scope: store.DefaultScope})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range l.Resources {
			out[r.Name] = true
		}
		return out
	}
	for i := range 300 {
		if err := a.apply(ctx); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
		clusters := names(resource.Cluster)
		for ep := range names(resource.Endpoint) {
			if !clusters[ep] {
				t.Fatalf("after apply %d: the endpoints of %s, whose cluster the default scope does not hold", i, ep)
			}
		}
	}
	if a.ro.promoted == 0 || a.ro.aborted == 0 {
		t.Errorf("%d rollouts, %d promoted, %d aborted: want both ends", len(a.ro.ids), a.ro.promoted, a.ro.aborted)
	}
}

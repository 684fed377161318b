package view_test

import (
	"context"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// woken reports whether i was signalled within d.
func woken(i *view.Interest, d time.Duration) bool {
	select {
	case <-i.Wake():
		return true
	case <-time.After(d):
		return false
	}
}

// TestInterestWakes: an interest is woken by a change of a type it holds
// in its scope, the default one or a canary overlay, and by nothing else: not by another
// scope's changes, not by a type it does not hold, not by revisions that
// change no resource (etcd writes outside the resources, progress).
func TestInterestWakes(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, func(c *view.Config) { c.CatchUpEvery = time.Hour })
	i := v.Interest("g1", nil)
	defer i.Close()
	i.Add(resource.Cluster)
	const quiet = 300 * time.Millisecond

	// Revisions that change no resource: a status-like write, then
	// progress that moves the view's revision.
	put, err := env.client.Put(context.Background(), "/legation/status/x", "y")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, v, put.Header.Revision)
	if woken(i, quiet) {
		t.Fatal("woken by a revision that changed no resource")
	}
	r := vApply(t, env.store, []store.Put{vCluster(t, "g2", "other-scope", 1)}, nil)
	waitRev(t, v, r)
	if woken(i, quiet) {
		t.Fatal("woken by a change in another group's scope")
	}
	body, err := resource.Marshal(resource.Endpoint, &endpointv3.ClusterLoadAssignment{ClusterName: "e"})
	if err != nil {
		t.Fatal(err)
	}
	r = vApply(t, env.store, []store.Put{{Key: store.Key{Type: resource.Endpoint, Scope: "g1", Name: "e"}, Body: body}}, nil)
	waitRev(t, v, r)
	if woken(i, quiet) {
		t.Fatal("woken by a change of a type it does not hold")
	}
	for _, scope := range []string{"g1", store.DefaultScope} {
		vApply(t, env.store, []store.Put{vCluster(t, scope, "c", 1)}, nil)
		if !woken(i, viewTestTimeout) {
			t.Fatalf("not woken by a cluster change in scope %s", scope)
		}
	}
	// A canary overlay (a reserved scope) may be the node's: written or
	// removed, it wakes the interest, whatever the rollouts' watch does.
	overlay := store.Key{Type: resource.Cluster, Scope: resource.ReservedScopePrefix + "rollout.r1", Name: "c"}
	vApply(t, env.store, []store.Put{vCluster(t, overlay.Scope, "c", 3)}, nil)
	if !woken(i, viewTestTimeout) {
		t.Fatal("not woken by a canary overlay written")
	}
	vApply(t, env.store, nil, []store.Key{overlay})
	if !woken(i, viewTestTimeout) {
		t.Fatal("not woken by a canary overlay removed")
	}
	// Once added, the endpoint type wakes it too.
	i.Add(resource.Endpoint)
	body2, err := resource.Marshal(resource.Endpoint, &endpointv3.ClusterLoadAssignment{ClusterName: "e", Policy: &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(140)}})
	if err != nil {
		t.Fatal(err)
	}
	vApply(t, env.store, []store.Put{{Key: store.Key{Type: resource.Endpoint, Scope: "g1", Name: "e"}, Body: body2}}, nil)
	if !woken(i, viewTestTimeout) {
		t.Fatal("not woken by an endpoint change once it holds endpoints")
	}
	// Closed, it is forgotten.
	i.Close()
	vApply(t, env.store, []store.Put{vCluster(t, "g1", "c", 2)}, nil)
	if woken(i, quiet) {
		t.Fatal("woken after Close")
	}
}

// TestInterestCatchUp: an interest no change concerns is woken at most
// once per CatchUpEvery while changes are published elsewhere, and only
// while it is behind; with no change it is never woken.
func TestInterestCatchUp(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	const every = 500 * time.Millisecond
	v := env.startView(t, env.client, func(c *view.Config) { c.CatchUpEvery = every })
	i := v.Interest("g1", nil)
	defer i.Close()
	i.Add(resource.Cluster)

	// Changes elsewhere, 20 over 2s: a few catch-ups, not 20.
	start := time.Now()
	wakes := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := range 20 {
			vApply(t, env.store, []store.Put{vCluster(t, "g2", "x", int64(k+1))}, nil)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for {
		select {
		case <-i.Wake():
			wakes++
			i.Advanced(v.Snapshot().Revision)
			continue
		case <-done:
		}
		break
	}
	elapsed := time.Since(start)
	if most := int(elapsed/every) + 1; wakes == 0 || wakes > most {
		t.Fatalf("%d catch-ups in %s of changes elsewhere, want 1 to %d", wakes, elapsed.Round(time.Millisecond), most)
	}
	t.Logf("%d catch-ups over %s of changes in another scope (every %s)", wakes, elapsed.Round(time.Millisecond), every)
	// No change: no wake, however long.
	if woken(i, 2*every) {
		t.Fatal("woken with no change published")
	}
}

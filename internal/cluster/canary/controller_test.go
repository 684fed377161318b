package canary_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/canary"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestControllerPromotes: the replicas stand for election once a rollout
// runs; of two, one is elected; it promotes an automatic rollout once
// baked (no canary node connected, none pending), and leaves a manual one
// running; when it stops, the other takes over and promotes the next;
// with no rollout running, no replica stands any more.
func TestControllerPromotes(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c2", 1000))})
	w := e.Rollouts(t)
	start := func(name string) context.CancelFunc {
		c := canary.NewController(canary.ControllerConfig{Client: e.Client, Prefix: keyspace.DefaultPrefix, Store: e.Store,
			Replica: name, Running: w.Current, Every: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); c.Run(cctx) }() //nolint:errcheck // nil
		t.Cleanup(func() { cancel(); <-done })
		return func() { cancel(); <-done }
	}
	stopA := start("replica-a")
	rs := e.RolloutStore()
	begin := func(name string, promote string) *rollout.Rollout {
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "5%", Bake: 500 * time.Millisecond, Promote: promote,
			Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster(name, 2000))}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	manual := begin("c2", rollout.PromoteManual)
	waitLeader(t, e.Client, "replica-a")
	start("replica-b")
	waitState(t, rs, begin("c1", rollout.PromoteAuto).ID, rollout.Promoted)
	if r, _, err := rs.Get(ctx, manual.ID); err != nil || r.State != rollout.Running {
		t.Errorf("the manual rollout: %+v, %v; want it running", r, err)
	}
	stopA()
	waitLeader(t, e.Client, "replica-b")
	if _, err := rs.Abort(ctx, manual.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitState(t, rs, begin("c2", rollout.PromoteAuto).ID, rollout.Promoted)
	waitLeader(t, e.Client, "")
}

// waitLeader waits until the rollout controller's leader is name ("":
// until no replica stands).
func waitLeader(t *testing.T, c *clientv3.Client, name string) {
	t.Helper()
	xdstest.WaitFor(t, "leader "+name, func() (bool, string) {
		resp, err := c.Get(context.Background(), keyspace.RolloutElection(keyspace.DefaultPrefix)+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			return false, err.Error()
		}
		if len(resp.Kvs) == 0 {
			return name == "", "no candidate"
		}
		return string(resp.Kvs[0].Value) == name, "leader " + string(resp.Kvs[0].Value)
	})
}

// waitState waits until rollout id is in state.
func waitState(t *testing.T, rs *rollout.Store, id, state string) {
	t.Helper()
	xdstest.WaitFor(t, "rollout "+id+" "+state, func() (bool, string) {
		r, _, err := rs.Get(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		return r.State == state, r.State + " " + r.Reason
	})
}

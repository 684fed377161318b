package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// applier makes the run's changes: every tick one apply (one etcd
// transaction) of several resources of the fixture at once, so that a
// client holding half of one shows. It writes to the default scope, as
// xdsadmin apply would.
type applier struct {
	st  *store.Store
	rng *rand.Rand
	// clusters, endpoints and listeners are the fixture's sizes.
	clusters, endpoints, listeners int
	// port is each cluster's endpoints' port as last written, timeout its
	// connect timeout in ms, and gone the clusters deleted (with their
	// endpoints). stale: an apply failed, so these may be wrong; they
	// are read again before the next.
	port    []uint32
	timeout []int64
	gone    []bool
	stale   bool

	applies, failed, empty int
	// commits are the revisions applied and when each apply returned.
	commits []commit
	// ro begins some changes as canary rollouts, and ends them; nil for
	// none.
	ro *rollouts
}

// commit is an apply that wrote something: its revision, and when the
// apply returned (an upper bound on when etcd committed it).
type commit struct {
	rev int64
	at  time.Time
}

func newApplier(st *store.Store, seed uint64, clusters, endpoints, listeners int) *applier {
	a := &applier{
		st: st, rng: rand.New(rand.NewPCG(seed, 0xa991)),
		clusters: clusters, endpoints: endpoints, listeners: listeners,
		port: make([]uint32, clusters), timeout: make([]int64, clusters), gone: make([]bool, clusters),
		stale: true,
	}
	return a
}

// run applies a change every tick until ctx ends. A failed apply (etcd
// unreachable, a conflict) is counted and not retried: the next tick
// makes another change.
func (a *applier) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.apply(actx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.failed++
			a.stale = true
		}
	}
}

// apply makes one change, or ends the running canary rollout. Its parts: the endpoints of 2 to 4 clusters;
// sometimes a cluster's connect timeout or a route's cluster too; and
// now and then a cluster deleted with its endpoints, or one deleted
// earlier created again with them. The parts draw from the seed's
// random source in that order.
func (a *applier) apply(ctx context.Context) error {
	if a.ro != nil && a.ro.due() {
		return a.ro.end(ctx)
	}
	if a.stale {
		if err := a.load(ctx); err != nil {
			return err
		}
	}
	var req store.PlanRequest
	live := make([]int, 0, a.clusters)
	var dead []int
	for i := range a.clusters {
		if a.gone[i] {
			dead = append(dead, i)
		} else {
			live = append(live, i)
		}
	}
	a.rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	n, touched, err := a.changeSome(&req, live)
	if err != nil {
		return err
	}
	restored, err := a.deleteOrRestore(&req, live[n:], dead, touched)
	if err != nil {
		return err
	}
	// A cluster created again is not begun as a rollout: the applier
	// would write its endpoints in later changes while only the canary
	// nodes have the cluster, and an abort would leave them behind.
	if a.ro != nil && !restored && a.ro.wants(req) {
		a.applies++
		return a.ro.begin(ctx, req)
	}
	return a.commit(ctx, req)
}

// changeSome puts into req the new endpoints of the first 2 to 4 of live
// (shuffled), sometimes a live cluster's connect timeout and sometimes a
// route's cluster. It returns how many of live got new endpoints, and
// the clusters it touched.
func (a *applier) changeSome(req *store.PlanRequest, live []int) (int, map[int]bool, error) {
	touched := map[int]bool{}
	n := min(len(live), 2+a.rng.IntN(3))
	for _, i := range live[:n] {
		a.port[i] = a.newPort(a.port[i])
		if err := a.put(req, resource.Endpoint, fixture.Endpoints(i, a.endpoints, a.port[i]).LoadAssignment()); err != nil {
			return 0, nil, err
		}
		touched[i] = true
	}
	if a.rng.IntN(3) == 0 && len(live) > 0 {
		i := live[a.rng.IntN(len(live))]
		a.timeout[i] = 100 + a.rng.Int64N(4900)
		if err := a.put(req, resource.Cluster, a.cluster(i)); err != nil {
			return 0, nil, err
		}
		touched[i] = true
	}
	if a.rng.IntN(4) == 0 && a.listeners > 0 {
		r := a.rng.IntN(a.listeners)
		if err := a.put(req, resource.Route, fixture.RouteResource(r, fixture.ClusterName(a.rng.IntN(a.clusters)))); err != nil {
			return 0, nil, err
		}
	}
	return n, touched, nil
}

// deleteOrRestore, now and then, adds to req the deletion of a cluster
// of rest that touched does not hold, with its endpoints (while fewer
// than a quarter of the clusters are gone), or the creation again of one
// of dead with new endpoints (restored).
func (a *applier) deleteOrRestore(req *store.PlanRequest, rest, dead []int, touched map[int]bool) (restored bool, err error) {
	switch k := a.rng.IntN(10); {
	case k == 0 && len(dead) < a.clusters/4:
		// Delete a cluster the change does not touch otherwise.
		for _, i := range rest {
			if touched[i] {
				continue
			}
			name := fixture.ClusterName(i)
			req.Deletes = append(req.Deletes,
				store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: name},
				store.Key{Type: resource.Endpoint, Scope: store.DefaultScope, Name: name})
			a.gone[i] = true
			break
		}
	case k == 1 && len(dead) > 0:
		i := dead[a.rng.IntN(len(dead))]
		a.gone[i] = false
		a.port[i] = a.newPort(a.port[i])
		if err := a.put(req, resource.Cluster, a.cluster(i)); err != nil {
			return false, err
		}
		if err := a.put(req, resource.Endpoint, fixture.Endpoints(i, a.endpoints, a.port[i]).LoadAssignment()); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// commit plans and applies req, and counts the apply; one that wrote
// something is kept in commits.
func (a *applier) commit(ctx context.Context, req store.PlanRequest) error {
	plan, err := a.st.MakePlan(ctx, req)
	if err != nil {
		return err
	}
	res, err := a.st.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		return err
	}
	a.applies++
	if len(res.Revisions) == 0 {
		a.empty++
		return nil
	}
	a.commits = append(a.commits, commit{rev: res.Revision, at: time.Now()})
	return nil
}

// newPort is a port other than old.
func (a *applier) newPort(old uint32) uint32 {
	for {
		if p := 10000 + uint32(a.rng.IntN(50000)); p != old {
			return p
		}
	}
}

func (a *applier) cluster(i int) *clusterv3.Cluster {
	c := fixture.ClusterResource(fixture.ClusterName(i))
	if a.timeout[i] > 0 {
		c.ConnectTimeout = durationpb.New(time.Duration(a.timeout[i]) * time.Millisecond)
	}
	return c
}

func (a *applier) put(req *store.PlanRequest, typ *resource.Type, m proto.Message) error {
	p, err := fixture.Put(typ, store.DefaultScope, m)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	req.Puts = append(req.Puts, p)
	return nil
}

// load reads which of the fixture's clusters exist: after a failed apply
// that may have committed, the next must not delete one already gone.
func (a *applier) load(ctx context.Context) error {
	l, err := a.st.List(ctx, store.ListOptions{Type: resource.Cluster, Scope: store.DefaultScope})
	if err != nil {
		return err
	}
	there := map[string]bool{}
	for _, r := range l.Resources {
		there[r.Name] = true
	}
	for i := range a.clusters {
		a.gone[i] = !there[fixture.ClusterName(i)]
	}
	a.stale = false
	return nil
}

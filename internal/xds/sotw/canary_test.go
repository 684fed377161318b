package sotw_test

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	cdsv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// connectMS is the connect timeout, in milliseconds, of the one cluster
// of resp.
func connectMS(t *testing.T, resp *discoveryv3.DiscoveryResponse) int64 {
	t.Helper()
	if len(resp.GetResources()) != 1 {
		t.Fatalf("%d resources, want 1: %s", len(resp.GetResources()), xdstest.Summary(resp))
	}
	m, err := resource.Unmarshal(resource.Cluster, resp.GetResources()[0].GetValue())
	if err != nil {
		t.Fatal(err)
	}
	return m.(*clusterv3.Cluster).GetConnectTimeout().AsDuration().Milliseconds()
}

// versionOf is resp's version_info as a revision.
func versionOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) int64 {
	t.Helper()
	v, err := strconv.ParseInt(resp.GetVersionInfo(), 10, 64)
	if err != nil {
		t.Fatalf("version_info %q: %v", resp.GetVersionInfo(), err)
	}
	return v
}

// cdsStream opens a CDS subscription for node id and returns it with its
// first response, ACKed.
func cdsStream(t *testing.T, e *env, id string) (*xdstest.SotWStream, *discoveryv3.DiscoveryResponse) {
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, ""), TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	s.Ack(resp)
	return s, resp
}

// canaryEnv is an env whose server serves the rollouts of its etcd.
func canaryEnv(t testing.TB) *env {
	var l xdstest.LateRollouts
	e := newEnv(t, func(c *sotw.Config) { c.Rollouts = &l })
	l.Set(e.Rollouts(t))
	return e
}

// TestCanaryRollout: while a rollout runs, the nodes its selector picks
// (and those that connect then) are served its change and every other
// node the current config, never the change; aborted, the canary nodes
// return to the current config at a newer version; promoted, every node
// gets the change.
func TestCanaryRollout(t *testing.T) {
	e := canaryEnv(t)
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1000))})
	canary, first := cdsStream(t, e, "canary-1")
	stable, _ := cdsStream(t, e, "stable-1")
	rs := e.RolloutStore()
	begin := func(ms int64) *rollout.Rollout {
		t.Helper()
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:canary-*", Promote: rollout.PromoteManual,
			Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", ms))}})
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		return r
	}

	r1 := begin(2000)
	got := canary.ExpectType(resource.Cluster)
	if ms := connectMS(t, got); ms != 2000 {
		t.Fatalf("canary node: connect timeout %d ms, want the rollout's 2000", ms)
	}
	canary.Ack(got)
	stable.ExpectNone()
	if _, err := rs.Abort(ctx, r1.ID, "test abort"); err != nil {
		t.Fatal(err)
	}
	back := canary.ExpectType(resource.Cluster)
	if ms := connectMS(t, back); ms != 1000 {
		t.Fatalf("aborted: canary node at %d ms, want the current 1000", ms)
	}
	if v, was := versionOf(t, back), versionOf(t, got); v <= was {
		t.Errorf("aborted: version %d, not newer than the canary's %d", v, was)
	}
	canary.Ack(back)
	stable.ExpectNone()

	r2 := begin(3000)
	canary.Ack(canary.ExpectType(resource.Cluster))
	_, lateResp := cdsStream(t, e, "canary-2")
	_, stableResp := cdsStream(t, e, "stable-2")
	if connectMS(t, lateResp) != 3000 || connectMS(t, stableResp) != 1000 {
		t.Errorf("nodes connecting during the rollout: canary-2 at %d ms, stable-2 at %d; want 3000 and 1000", connectMS(t, lateResp), connectMS(t, stableResp))
	}
	// A canary node reconnecting with the version it held before the
	// rollout began is sent its side.
	re := e.adsStream(t)
	re.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("canary-3", ""), TypeUrl: resource.Cluster.URL, VersionInfo: first.GetVersionInfo()})
	if ms := connectMS(t, re.ExpectType(resource.Cluster)); ms != 3000 {
		t.Errorf("canary node reconnecting at the old version: %d ms, want 3000", ms)
	}
	stable.ExpectNone()
	if _, err := rs.Promote(ctx, r2.ID, "test promote"); err != nil {
		t.Fatal(err)
	}
	if ms := connectMS(t, stable.ExpectType(resource.Cluster)); ms != 3000 {
		t.Errorf("promoted: stable node at %d ms, want 3000", ms)
	}
	if _, err := rs.Promote(ctx, r2.ID, "again"); !errors.Is(err, rollout.ErrEnded) {
		t.Errorf("promote an ended rollout: %v, want ErrEnded", err)
	}
}

// gatedRollouts is a watcher's rollouts with the sets at revisions from
// hideFrom on unknown until open is closed: a replica whose rollout
// watch and reads from etcd lag its view.
type gatedRollouts struct {
	xdstest.LateRollouts
	hideFrom atomic.Int64 // 0: nothing hidden
	open     chan struct{}
}

func (g *gatedRollouts) hidden(rev int64) bool {
	select {
	case <-g.open:
		return false
	default:
		f := g.hideFrom.Load()
		return f != 0 && rev >= f
	}
}

func (g *gatedRollouts) At(rev int64) (*rollout.Set, bool) {
	if g.hidden(rev) {
		return nil, false
	}
	return g.LateRollouts.At(rev)
}

func (g *gatedRollouts) Resolve(rev int64) (<-chan struct{}, bool) {
	if g.hidden(rev) {
		return g.open, true
	}
	return g.LateRollouts.Resolve(rev)
}

// TestCanaryHeldUntilRolloutsKnown: a snapshot that begins a rollout
// is answered only once the replica knows the rollouts running at it,
// however late: a canary node is never answered with the scope's
// resources at a version that holds its overlay, and gets its side as
// soon as the set is known; a poll meanwhile is told to retry.
func TestCanaryHeldUntilRolloutsKnown(t *testing.T) {
	g := &gatedRollouts{open: make(chan struct{})}
	e := newEnv(t, func(c *sotw.Config) { c.Rollouts, c.CatchupTimeout = g, 300*time.Millisecond })
	g.Set(e.Rollouts(t))
	ctx := testbase.Context(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1000))})
	canary, _ := cdsStream(t, e, "canary-1")
	stable, _ := cdsStream(t, e, "stable-1")

	g.hideFrom.Store(rev + 1)
	r, err := e.RolloutStore().Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:canary-*", Promote: rollout.PromoteManual,
		Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 2000))}})
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := e.View.WaitRevision(ctx, r.Revision); err != nil {
		t.Fatal(err)
	}
	canary.ExpectNone() // held: the set at the rollout's revision is not known
	fetch := cdsv3.NewClusterDiscoveryServiceClient(e.conn(t))
	poll := &discoveryv3.DiscoveryRequest{Node: xdstest.Node("canary-9", "")}
	if _, err := fetch.FetchClusters(ctx, poll); status.Code(err) != codes.Unavailable {
		t.Errorf("a poll while the rollouts at the version are unknown: %v, want UNAVAILABLE", err)
	}
	// A change the canary node sees, while its flush is held, is held too.
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c2", 500))})
	canary.ExpectNone()
	close(g.open)
	got := canary.ExpectType(resource.Cluster)
	if len(got.GetResources()) != 2 || versionOf(t, got) <= r.Revision {
		t.Fatalf("canary node, once the set was known: %s; want c1 and c2 at a version past %d", xdstest.Summary(got), r.Revision)
	}
	for _, a := range got.GetResources() {
		m, err := resource.Unmarshal(resource.Cluster, a.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		if c := m.(*clusterv3.Cluster); c.GetName() == "c1" && c.GetConnectTimeout().AsDuration().Milliseconds() != 2000 {
			t.Errorf("canary node: c1 at %s, want the rollout's 2s", c.GetConnectTimeout().AsDuration())
		}
	}
	if resp := stable.ExpectType(resource.Cluster); len(resp.GetResources()) != 2 {
		t.Errorf("stable node: %s, want c1 and c2", xdstest.Summary(resp))
	}
	if resp, err := fetch.FetchClusters(ctx, poll); err != nil || len(resp.GetResources()) != 2 {
		t.Errorf("a poll once the rollouts are known: %v, %v", err, xdstest.Summary(resp))
	}
}

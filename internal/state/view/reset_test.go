package view_test

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// resetEnv is an etcd the test restores from an older copy of its data,
// a store writing to it and a view following it on a client of its own.
type resetEnv struct {
	etcd  *storetest.Restartable
	store *store.Store
	reg   *prometheus.Registry
}

func newResetEnv(t *testing.T) *resetEnv {
	e := storetest.StartRestartable(t)
	s, err := store.New(store.Config{Client: e.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &resetEnv{etcd: e, store: s, reg: prometheus.NewRegistry()}
}

func (env *resetEnv) startView(t *testing.T) *view.View {
	t.Helper()
	venv := &viewEnv{reg: env.reg}
	return venv.startView(t, env.etcd.Client(t), func(c *view.Config) {
		c.ProgressInterval = 200 * time.Millisecond
		c.StallTimeout = time.Second
	})
}

// connectMS is the connect timeout, in ms, of the cluster the view holds
// under name; -1 if it holds none.
func connectMS(t *testing.T, s *view.Snapshot, name string) int64 {
	t.Helper()
	e, ok := s.Get(resource.Cluster, "default", name)
	if !ok {
		return -1
	}
	var c clusterv3.Cluster
	if err := e.Body.UnmarshalTo(&c); err != nil {
		t.Fatal(err)
	}
	return c.GetConnectTimeout().AsDuration().Milliseconds()
}

// neverBackwards fails the test if a snapshot from first on has a revision
// below the one before it, or a resource a ModRevision below the one it
// had before with other content.
func neverBackwards(t *testing.T, first *view.Snapshot) {
	t.Helper()
	held := map[string]*view.Entry{}
	prev := int64(0)
	for s := first; s != nil; s = s.Next() {
		if s.Revision < prev {
			t.Errorf("snapshot revision went back: %d after %d", s.Revision, prev)
		}
		prev = s.Revision
		s.Walk(resource.Cluster, "default", func(e *view.Entry) bool {
			if old, ok := held[e.Name]; ok && e.ModRevision <= old.ModRevision && !proto.Equal(old.Body, e.Body) {
				t.Errorf("%s: version %d after %d with other content", e.Name, e.ModRevision, old.ModRevision)
			}
			held[e.Name] = e
			return true
		})
	}
}

// TestViewRevisionResetBumped restores etcd from an older copy of its data
// with its revision bumped past the view's and marked compacted, as
// `etcdutl snapshot restore --bump-revision N --mark-compacted` does: the
// view's watch is compacted, it reloads without a restart, and the older
// data is served at versions above every version served before.
func TestViewRevisionResetBumped(t *testing.T) {
	env := newResetEnv(t)
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "keep", 1), vCluster(t, "default", "change", 1)}, nil)
	env.etcd.Save(t, "old")

	v := env.startView(t)
	first := waitRev(t, v, r1)
	vApply(t, env.store, []store.Put{vCluster(t, "default", "change", 2), vCluster(t, "default", "new", 2)}, nil)
	r3 := vApply(t, env.store, nil, []store.Key{{Type: resource.Cluster, Scope: "default", Name: "keep"}})
	before := waitRev(t, v, r3)
	lastChange := before.LastChange(resource.Cluster, "default")

	env.etcd.Restore(t, "old", 1000)
	s := waitRev(t, v, r1+1000)
	if got := connectMS(t, s, "change"); got != 1 {
		t.Errorf("change after the restore: connect timeout %dms, want the snapshot's 1ms", got)
	}
	if got := connectMS(t, s, "keep"); got != 1 {
		t.Errorf("keep after the restore: connect timeout %dms, want 1ms", got)
	}
	if got := connectMS(t, s, "new"); got != -1 {
		t.Errorf("new after the restore: still held (%dms)", got)
	}
	for _, name := range []string{"change", "keep"} {
		if e, _ := s.Get(resource.Cluster, "default", name); e.ModRevision <= r3 {
			t.Errorf("%s went back to older content at version %d, not above the %d served before", name, e.ModRevision, r3)
		}
	}
	if got := s.LastChange(resource.Cluster, "default"); got <= lastChange {
		t.Errorf("LastChange after the restore = %d, not above %d: clients would not be sent the older data", got, lastChange)
	}
	if r := v.RevisionReset(); r != nil {
		t.Errorf("RevisionReset() = %v after a bumped restore", r)
	}
	neverBackwards(t, first)

	// And it follows etcd again.
	r4 := vApply(t, env.store, []store.Put{vCluster(t, "default", "after", 4)}, nil)
	if got := connectMS(t, waitRev(t, v, r4), "after"); got != 4 {
		t.Errorf("after: %dms, want 4", got)
	}
}

// TestViewRevisionResetHeld restores etcd from an older copy of its data
// without bumping its revision: the view finds etcd behind it, reports it
// and keeps serving its last snapshot, even once etcd's revision is back
// at the view's with other data; when etcd's revision passes the view's
// it reloads, without a restart, every resource at a version above every
// version it served.
func TestViewRevisionResetHeld(t *testing.T) {
	env := newResetEnv(t)
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 1)}, nil)
	env.etcd.Save(t, "old")

	v := env.startView(t)
	first := waitRev(t, v, r1)
	var r3 int64
	for i := range 3 {
		r3 = vApply(t, env.store, []store.Put{vCluster(t, "default", "a", int64(10+i))}, nil)
	}
	held := waitRev(t, v, r3)

	env.etcd.Restore(t, "old", 0)
	deadline := time.Now().Add(viewTestTimeout)
	for v.RevisionReset() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the view did not report etcd's revision behind its own")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := v.RevisionReset()
	if r.Etcd != r1 || r.View != r3 {
		t.Errorf("RevisionReset() = %v, want etcd at %d < view at %d", r, r1, r3)
	}
	if want := "etcd revision reset: etcd at"; len(r.String()) < len(want) || r.String()[:len(want)] != want {
		t.Errorf("reason %q", r)
	}
	if got := counter(t, env.reg, "legation_view_revision_resets_total"); got != 1 {
		t.Errorf("legation_view_revision_resets_total = %v, want 1", got)
	}
	if got := counter(t, env.reg, "legation_view_revision_reset"); got != 1 {
		t.Errorf("legation_view_revision_reset = %v, want 1", got)
	}

	// etcd reaches the view's revision again, with other data: the same
	// revision names other content, so the view still holds.
	var rr int64
	for i := int64(0); rr < r3; i++ {
		rr = vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 100+i)}, nil)
	}
	if rr != r3 {
		t.Fatalf("etcd at %d, want %d", rr, r3)
	}
	time.Sleep(viewTestShortTimeout + 500*time.Millisecond) // a few of its polls
	if s := v.Snapshot(); s != held || v.RevisionReset() == nil {
		t.Fatalf("the view moved (to %d) or stopped holding with etcd only back at its revision %d", s.Revision, r3)
	}

	r4 := vApply(t, env.store, []store.Put{vCluster(t, "default", "b", 4)}, nil)
	s := waitRev(t, v, r4)
	if got := connectMS(t, s, "a"); got != 100+r3-r1-1 {
		t.Errorf("a after etcd passed the view: %dms, want %dms", got, 100+r3-r1-1)
	}
	if got := connectMS(t, s, "b"); got != 4 {
		t.Errorf("b: %dms, want 4", got)
	}
	if e, _ := s.Get(resource.Cluster, "default", "a"); e.ModRevision <= r3 {
		t.Errorf("a at version %d, not above the %d served before", e.ModRevision, r3)
	}
	if r := v.RevisionReset(); r != nil {
		t.Errorf("RevisionReset() = %v after etcd passed the view", r)
	}
	if got := counter(t, env.reg, "legation_view_revision_reset"); got != 0 {
		t.Errorf("legation_view_revision_reset = %v, want 0", got)
	}
	neverBackwards(t, first)
}

package view_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

const (
	viewTestTimeout      = 20 * time.Second
	viewTestShortTimeout = 300 * time.Millisecond
)

func vCluster(t testing.TB, scope, name string, ms int64) store.Put {
	t.Helper()
	body, err := resource.Marshal(resource.Cluster, &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(ms) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
	})
	if err != nil {
		t.Fatal(err)
	}
	return store.Put{Key: store.Key{Type: resource.Cluster, Scope: scope, Name: name}, Body: body}
}

func vApply(t testing.TB, s *store.Store, puts []store.Put, deletes []store.Key) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), viewTestTimeout)
	defer cancel()
	plan, err := s.MakePlan(ctx, store.PlanRequest{Puts: puts, Deletes: deletes})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	res, err := s.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res.Revision
}

type viewEnv struct {
	etcd   *storetest.Etcd
	client *clientv3.Client
	store  *store.Store
	reg    *prometheus.Registry
}

func newViewEnv(t *testing.T, opts storetest.Options) *viewEnv {
	e := storetest.Start(t, opts)
	c := e.Client(t)
	s, err := store.New(store.Config{Client: c, MaxTxnOps: 20000, MaxRequestBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return &viewEnv{etcd: e, client: c, store: s, reg: prometheus.NewRegistry()}
}

// startView runs a view on client until the test ends and waits for it to
// be ready.
func (env *viewEnv) startView(t *testing.T, client *clientv3.Client, tweak func(*view.Config)) *view.View {
	t.Helper()
	cfg := view.Config{Client: client, Registerer: env.reg, RetryInterval: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	v, err := view.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := v.Run(ctx); err != nil {
			t.Errorf("view run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-v.Ready():
	case <-time.After(viewTestTimeout):
		t.Fatal("view not ready")
	}
	return v
}

func waitRev(t *testing.T, v *view.View, rev int64) *view.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), viewTestTimeout)
	defer cancel()
	s, err := v.WaitRevision(ctx, rev)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func count(s *view.Snapshot, t *resource.Type, scope string) int {
	n := 0
	s.Walk(t, scope, func(*view.Entry) bool { n++; return true })
	return n
}

// TestViewSeesWholeApplies: every snapshot a view publishes holds all of an
// apply or none of it (promise 1, docs/concepts/design.md).
func TestViewSeesWholeApplies(t *testing.T) {
	env := newViewEnv(t, storetest.Options{MaxTxnOps: 1000, MaxRequestBytes: 8 << 20})
	v := env.startView(t, env.client, nil)
	first := v.Snapshot()

	const applies, per = 5, 300
	var last int64
	for a := 0; a < applies; a++ {
		var puts []store.Put
		for i := 0; i < per; i++ {
			puts = append(puts, vCluster(t, fmt.Sprintf("s%d", a), fmt.Sprintf("c%04d", i), int64(a+1)))
		}
		last = vApply(t, env.store, puts, nil)
	}
	waitRev(t, v, last)

	seen := 0
	for s := first; s != nil; s = s.Next() {
		for a := 0; a < applies; a++ {
			if n := count(s, resource.Cluster, fmt.Sprintf("s%d", a)); n != 0 && n != per {
				t.Fatalf("snapshot at revision %d holds %d of the %d clusters of apply %d", s.Revision, n, per, a)
			}
		}
		if s.Next() == nil && s.Revision != last {
			t.Fatalf("latest snapshot at %d, want %d", s.Revision, last)
		}
		seen++
	}
	if got := v.Snapshot().Len(); got != applies*per {
		t.Fatalf("view holds %d resources, want %d", got, applies*per)
	}
	if seen < 2 {
		t.Fatalf("saw %d snapshots, want several", seen)
	}
}

// TestViewRevisionsAndChanges: revisions, mod revisions, per-snapshot
// changes, deletions and LastChange.
func TestViewRevisionsAndChanges(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, nil)

	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 1), vCluster(t, "default", "b", 1)}, nil)
	s1 := waitRev(t, v, r1)
	a, ok := s1.Get(resource.Cluster, "default", "a")
	if !ok || a.ModRevision != r1 || a.CreateRevision != r1 {
		t.Fatalf("a = %+v, want mod and create revision %d", a, r1)
	}
	if got := s1.LastChange(resource.Cluster, "default"); got != r1 {
		t.Fatalf("LastChange = %d, want %d", got, r1)
	}

	r2 := vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 2)}, []store.Key{{Type: resource.Cluster, Scope: "default", Name: "b"}})
	s2 := waitRev(t, v, r2)
	a2, _ := s2.Get(resource.Cluster, "default", "a")
	if a2.ModRevision != r2 || a2.CreateRevision != r1 {
		t.Fatalf("a after update: mod %d create %d, want %d %d", a2.ModRevision, a2.CreateRevision, r2, r1)
	}
	if _, ok := s2.Get(resource.Cluster, "default", "b"); ok {
		t.Fatal("b still held after delete")
	}
	if rev, ok := s2.DeletedAt(resource.Cluster, "default", "b"); !ok || rev != r2 {
		t.Fatalf("DeletedAt(b) = %d, %v; want %d", rev, ok, r2)
	}
	// The old snapshot is unchanged: snapshots are immutable.
	if a, _ := s1.Get(resource.Cluster, "default", "a"); a.ModRevision != r1 {
		t.Fatal("an old snapshot changed")
	}
	var changes []view.EntryChange
	for s := s1.Next(); s != nil; s = s.Next() {
		changes = append(changes, s.Changes...)
	}
	if len(changes) != 2 {
		t.Fatalf("changes after r1 = %+v, want 2", changes)
	}
	// A write elsewhere in etcd advances the view's revision, not the set's.
	put, err := env.client.Put(context.Background(), "/other/key", "x")
	if err != nil {
		t.Fatal(err)
	}
	s3 := waitRev(t, v, put.Header.Revision)
	if s3.LastChange(resource.Cluster, "default") != r2 {
		t.Fatal("a write outside the prefix changed LastChange")
	}
}

// TestViewMalformedValue: a value that does not decode is skipped, logged
// once, counted; the rest is served.
func TestViewMalformedValue(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "good", 1)}, nil)
	if _, err := env.client.Put(context.Background(), "/legation/resources/cluster/default/bad", "\xff\xfegarbage"); err != nil {
		t.Fatal(err)
	}
	v := env.startView(t, env.client, nil)
	s := waitRev(t, v, r1)
	if _, ok := s.Get(resource.Cluster, "default", "good"); !ok {
		t.Fatal("good resource missing")
	}
	if _, ok := s.Get(resource.Cluster, "default", "bad"); ok {
		t.Fatal("malformed resource served")
	}
	if s.Malformed != 1 {
		t.Fatalf("Malformed = %d, want 1", s.Malformed)
	}
	// A bad value over a good one: the key is gone for clients; a good value
	// brings it back.
	put, err := env.client.Put(context.Background(), "/legation/resources/cluster/default/good", "junk")
	if err != nil {
		t.Fatal(err)
	}
	s = waitRev(t, v, put.Header.Revision)
	if _, ok := s.Get(resource.Cluster, "default", "good"); ok || s.Malformed != 2 {
		t.Fatalf("after a bad write: held=%v malformed=%d, want gone and 2", ok, s.Malformed)
	}
	r2 := vApply(t, env.store, []store.Put{vCluster(t, "default", "good", 3), vCluster(t, "default", "bad", 3)}, nil)
	s = waitRev(t, v, r2)
	if s.Len() != 2 || s.Malformed != 0 {
		t.Fatalf("after fixing: len %d malformed %d, want 2 and 0", s.Len(), s.Malformed)
	}
	if got := counter(t, env.reg, "legation_view_malformed_values_total"); got != 2 {
		t.Fatalf("malformed counter = %v, want 2", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if g := mf.GetMetric()[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestViewSurvivesCompaction: the view's etcd connection is cut, changes
// are made and compacted away, the connection comes back: the view
// reloads, holds etcd's state, and its revision never went backwards.
func TestViewSurvivesCompaction(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	proxy := storetest.NewProxy(t, env.etcd.Endpoint)
	viewClient, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viewClient.Close() })

	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "keep", 1), vCluster(t, "default", "drop", 1), vCluster(t, "default", "change", 1)}, nil)
	v := env.startView(t, viewClient, nil)
	first := waitRev(t, v, r1)

	proxy.Cut()
	vApply(t, env.store, []store.Put{vCluster(t, "default", "change", 2), vCluster(t, "default", "new", 2)}, nil)
	r3 := vApply(t, env.store, nil, []store.Key{{Type: resource.Cluster, Scope: "default", Name: "drop"}})
	if _, err := env.client.Compact(context.Background(), r3); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()

	s := waitRev(t, v, r3)
	want := map[string]int64{"keep": r1, "change": r3 - 1, "new": r3 - 1}
	if s.Len() != len(want) {
		t.Fatalf("view holds %d resources, want %d", s.Len(), len(want))
	}
	for name, rev := range want {
		e, ok := s.Get(resource.Cluster, "default", name)
		if !ok || e.ModRevision != rev {
			t.Fatalf("%s: held=%v entry=%+v, want mod revision %d", name, ok, e, rev)
		}
	}
	if _, ok := s.DeletedAt(resource.Cluster, "default", "drop"); !ok {
		t.Fatal("the reload did not record the deletion of drop")
	}
	reloaded := false
	prev := int64(0)
	for x := first; x != nil; x = x.Next() {
		if x.Revision < prev {
			t.Fatalf("revision went backwards: %d after %d", x.Revision, prev)
		}
		prev = x.Revision
		reloaded = reloaded || x.Reloaded
	}
	if !reloaded {
		t.Fatal("no reload seen")
	}
	// The view follows etcd again after the reload.
	r4 := vApply(t, env.store, []store.Put{vCluster(t, "default", "after", 4)}, nil)
	if s := waitRev(t, v, r4); s.Len() != 4 {
		t.Fatalf("after reload: %d resources, want 4", s.Len())
	}
}

// TestViewHistoryAtStart: a view started after a deletion knows, from
// etcd's history, when the set last changed and what was deleted, by the
// time HistoryRead is closed (the replica is not ready before: a client
// presenting a version from before the start would be answered in full).
func TestViewHistoryAtStart(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 1), vCluster(t, "default", "b", 1)}, nil)
	r2 := vApply(t, env.store, nil, []store.Key{{Type: resource.Cluster, Scope: "default", Name: "b"}})
	put, err := env.client.Put(context.Background(), "/other", "x")
	if err != nil {
		t.Fatal(err)
	}
	v := env.startView(t, env.client, nil)
	select {
	case <-v.HistoryRead():
	case <-time.After(viewTestTimeout):
		t.Fatalf("HistoryRead not closed after %s: HistoryFrom %d", viewTestTimeout, v.Snapshot().HistoryFrom)
	}
	s := v.Snapshot()
	if s.HistoryFrom > r1 {
		t.Fatalf("HistoryRead closed with HistoryFrom %d, want <= %d", s.HistoryFrom, r1)
	}
	if got := s.LastChange(resource.Cluster, "default"); got != r2 {
		t.Fatalf("LastChange = %d, want %d (the deletion)", got, r2)
	}
	if rev, ok := s.DeletedAt(resource.Cluster, "default", "b"); !ok || rev != r2 {
		t.Fatalf("DeletedAt(b) = %d %v, want %d", rev, ok, r2)
	}
	if s.Revision < put.Header.Revision {
		t.Fatalf("revision %d, want at least %d", s.Revision, put.Header.Revision)
	}
}

// TestViewHistoryReadWithoutWindow: with no history to read
// (HistoryWindow < 0), HistoryRead is closed once the view is loaded.
func TestViewHistoryReadWithoutWindow(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, func(c *view.Config) { c.HistoryWindow = -1 })
	select {
	case <-v.HistoryRead():
	case <-time.After(viewTestTimeout):
		t.Fatal("HistoryRead not closed with no history to read")
	}
}

// TestViewLoads10k: 10,000 resources load at start.
func TestViewLoads10k(t *testing.T) {
	env := newViewEnv(t, storetest.Options{MaxTxnOps: 20000, MaxRequestBytes: 32 << 20})
	var puts []store.Put
	for i := 0; i < 10000; i++ {
		puts = append(puts, vCluster(t, fmt.Sprintf("g%d", i%10), fmt.Sprintf("cluster-%05d", i), 1))
	}
	rev := vApply(t, env.store, puts, nil)
	v := env.startView(t, env.client, func(c *view.Config) { c.PageSize = 500 })
	s := v.Snapshot()
	if s.Revision < rev || s.Len() != 10000 {
		t.Fatalf("loaded %d resources at %d, want 10000 at >= %d", s.Len(), s.Revision, rev)
	}
	if n := count(s, resource.Cluster, "g3"); n != 1000 {
		t.Fatalf("scope g3 holds %d, want 1000", n)
	}
}

// TestViewWaitRevisionTimesOut: waiting for a revision etcd never reaches
// ends with the context, not with an older snapshot.
func TestViewWaitRevisionTimesOut(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, nil)
	ctx, cancel := context.WithTimeout(context.Background(), viewTestShortTimeout)
	defer cancel()
	s, err := v.WaitRevision(ctx, v.Snapshot().Revision+1000)
	if err == nil || s != nil {
		t.Fatalf("WaitRevision = %v, %v; want a timeout", s, err)
	}
}

// TestViewIdleWakesRarely: the timer of a view whose watch hears nothing
// fires about once per ProgressInterval (to ask etcd for progress; the
// answer sets it a ProgressInterval ahead), not every 100ms, and the view
// still keeps LastHeard fresh.
func TestViewIdleWakesRarely(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, func(c *view.Config) {
		c.ProgressInterval = 500 * time.Millisecond
		c.StallTimeout = 3 * time.Second
	})
	select {
	case <-v.HistoryRead():
	case <-time.After(viewTestTimeout):
		t.Fatal("history not read")
	}
	time.Sleep(200 * time.Millisecond)
	const quiet = 3 * time.Second
	before := v.Checks()
	deadline := time.Now().Add(quiet)
	var oldest time.Duration // the longest LastHeard went without moving
	for time.Now().Before(deadline) {
		oldest = max(oldest, time.Since(v.LastHeard()))
		time.Sleep(20 * time.Millisecond)
	}
	wakes := v.Checks() - before
	// 3s at 500ms: 6 progress requests; a timer that woke to see each
	// answer would fire 12 times, a 100ms ticker 30.
	if wakes > 8 {
		t.Errorf("the idle view's timer fired %d times in %s; want about 1 per ProgressInterval (6)", wakes, quiet)
	}
	if wakes < 4 {
		t.Errorf("the idle view's watch loop woke %d times in %s; it must still ask for progress", wakes, quiet)
	}
	if oldest > 1200*time.Millisecond {
		t.Errorf("LastHeard went %s without moving; want about ProgressInterval (500ms)", oldest)
	}
}

package devetcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// compactEnv is an embedded etcd with a store on it.
type compactEnv struct {
	srv    *devetcd.Server
	client *clientv3.Client
	store  *store.Store
}

func startCompactEnv(t testing.TB, cfg devetcd.Config) *compactEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.UnsafeNoFsync = true // what is measured is sizes, not durability
	srv, err := devetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := store.New(store.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return &compactEnv{srv: srv, client: c, store: s}
}

// cluster is cluster name, version v, padded to about 250 bytes, the size
// of a small real cluster.
func cluster(t testing.TB, name string, v int) *anypb.Any {
	t.Helper()
	b, err := resource.Marshal(resource.Cluster, &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(v+1) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		AltStatName:          strings.Repeat("x", 200),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// apply plans and applies one put, as xdsadmin apply does, and returns
// the revision written.
//
// Applies to one scope from many workers conflict (each compares the
// scope's apply marker): a conflict plans again, as xdsadmin does.
func (e *compactEnv) apply(ctx context.Context, t testing.TB, name string, v int) (int64, error) {
	for {
		plan, err := e.store.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{{
			Key: store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: name}, Body: cluster(t, name, v)}}})
		if err != nil {
			return 0, err
		}
		res, err := e.store.Apply(ctx, plan, store.ApplyOptions{})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return res.Revision, nil
	}
}

// drive makes n applies with workers in parallel, each worker changing
// its own ten clusters in turn; it returns how long they took.
func (e *compactEnv) drive(t testing.TB, n, workers int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if _, err := e.apply(ctx, t, fmt.Sprintf("load-%d-%d", w, i%10), i); err != nil {
					errs <- fmt.Errorf("apply %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return time.Since(start)
}

// dbSize returns etcd's database file size and the bytes in use in it.
func (e *compactEnv) dbSize(t testing.TB) (int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.client.Status(ctx, e.srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	return st.DbSize, st.DbSizeInUse
}

// checkHistory checks that the history window still answers "get
// --revision": marker was written at rev with body want (and changed
// since), and that revision 2, long compacted, is refused as such.
func (e *compactEnv) checkHistory(t testing.TB, rev int64, want *anypb.Any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: "marker"}
	r, _, err := e.store.Get(ctx, k, rev)
	if err != nil {
		t.Fatalf("get --revision %d within the history kept: %v", rev, err)
	}
	if diff := cmp.Diff(want, r.Envelope.GetBody(), protocmp.Transform()); diff != "" {
		t.Errorf("get --revision %d (-want +got):\n%s", rev, diff)
	}
	_, _, err = e.store.Get(ctx, k, 2)
	if err == nil || !strings.Contains(err.Error(), "revision compacted") {
		t.Errorf("get --revision 2 = %v, want a compacted revision", err)
	}
}

// runCompaction is the scenario of TestCompactionBoundsDB and of its
// 100,000-apply version (compact_e2e_test.go): n applies, a marker, a
// tenth of the history's worth of applies more, then the database must be
// under bound and the marker's old revision still readable.
func runCompaction(t *testing.T, cfg devetcd.Config, n, workers int, bound int64) {
	e := startCompactEnv(t, cfg)
	took := e.drive(t, n, workers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	markRev, err := e.apply(ctx, t, "marker", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.apply(ctx, t, "marker", 2); err != nil {
		t.Fatal(err)
	}
	history := cfg.HistoryRevisions
	if history == 0 {
		history = devetcd.DefaultHistoryRevisions
	}
	e.drive(t, int(history/10), workers)
	// The compactor runs every CompactCheck and compacts in steps of a
	// tenth of the history: wait until it has compacted to within two
	// histories of the marker.
	old := max(markRev-2*history, 2)
	deadline := time.Now().Add(time.Minute)
	for {
		_, _, err := e.store.Get(ctx, store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: "marker"}, old)
		if err != nil && strings.Contains(err.Error(), "revision compacted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d still readable after a minute: the compactor does not keep up", old)
		}
		time.Sleep(10 * time.Millisecond)
	}
	size, inUse := e.dbSize(t)
	t.Logf("%d applies (%d workers) in %s (%.0f/s); history %d revisions; db %d bytes, %d in use; bound %d",
		n, workers, took.Round(time.Millisecond), float64(n)/took.Seconds(), history, size, inUse, bound)
	if size > bound {
		t.Errorf("etcd database is %d bytes after %d applies, more than the %d bytes bound", size, n, bound)
	}
	e.checkHistory(t, markRev, cluster(t, "marker", 1))
}

// TestCompactionBoundsDB: the dev etcd keeps its database small however
// many applies it takes, and "get --revision" still reads the history it
// keeps. A smaller history and a faster check than the defaults make
// 2,000 applies (ten times the history) enough; they take seconds (a
// minute under -race). The defaults with 100,000 applies, and the same
// applies without compaction (which exceed the bound), run in
// compact_e2e_test.go.
func TestCompactionBoundsDB(t *testing.T) {
	runCompaction(t, devetcd.Config{HistoryRevisions: 200, CompactCheck: 10 * time.Millisecond}, testApplies, 8, testBound)
}

// testApplies and testBound are TestCompactionBoundsDB's applies and its
// bound on the database size: each apply's revision holds a 300-byte
// value and the apply's history record (the value it replaced, about
// 1.6 KB in all), so 200 revisions of history are about 320 KiB, to which
// add the 100 history records kept, etcd's own pages, the freelist and
// the pages freed by the last compactions not yet reused. Without
// compaction the same applies make about 3.2 MB.
const (
	testApplies = 2000
	testBound   = 1 << 20
)

// TestDefragment: a dev etcd that restarts with a long history in its
// data directory compacts it, then finds most of its file free and
// defragmentation shrinks the file. bbolt counts the pages a compaction
// frees as free only after a later write, so the test keeps writing, as
// a dev session does.
func TestDefragment(t *testing.T) {
	dir := t.TempDir()
	e := startCompactEnv(t, devetcd.Config{Dir: dir, HistoryRevisions: -1})
	e.drive(t, 1000, 8)
	before, _ := e.dbSize(t)
	e.srv.Close()

	e = startCompactEnv(t, devetcd.Config{Dir: dir, HistoryRevisions: 100, CompactCheck: 10 * time.Millisecond, DefragFreeBytes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; ; i++ {
		size, inUse := e.dbSize(t)
		if size < before/2 {
			t.Logf("db %d bytes before, %d after compaction and defragmentation (%d in use), %d writes later", before, size, inUse, i)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("db still %d bytes (%d in use) a minute after a restart with 100 revisions of history; %d before", size, inUse, before)
		}
		if _, err := e.apply(ctx, t, "marker", i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

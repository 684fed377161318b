package replica_test

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// startupResourcesEnv sets how many resources BenchmarkStartup loads;
// startupResources is its default.
const (
	startupResourcesEnv = "LEGATION_STARTUP_RESOURCES"
	startupResources    = 100_000
)

// startupPrefix is the etcd prefix of the resources a starting replica
// loads.
const startupPrefix = "/startup/"

// BenchmarkStartup measures a replica starting in etcd mode, as xds-node
// starts it (replica.New, then Run), against an etcd already holding
// LEGATION_STARTUP_RESOURCES resources (100,000 by default) written as
// xdsadmin apply --chunked writes them: ready-s is the time until its
// /readyz answers 200, first-response-s until a client's first SotW CDS
// request (a wildcard over real gRPC) is answered with every cluster.
// heap-MB is what the process's heap grew by once the replica answered
// and settled (settledHeap): the replica's, and what the etcd, embedded
// in the benchmark's process, keeps for its new client. The resources
// are written once, outside the timer; each op starts a replica, and
// stops it untimed.
func BenchmarkStartup(b *testing.B) {
	n := startupResources
	if v := os.Getenv(startupResourcesEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 4 {
			b.Fatalf("%s=%q: want a number of resources, at least 4", startupResourcesEnv, v)
		}
	}
	w := fillStartup(b, n)
	b.ResetTimer()
	b.StopTimer()
	var ready, first time.Duration
	var heap int64
	for i := range b.N {
		before := liveHeap()
		b.StartTimer()
		s := startReplica(b, w, "startup-"+strconv.Itoa(i))
		b.StopTimer()
		s.checkCDS(b, w)
		ready += s.ready
		first += s.first
		heap += int64(settledHeap() - before)
		s.stop(b)
	}
	nb := float64(b.N)
	b.ReportMetric(ready.Seconds()/nb, "ready-s")
	b.ReportMetric(first.Seconds()/nb, "first-response-s")
	b.ReportMetric(float64(heap)/nb/(1<<20), "heap-MB")
	b.ReportMetric(float64(w.resources()), "resources")
}

// TestStartupServesAll: a replica started against an etcd holding a few
// thousand resources says it is ready only once it serves them all: the
// first requests after /readyz answers 200 get every cluster, load
// assignment and listener.
func TestStartupServesAll(t *testing.T) {
	w := fillStartup(t, 3_000)
	s := startReplica(t, w, "startup")
	defer s.stop(t)
	s.checkCDS(t, w)
	t.Logf("%d resources: ready in %s, first response in %s", w.resources(), s.ready, s.first)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(s.cc).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Load assignments are not a wildcard type: they are asked for by
	// name, as Envoy does once it has the clusters.
	for _, c := range []struct {
		typ   *resource.Type
		names []string // nil: a wildcard
		want  []string
	}{
		{resource.Endpoint, w.set.Clusters, w.set.Clusters},
		{resource.Listener, nil, listenerNames(w.set.Listeners)},
	} {
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("startup", "c1"), TypeUrl: c.typ.URL, ResourceNames: c.names}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		checkNames(t, c.typ, resp, c.want)
	}
}

// startupWorld is an embedded etcd holding set under startupPrefix.
type startupWorld struct {
	etcd *storetest.Etcd
	set  fixture.Set
}

// resources is the number of resources of w's set.
func (w *startupWorld) resources() int { return 2*len(w.set.Clusters) + 2*w.set.Listeners }

// fillStartup starts an embedded etcd and writes about n resources
// (n rounded down to even): a fortieth listeners, as many route
// configurations, and the rest EDS clusters, each with its load
// assignment of 5 endpoints. They are written as xdsadmin apply
// --chunked writes them: one plan, applied in transactions within etcd's
// limits.
func fillStartup(tb testing.TB, n int) *startupWorld {
	tb.Helper()
	const maxTxnOps, maxRequestBytes = 10_000, 8 << 20
	listeners := max(1, n/40)
	w := &startupWorld{
		etcd: storetest.Start(tb, storetest.Options{MaxTxnOps: maxTxnOps, MaxRequestBytes: maxRequestBytes}),
		set:  fixture.NewSet(max(1, (n-2*listeners)/2), 5, listeners, 10000),
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{w.etcd.Endpoint}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), MaxCallSendMsgSize: maxRequestBytes,
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	st, err := store.New(store.Config{Client: c, Prefix: startupPrefix, MaxTxnOps: maxTxnOps, MaxRequestBytes: maxRequestBytes, Writer: "startup"})
	if err != nil {
		tb.Fatal(err)
	}
	puts, err := w.set.Puts(store.DefaultScope)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	plan, err := st.MakePlan(ctx, store.PlanRequest{Puts: puts})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, store.ApplyOptions{Chunked: true}); err != nil {
		tb.Fatal(err)
	}
	return w
}

// started is a replica started by startReplica, with a client connection
// to its xDS port.
type started struct {
	node *replica.Node
	cc   *grpc.ClientConn
	// ready and first are the times from replica.New until /readyz
	// answered 200, and until the first CDS response came.
	ready, first time.Duration
	cds          *discoveryv3.DiscoveryResponse // the first CDS response
	halt         func(testing.TB)
}

// stop closes the client connection, stops the replica and checks that
// its Run returned nil.
func (s *started) stop(tb testing.TB) {
	tb.Helper()
	s.cc.Close()
	s.halt(tb)
}

// runNode runs a replica of cfg until stop is called or tb ends; stop
// checks that its Run returned nil. Unlike start, nothing tb keeps
// refers to the replica: a benchmark starting one after another holds
// one at a time.
func runNode(tb testing.TB, cfg replica.Config) (_ *replica.Node, stop func(testing.TB)) {
	tb.Helper()
	n, err := replica.New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func(tb testing.TB) {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("node Run: %v", err)
			}
		})
	}
	tb.Cleanup(func() { stop(tb) })
	return n, stop
}

// startReplica starts a replica in etcd mode on w and returns it once
// /readyz answered 200 and a wildcard CDS request of node id was
// answered (checkCDS checks the answer). The wait is bounded by a minute plus
// a millisecond per resource.
func startReplica(tb testing.TB, w *startupWorld, id string) *started {
	tb.Helper()
	cfg := testConfig(tb)
	cfg.EtcdEndpoints = []string{w.etcd.Endpoint}
	cfg.EtcdPrefix = startupPrefix
	deadline := time.Now().Add(time.Minute + time.Duration(w.resources())*time.Millisecond)
	t0 := time.Now()
	s := new(started)
	s.node, s.halt = runNode(tb, cfg)
	waitReadyUntil(tb, s.node, deadline)
	s.ready = time.Since(t0)
	s.cc = xdstest.Dial(tb, s.node.XDSAddr(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(s.cc).StreamAggregatedResources(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.Send(cdsRequest(id)); err != nil {
		tb.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		tb.Fatalf("the first CDS response: %v", err)
	}
	s.first = time.Since(t0)
	s.cds = resp
	return s
}

// checkCDS fails tb unless the first CDS response held every cluster of
// w, and lets go of it.
func (s *started) checkCDS(tb testing.TB, w *startupWorld) {
	tb.Helper()
	checkNames(tb, resource.Cluster, s.cds, w.set.Clusters)
	s.cds = nil
}

// waitReadyUntil polls n's /readyz every 5ms until it answers 200,
// failing tb after deadline.
func waitReadyUntil(tb testing.TB, n *replica.Node, deadline time.Time) {
	tb.Helper()
	for {
		resp, err := httpClient.Get("http://" + n.HTTPAddr() + "/readyz")
		if err != nil {
			tb.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the replica is not ready at the deadline: /readyz %s", resp.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkNames fails tb unless resp holds exactly the resources of typ
// named want.
func checkNames(tb testing.TB, typ *resource.Type, resp *discoveryv3.DiscoveryResponse, want []string) {
	tb.Helper()
	if resp.GetTypeUrl() != typ.URL {
		tb.Fatalf("a response of %s, want %s", resp.GetTypeUrl(), typ.URL)
	}
	got := make([]string, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		m, err := resource.Unmarshal(typ, a.GetValue())
		if err != nil {
			tb.Fatal(err)
		}
		got = append(got, typ.NameOf(m))
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		tb.Fatalf("%s: %d resources, want %d (first %q, want %q)", typ.Name, len(got), len(want), first(got), first(want))
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// listenerNames are the names of a Set's n listeners.
func listenerNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fixture.ListenerName(i)
	}
	return names
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settledHeap is the heap in use once what a start-up holds for a moment
// is let go (the history read, the first responses, the embedded etcd's
// catch-up of the new watch): liveHeap read every 100ms until two reads
// differ by less than 1 MiB, for 10s at most.
func settledHeap() uint64 {
	last := liveHeap()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		h := liveHeap()
		if max(h, last)-min(h, last) < 1<<20 {
			return h
		}
		last = h
	}
	return last
}

package xdstest

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// The push scenario, of the performance target "delta, 100,000 clusters,
// one cluster changed: one resource per stream; cost flat from 1k to 100k
// clusters":
// every stream is a wildcard CDS subscriber over ADS holding every cluster;
// one push changes one cluster.
const (
	// pushStreams is the number of streams of each configuration, but see
	// pushStreamsFor.
	pushStreams = 1000
	// pushPerConn streams share one ClientConn: HTTP/2 multiplexes them,
	// and an Envoy fleet's many connections would only add sockets here.
	pushPerConn = 100
	// pushOpenBatch streams open together, and wait for their initial
	// responses before the next ones open: that bounds the initial
	// responses in flight at once (13 MB each at 100,000 clusters,
	// buffered whole by the client). Two connections' worth, so that
	// both cores work (one connection's transport is one writer and one
	// reader goroutine).
	pushOpenBatch = 2 * pushPerConn
	// pushTxnOps and pushMaxRequestBytes are the etcd limits of the env:
	// the clusters are written 9,999 per transaction, with the scope's
	// apply marker.
	pushTxnOps          = 10000
	pushMaxRequestBytes = 64 << 20
	// pushTimeout bounds the set-up of one configuration and each push.
	// Generous: a benchmark reports how long things take, it does not
	// judge.
	pushTimeout = 10 * time.Minute
)

// pushClusterCounts are the configurations, in the order run: each one
// adds clusters to the env's etcd, so they go up.
var pushClusterCounts = []int{1000, 10000, 100000}

// pushStreamsFor is the number of streams for a number of clusters. At
// 100,000 clusters 1000 streams do not fit the ~2 minutes of set-up the
// 2-core, 24 GiB machine the targets are measured on allows: a delta
// stream's initial sync costs ~180 ms of wall time there (the server
// works out, sorts and keys the 100,000 resources for each stream), so
// 1000 would take ~3 minutes, and each stream keeps ~8.4 MB of heap (what
// its client holds, one map entry per cluster): ~8.4 GB live, twice that
// with the GC's headroom. 500 streams there (measured: synced and ACKed
// in 91 s, 4.2 GB of heap); every metric is per stream, so the
// configurations still compare.
func pushStreamsFor(clusters int) int {
	if clusters >= 100000 {
		return 500
	}
	return pushStreams
}

func pushClusterName(i int) string { return fmt.Sprintf("cluster-%06d", i) }

// pushCluster is the scenario's cluster: fixture.Cluster without its
// eds_cluster_config, the shape the push benchmarks' figures are measured
// with (the config would change the bytes measured).
func pushCluster(name string, ms int64) *clusterv3.Cluster {
	c := fixture.Cluster(name, time.Duration(ms)*time.Millisecond)
	c.EdsClusterConfig = nil
	return c
}

// PushOptions are the Options of a push benchmark's Env: etcd's limits
// raised for transactions of 10,000 clusters.
func PushOptions() Options {
	return Options{MaxTxnOps: pushTxnOps, MaxRequestBytes: pushMaxRequestBytes}
}

// PushServer is the server a push benchmark measures, built by the
// benchmark's own package (SotW or delta) on an Env made with
// PushOptions. The functions are called from the benchmark's goroutine.
type PushServer struct {
	// Env is the etcd, store and view the server serves.
	Env *Env
	// Addr is the address of the gRPC server serving ADS.
	Addr string
	// Delta says the streams are delta ADS (DeltaAggregatedResources);
	// otherwise SotW (StreamAggregatedResources).
	Delta bool
	// Acked counts the open streams of nodes "push-*" whose ACK of CDS
	// version ver the server has taken (from its Streams; for delta, with
	// no response outstanding).
	Acked func(ver string) int
	// Open counts the server's open streams.
	Open func() int
}

// pushEnv is the server measured, with the clusters written so far.
type pushEnv struct {
	PushServer
	clusters int // clusters written so far: pushClusterName(0..clusters-1)
}

// seed writes clusters until there are n, pushTxnOps-1 per transaction
// (the scope's apply marker is the last operation) through the store
// (each transaction one revision, as xdsadmin apply writes them), and
// waits until the view has them.
func (e *pushEnv) seed(tb testing.TB, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	for e.clusters < n {
		end := min(n, e.clusters+pushTxnOps-1)
		puts := make([]store.Put, 0, end-e.clusters)
		for i := e.clusters; i < end; i++ {
			puts = append(puts, Put(tb, resource.Cluster, store.DefaultScope, pushCluster(pushClusterName(i), 1000)))
		}
		plan, err := e.Env.Store.MakePlan(ctx, store.PlanRequest{Puts: puts})
		if err != nil {
			tb.Fatalf("plan: %v", err)
		}
		res, err := e.Env.Store.Apply(ctx, plan, store.ApplyOptions{})
		if err != nil {
			tb.Fatalf("apply: %v", err)
		}
		if _, err := e.Env.View.WaitRevision(ctx, res.Revision); err != nil {
			tb.Fatal(err)
		}
		e.clusters = end
	}
}

// pushChanges counts the changes made in this process, so that each push
// writes new content.
var pushChanges atomic.Int64

// change writes a new version of one cluster and returns its name and the
// revision of the write. It puts the value straight into etcd, in the
// store's envelope, rather than through store.MakePlan and Apply: a plan
// reads every resource of the scope (all the clusters, 20 MB at 100,000),
// which would make ns/op grow with the cluster count for a reason that is
// not the fan-out, and would show up in the allocation attribution as
// gRPC transport traffic that cannot be told apart from the server's by
// its stack. The write is still one etcd revision the view applies like
// any other.
func (e *pushEnv) change(tb testing.TB) (string, int64) {
	tb.Helper()
	c := int(pushChanges.Add(1))
	name := pushClusterName(c % e.clusters)
	p := Put(tb, resource.Cluster, store.DefaultScope, pushCluster(name, int64(2000+c)))
	val, err := proto.Marshal(&legationv1.Envelope{Body: p.Body, WrittenBy: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	resp, err := e.Env.Client.Put(ctx, e.Env.Store.EtcdKey(p.Key), string(val))
	if err != nil {
		tb.Fatalf("put %s: %v", name, err)
	}
	return name, resp.Header.Revision
}

// BenchmarkPush is the body of BenchmarkDeltaPush (internal/xds/delta) and
// BenchmarkSotWPushSameChange (internal/xds/sotw): one changed cluster pushed
// to wildcard CDS ADS streams of s holding 1000, 10,000 or 100,000
// clusters (the performance target "delta, 100,000 clusters, one cluster
// changed: one resource per stream; cost flat from 1k to 100k clusters"),
// over real gRPC on 127.0.0.1, all in this process. The two protocols run
// the same scenario with the same code, so that they compare: delta
// sends the changed cluster, SotW CDS (full state) every cluster.
//
// Set-up, not measured: the clusters written pushTxnOps per transaction;
// the streams (pushStreamsFor: 1000, 500 at 100,000 clusters) opened 100
// per ClientConn, each having received every cluster and ACKed them. Each
// iteration writes one changed cluster to etcd and waits until every
// stream has received its response; the clients then ACK, outside the
// measurement, so that each push starts from the steady state.
//
// ns/op covers the etcd write (its fsyncs included) plus the fan-out. The
// custom metrics cover the fan-out alone, from the moment the view
// publishes the snapshot holding the change until the last stream has its
// response:
//
//   - ms-until-all-sent: mean over the pushes; max-ms-until-all-sent: the
//     worst push.
//   - wire-B/stream/push: gRPC message bytes received per stream (the
//     response; without the 5-byte gRPC and 9-byte HTTP/2 frame headers).
//   - alloc-B/stream/push and allocs/stream/push: runtime.MemStats
//     TotalAlloc and Mallocs across that window, divided by the streams:
//     server, clients and the view, which share the process. The clients
//     do not decode responses (their codec counts the bytes and reads the
//     few fields checked, allocating nothing).
//   - server-alloc-B/stream/push and server-allocs/stream/push: the
//     server's own share (packages delta, ads, xdsstream, wire, scope and
//     grpc-go's server side), from one more push made after the timed
//     ones with every allocation profiled (runtime.MemProfileRate=1),
//     each allocation's stack telling whose it is (see pushOwnerOf).
//   - cpu-us/stream/push: process CPU time (getrusage: user+system; the
//     server, the clients, etcd and the view) across the window, divided
//     by the streams.
//   - gcs/push: garbage collections that ended in the window.
//   - streams, clusters: the configuration.
//
// Every delta push must give every stream exactly one response, holding
// exactly the changed cluster at the write's revision and removing
// nothing; every SotW push, exactly one response holding every cluster at
// the write's revision. The benchmark fails otherwise.
func BenchmarkPush(b *testing.B, s PushServer) {
	e := &pushEnv{PushServer: s}
	sotw := !s.Delta
	// The streams of one configuration outlive the runs of its
	// sub-benchmark (testing runs it with b.N=1 first, then again): one
	// fixture at a time, replaced when the configuration changes, closed
	// when the benchmark ends (before the env: cleanups run last first).
	var cur *pushFixture
	b.Cleanup(func() {
		if cur != nil {
			cur.close(b)
		}
	})
	for _, clusters := range pushClusterCounts {
		b.Run(fmt.Sprintf("clusters=%d", clusters), func(b *testing.B) {
			n := pushStreamsFor(clusters)
			if cur == nil || cur.clusters != clusters {
				if cur != nil {
					cur.close(b)
					cur = nil
				}
				runtime.GC()
				debug.FreeOSMemory()
				start := time.Now()
				e.seed(b, clusters)
				seeded := time.Now()
				before := SettledMemStats().HeapAlloc
				cur = &pushFixture{e: e, sotw: sotw, n: n, clusters: clusters}
				cur.open(b)
				heap := int64(SettledMemStats().HeapAlloc) - int64(before)
				b.Logf("set-up: %d clusters written in %s, %d streams synced and ACKed in %s; heap after sync %d B/stream (server and client)",
					clusters, seeded.Sub(start).Round(time.Millisecond), n, time.Since(seeded).Round(time.Millisecond), heap/int64(n))
			}
			b.Run(fmt.Sprintf("streams=%d", n), cur.run)
		})
	}
}

// pushFixture is N client streams, wildcard CDS subscribers over delta or
// SotW ADS, holding every cluster.
type pushFixture struct {
	e        *pushEnv
	sotw     bool
	n        int
	clusters int

	ctx    context.Context // ends every stream
	cancel context.CancelFunc
	conns  []*grpc.ClientConn
	cls    []*pushClient
	wg     sync.WaitGroup // the receive goroutines

	// What the receive goroutines record: the responses of the round,
	// each of which must hold wantRes resources and remove none.
	round   *Round
	wantRes atomic.Int64

	pushes  int // pushes made on these streams
	metrics PushMetrics
}

// pushClient is one stream. Its receive goroutine records what the
// benchmark checks and ACKs; the benchmark goroutine is its only sender.
type pushClient struct {
	st       grpc.ClientStream
	received atomic.Int64 // responses received in all
	mu       sync.Mutex   // guards ver, nonce, name
	// From the last response: version_info (system_version_info in
	// delta), nonce, and (delta) the first resource's name.
	ver, nonce, name []byte
}

// open starts the streams, pushOpenBatch at a time, and returns once each
// has received every cluster and the server has taken each one's ACK.
func (f *pushFixture) open(b *testing.B) {
	b.Helper()
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.round = NewRound()
	f.wantRes.Store(int64(f.clusters))
	for i := 0; i < f.n; i++ {
		if i%pushOpenBatch == 0 {
			if i > 0 {
				f.wait(b, "every cluster")
			}
			f.round.Start(min(pushOpenBatch, f.n-i))
		}
		if i%pushPerConn == 0 {
			cc, err := grpc.NewClient(f.e.Addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(pushCodec{}), grpc.MaxCallRecvMsgSize(1<<30)))
			if err != nil {
				b.Fatal(err)
			}
			f.conns = append(f.conns, cc)
		}
		cc := f.conns[len(f.conns)-1]
		adsc := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
		node := &corev3.Node{Id: fmt.Sprintf("push-%d", i), Cluster: "push"}
		c := &pushClient{}
		var req proto.Message
		var err error
		if f.sotw {
			c.st, err = adsc.StreamAggregatedResources(f.ctx)
			req = &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.Cluster.URL}
		} else {
			c.st, err = adsc.DeltaAggregatedResources(f.ctx)
			req = &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.Cluster.URL}
		}
		if err != nil {
			b.Fatalf("stream %d: %v", i, err)
		}
		f.cls = append(f.cls, c)
		f.wg.Add(1)
		go f.receive(c)
		if err := c.st.SendMsg(req); err != nil {
			b.Fatalf("stream %d: send: %v", i, err)
		}
	}
	f.wait(b, "every cluster")
	f.ackAll(b, strconv.FormatInt(f.e.Env.View.Snapshot().Revision, 10), "")
}

// close ends the streams and waits until the server has let go of them.
func (f *pushFixture) close(b *testing.B) {
	if f.cancel == nil {
		return // never opened, or closed already
	}
	f.cancel()
	f.cancel = nil
	for _, cc := range f.conns {
		cc.Close()
	}
	f.wg.Wait()
	WaitNoStreams(b, pushTimeout, f.e.Open)
}

// receive counts each response of c's stream until the stream ends.
func (f *pushFixture) receive(c *pushClient) {
	defer f.wg.Done()
	m := &pushMsg{delta: !f.sotw}
	for {
		if err := c.st.RecvMsg(m); err != nil {
			if f.ctx.Err() == nil {
				f.round.Fail(err)
			}
			return
		}
		c.mu.Lock()
		c.ver = append(c.ver[:0], m.version...)
		c.nonce = append(c.nonce[:0], m.nonce...)
		c.name = append(c.name[:0], m.name...)
		c.mu.Unlock()
		c.received.Add(1)
		f.round.Got(m.size, int64(m.resources) == f.wantRes.Load() && m.removed == 0)
	}
}

// wait blocks until the streams of this round have had their responses.
func (f *pushFixture) wait(b *testing.B, what string) {
	b.Helper()
	f.round.Wait(b, pushTimeout, what, fmt.Sprintf("exactly %d resources and no removal", f.wantRes.Load()))
}

// ackAll checks that every stream has received exactly one response per
// push, the last at version ver (and, when name is set, holding the
// cluster name first), has every client ACK it, and returns once the
// server has taken every ACK.
func (f *pushFixture) ackAll(b *testing.B, ver, name string) {
	b.Helper()
	want := int64(f.pushes + 1)
	for i, c := range f.cls {
		if got := c.received.Load(); got != want {
			b.Fatalf("stream %d received %d responses, want %d (one per stream per push)", i, got, want)
		}
		c.mu.Lock()
		gotVer, nonce, gotName := string(c.ver), string(c.nonce), string(c.name)
		c.mu.Unlock()
		if gotVer != ver {
			b.Fatalf("stream %d holds version %s, want %s", i, gotVer, ver)
		}
		if name != "" && gotName != name {
			b.Fatalf("stream %d received cluster %q, want %q", i, gotName, name)
		}
		var req proto.Message
		if f.sotw {
			req = &discoveryv3.DiscoveryRequest{TypeUrl: resource.Cluster.URL, VersionInfo: ver, ResponseNonce: nonce}
		} else {
			req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Cluster.URL, ResponseNonce: nonce}
		}
		if err := c.st.SendMsg(req); err != nil {
			b.Fatalf("stream %d: ack: %v", i, err)
		}
	}
	WaitAcked(b, pushTimeout, f.n, ver, f.e.Acked)
	for i, c := range f.cls {
		if got := c.received.Load(); got != want {
			b.Fatalf("stream %d received %d responses by the time the ACKs were in, want %d", i, got, want)
		}
	}
}

// run makes b.N timed pushes, then one more with every allocation
// profiled, and reports the metrics of BenchmarkPush.
func (f *pushFixture) run(b *testing.B) {
	f.metrics = PushMetrics{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start, end, name, rev := f.push(b)
		b.StopTimer()
		f.metrics.Add(start, end, f.round.Bytes())
		f.ack(b, name, rev)
		b.StartTimer()
	}
	b.StopTimer()
	f.metrics.Report(b, f.n)
	b.ReportMetric(float64(f.n), "streams")
	b.ReportMetric(float64(f.clusters), "clusters")

	var name string
	var rev int64
	split := Attribute(pushOwnerOf, func() { _, _, name, rev = f.push(b) })
	f.ack(b, name, rev)
	n := float64(f.n)
	b.ReportMetric(float64(split[OwnedByServer].Bytes)/n, "server-alloc-B/stream/push")
	b.ReportMetric(float64(split[OwnedByServer].Objects)/n, "server-allocs/stream/push")
}

// ack checks the responses of the push that wrote name at rev, and has
// the clients ACK them.
func (f *pushFixture) ack(b *testing.B, name string, rev int64) {
	b.Helper()
	if f.sotw {
		name = "" // a SotW response holds every cluster, name among them
	}
	f.ackAll(b, strconv.FormatInt(rev, 10), name)
}

// push writes one changed cluster and waits until every stream has
// received its response. start is when the view published the change,
// end when the last stream had it.
func (f *pushFixture) push(b *testing.B) (start, end Mark, name string, rev int64) {
	b.Helper()
	f.pushes++
	if f.sotw {
		f.wantRes.Store(int64(f.clusters))
	} else {
		f.wantRes.Store(1)
	}
	f.round.Start(f.n)
	// The window starts when the view publishes the change, which wakes
	// every stream.
	published := MarkNextChange(f.ctx, f.e.Env.View.Snapshot())
	name, rev = f.e.change(b)
	f.wait(b, "the change")
	end = MarkNow()
	start = WaitMark(b, published, pushTimeout)
	return start, end, name, rev
}

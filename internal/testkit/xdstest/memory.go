package xdstest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// The memory scenario of the performance target "memory per connected
// stream beyond shared state: at most 50 KB, SotW and delta, holding 400
// resources": every stream is an ADS stream subscribed to CDS (wildcard)
// and to EDS by name, and holds the 200 clusters and their 200
// endpoint sets (20 endpoints each).
const (
	memoryResources = 200
	memoryEndpoints = 20
)

// MemoryOptions are the Options of a memory benchmark's Env.
func MemoryOptions() Options { return PushOptions() }

// MemoryServer is the server a memory benchmark measures, built by the
// benchmark's own package (SotW or delta) on an Env made with
// MemoryOptions. The functions are called from the benchmark's goroutine.
type MemoryServer struct {
	// Env is the etcd, store and view the server serves.
	Env *Env
	// Addr is the address of the gRPC server serving ADS.
	Addr string
	// Delta says the streams are delta ADS; otherwise SotW.
	Delta bool
	// Settled counts the open streams of nodes "mem-*" whose CDS and EDS
	// responses are all ACKed, each holding 200 resources.
	Settled func() int
	// Open counts the server's open streams.
	Open func() int
}

func memoryName(i int) string { return fmt.Sprintf("mem-%03d", i) }

// memoryPuts writes the scenario's 200 clusters, each with its 20
// endpoints.
func memoryPuts(tb testing.TB) []store.Put {
	puts := make([]store.Put, 0, 2*memoryResources)
	for i := range memoryResources {
		name := memoryName(i)
		puts = append(puts,
			Put(tb, resource.Cluster, store.DefaultScope, Cluster(name, 1000)),
			Put(tb, resource.Endpoint, store.DefaultScope, Endpoints(name, fixture.Ports(10000, memoryEndpoints)...)))
	}
	return puts
}

// BenchmarkStreamMemory reports the memory each idle stream of the memory
// scenario costs, for 1000 and 10,000 streams: the streams open (100 per
// connection), receive the 200 clusters and 200 endpoint sets and ACK
// them; heap and goroutine stacks are read after runtime.GC before the
// streams open and once they are idle.
//
// Server and clients share the process. The split comes from an exact
// profile of the allocations made while the streams open
// (runtime.MemProfileRate=1), each allocation's stack telling whose it is
// (pushOwnerOf): server-heap-B/stream is the heap the server's code
// (ads or delta, xdsstream, wire, scope, grpc-go's server side) still
// holds per stream; shared state the first stream builds (encoded
// bodies) counts too, amortised. server-B/stream adds the server's share
// of the goroutine stacks (by goroutine count, as idle goroutines' stacks
// are alike). heap-B/stream and goroutines/stream are the whole
// process's, clients included.
func BenchmarkStreamMemory(b *testing.B, s MemoryServer) {
	names := make([]string, memoryResources)
	for i := range names {
		names[i] = memoryName(i)
	}
	s.Env.Apply(b, memoryPuts(b))
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			var heap, stack, goroutines, serverHeap, serverObjs, serverG float64
			for i := 0; i < b.N; i++ {
				before := SettledMemStats()
				g0 := GoroutinesByOwner(pushOwnerOf)
				p0 := ReadAllocProfile()
				rate := runtime.MemProfileRate
				runtime.MemProfileRate = 1
				f := &memoryFixture{s: s, n: n, names: names}
				b.Cleanup(func() { // if open fails; else a no-op
					runtime.MemProfileRate = rate
					f.close(b)
				})
				f.open(b)
				writeHeapProfile(b, fmt.Sprintf("streams%d", n))
				runtime.MemProfileRate = rate
				after := SettledMemStats()
				g1 := GoroutinesByOwner(pushOwnerOf)
				split := ReadAllocProfile().InUseSince(p0, pushOwnerOf)
				heap += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
				stack += float64(int64(after.StackInuse) - int64(before.StackInuse))
				serverHeap += float64(split[OwnedByServer].Bytes)
				serverObjs += float64(split[OwnedByServer].Objects)
				for _, c := range g1 {
					goroutines += float64(c)
				}
				for _, c := range g0 {
					goroutines -= float64(c)
				}
				serverG += float64(g1[OwnedByServer] - g0[OwnedByServer])
				f.close(b)
			}
			per := float64(b.N) * float64(n)
			b.ReportMetric(heap/per, "heap-B/stream")
			b.ReportMetric(stack/per, "stack-B/stream")
			b.ReportMetric(goroutines/per, "goroutines/stream")
			b.ReportMetric(serverHeap/per, "server-heap-B/stream")
			b.ReportMetric(serverObjs/per, "server-objects/stream")
			b.ReportMetric(serverG/per, "server-goroutines/stream")
			if goroutines > 0 {
				b.ReportMetric((serverHeap+stack*serverG/goroutines)/per, "server-B/stream")
			}
		})
	}
}

// writeHeapProfile writes the heap profile, while the streams are open,
// to $LEGATION_STREAM_HEAPPROFILE.<name> when that variable is set: its
// inuse_space, filtered to the server's frames, tells what a stream
// holds (go tool pprof -sample_index=inuse_space -top).
func writeHeapProfile(b *testing.B, name string) {
	path := os.Getenv("LEGATION_STREAM_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path + "." + name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// The profile is written while every allocation is profiled
	// (MemProfileRate=1), so that its figures are not scaled up.
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// memoryFixture is N client streams of the memory scenario.
type memoryFixture struct {
	s     MemoryServer
	n     int
	names []string

	ctx    context.Context // ends every stream
	cancel context.CancelFunc
	conns  []*grpc.ClientConn
	wg     sync.WaitGroup // the receive goroutines
	errMu  sync.Mutex
	err    error // the first stream error
}

// open starts the streams and returns once the server has taken every
// stream's ACKs. Each stream's two requests go out before its receive
// goroutine starts; from then on that goroutine, which ACKs each
// response, is the stream's only sender.
func (f *memoryFixture) open(b *testing.B) {
	b.Helper()
	f.ctx, f.cancel = context.WithCancel(context.Background())
	for i := 0; i < f.n; i++ {
		if i%pushPerConn == 0 {
			cc, err := grpc.NewClient(f.s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			f.conns = append(f.conns, cc)
		}
		adsc := discoveryv3.NewAggregatedDiscoveryServiceClient(f.conns[len(f.conns)-1])
		node := &corev3.Node{Id: fmt.Sprintf("mem-%d", i), Cluster: "mem"}
		var st grpc.ClientStream
		var err error
		if f.s.Delta {
			var d grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
			if d, err = adsc.DeltaAggregatedResources(f.ctx); err == nil {
				st = d
				err = d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.Cluster.URL})
				if err == nil {
					err = d.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: f.names})
				}
			}
		} else {
			var c grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
			if c, err = adsc.StreamAggregatedResources(f.ctx); err == nil {
				st = c
				err = c.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.Cluster.URL})
				if err == nil {
					err = c.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: f.names})
				}
			}
		}
		if err != nil {
			b.Fatalf("stream %d: %v", i, err)
		}
		f.wg.Add(1)
		go f.receive(st)
	}
	deadline := time.Now().Add(pushTimeout)
	for {
		f.errMu.Lock()
		err := f.err
		f.errMu.Unlock()
		if err != nil {
			b.Fatalf("a stream failed: %v", err)
		}
		got := f.s.Settled()
		if got == f.n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %s %d of %d streams are settled", pushTimeout, got, f.n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// receive ACKs each response of st until the stream ends.
func (f *memoryFixture) receive(st grpc.ClientStream) {
	defer f.wg.Done()
	for {
		var err error
		if f.s.Delta {
			r := new(discoveryv3.DeltaDiscoveryResponse)
			if err = st.RecvMsg(r); err == nil {
				err = st.SendMsg(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
			}
		} else {
			r := new(discoveryv3.DiscoveryResponse)
			if err = st.RecvMsg(r); err == nil {
				req := &discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
				if r.GetTypeUrl() == resource.Endpoint.URL {
					req.ResourceNames = f.names
				}
				err = st.SendMsg(req)
			}
		}
		if err != nil {
			if f.ctx.Err() == nil {
				f.errMu.Lock()
				if f.err == nil {
					f.err = err
				}
				f.errMu.Unlock()
			}
			return
		}
	}
}

// close ends the streams and waits until the server has let go of them.
func (f *memoryFixture) close(b *testing.B) {
	if f.cancel == nil {
		return // never opened, or closed already
	}
	f.cancel()
	f.cancel = nil
	for _, cc := range f.conns {
		cc.Close()
	}
	f.wg.Wait()
	WaitNoStreams(b, pushTimeout, f.s.Open)
}

// memoryClient reports whether fn, a function of a stack, is the memory
// benchmark's client (for pushOwnerOf).
func memoryClient(fn string) bool {
	return strings.HasPrefix(fn, "github.com/legation-io/legation/internal/testkit/xdstest.(*memoryFixture)")
}

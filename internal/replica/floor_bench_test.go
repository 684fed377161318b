package replica_test

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/procstat"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/wire"
)

// floorStreamsEnv sets the streams of BenchmarkPushFloor (default 2,000).
const floorStreamsEnv = "LEGATION_FLOOR_STREAMS"

// BenchmarkPushFloor measures the least a push to every Envoy can cost a
// server on grpc-go, one connection per Envoy: floorADS, with the
// replica's codec and transport settings, sends each of its streams one
// pre-encoded ClusterLoadAssignment of 20 endpoints (about 700 bytes, as
// make bench-load's endpoint change) from a pool of one sender per core,
// and its clients, in a process of their own on the same cores, decode
// it and ACK. Each op is one push; it ends when every ACK is in. No
// state, no etcd, no view: this is gRPC's write and read per connection
// and the clients' work, the floor under a replica's figures
// (docs/operations/performance.md). It reports the server's CPU per
// stream per push (server-cpu-us/stream/push) and the clients'
// (client-cpu-us/stream/push), the time from the push's
// start to the last ACK (ms-to-all-acked), and the server's resident
// memory per stream after the pushes (rss-KiB/stream), at Go's default
// collector settings, as make bench-load reads a replica's.
func BenchmarkPushFloor(b *testing.B) {
	n := countFromEnv(b, floorStreamsEnv, 2000)
	// The streams outlive the sub-benchmark's runs (testing runs it
	// with b.N=1 first, then again), so that the memory they hold is
	// read once, against the process before them.
	f := &floorADS{acked: make(chan struct{}, 1)}
	addr := startFloorADS(b, f)
	rss := rssBytes(b)
	stop, clientCPU := openClients(b, addr, n, true)
	defer stop()
	f.waitStreams(b, n)
	body := floorBody(b)
	pushes := 0
	b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
		cpu, ccpu := procstat.CPU(), clientCPU()
		var wall time.Duration
		for range b.N {
			pushes++
			start := time.Now()
			f.push(body, "p"+strconv.Itoa(pushes))
			select {
			case <-f.acked:
			case <-time.After(time.Minute):
				b.Fatalf("push %d: %d of %d ACKs in a minute", pushes, f.acks.Load(), n)
			}
			wall += time.Since(start)
		}
		b.ReportMetric(float64((procstat.CPU()-cpu).Microseconds())/float64(b.N*n), "server-cpu-us/stream/push")
		b.ReportMetric(float64((clientCPU()-ccpu).Microseconds())/float64(b.N*n), "client-cpu-us/stream/push")
		b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "ms-to-all-acked")
		b.ReportMetric(float64(rssBytes(b)-rss)/1024/float64(n), "rss-KiB/stream")
	})
}

// countFromEnv is the positive count environment variable name says, or
// def when it is not set.
func countFromEnv(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// rssBytes is the process's resident memory, from /proc/self/statm.
func rssBytes(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Fatal(err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		tb.Fatalf("/proc/self/statm: %v", err)
	}
	return resident * int64(os.Getpagesize())
}

// floorBody is the pushed response's body: one endpoint set of 20, as
// the load tool's fixture has them.
func floorBody(tb testing.TB) []byte {
	tb.Helper()
	a, err := anypb.New(fixture.Endpoints(1, 20, 8080).LoadAssignment())
	if err != nil {
		tb.Fatal(err)
	}
	body, err := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "2", TypeUrl: resource.Endpoint.URL, Resources: []*anypb.Any{a}})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// floorADS is an ADS server with no state of its own: a stream's handler
// answers the first request, then reads and counts the ACKs of the
// current push. push sends every stream one response.
type floorADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	mu      sync.Mutex
	streams []grpc.ServerStream

	nonce atomic.Pointer[string] // the current push's
	acks  atomic.Int64           // of the current push
	want  atomic.Int64           // the streams the current push goes to
	acked chan struct{}          // a push is ACKed by every stream
}

func (f *floorADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if err := s.SendMsg(wire.NewResponse(floorFirst, "0")); err != nil {
		return err
	}
	f.mu.Lock()
	f.streams = append(f.streams, s)
	f.mu.Unlock()
	for {
		r, err := s.Recv()
		if err != nil {
			return nil
		}
		if p := f.nonce.Load(); p != nil && r.GetResponseNonce() == *p && f.acks.Add(1) == f.want.Load() {
			f.acked <- struct{}{}
		}
	}
}

// floorFirst is the first response's body: an empty CDS response.
var floorFirst = func() []byte {
	b, _ := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "1", TypeUrl: resource.Cluster.URL})
	return b
}()

// waitStreams waits until n streams are registered.
func (f *floorADS) waitStreams(tb testing.TB, n int) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		got := len(f.streams)
		f.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d streams registered", got, n)
		}
	}
}

// push sends body with nonce to every stream, one sender per core.
func (f *floorADS) push(body []byte, nonce string) {
	f.mu.Lock()
	streams := f.streams
	f.mu.Unlock()
	f.acks.Store(0)
	f.want.Store(int64(len(streams)))
	f.nonce.Store(&nonce)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(streams); i += workers {
				streams[i].SendMsg(wire.NewResponse(body, nonce)) //nolint:errcheck // a stream that ended is not ACKed: the push times out
			}
		})
	}
	wg.Wait()
}

// startFloorADS serves ads on 127.0.0.1 with the replica's codec and the
// transport settings a replica gives gRPC by default (keepalive, HTTP/2
// windows), and returns its address.
func startFloorADS(tb testing.TB, ads discoveryv3.AggregatedDiscoveryServiceServer) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg := replica.DefaultConfig()
	g := grpc.NewServer(append(grpcapi.ServerOptions(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.PingTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(1<<20),
	)...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, ads)
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	tb.Cleanup(g.Stop)
	return lis.Addr().String()
}

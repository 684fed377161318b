package relay_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// cluster is the test kit's env (one embedded etcd and a store) and
// replicas serving it, each with its own view, SotW and delta servers and
// Relay on a real gRPC server on 127.0.0.1, as xds-node builds them.
//
// The relay's tests import both internal/xds/sotw and internal/xds/delta: a relay
// forwards either protocol's streams, and the tests must show which
// replica's SotW or delta server ends up holding each stream, with the
// homes set per test (replica.Node builds its relay from the shard ring).
type cluster struct {
	*xdstest.Env

	mu       sync.Mutex // guards replicas
	replicas map[string]*replica
}

// replica is one replica of a cluster.
type replica struct {
	name  string
	addr  string
	view  *view.View
	sotw  *sotw.Server
	delta *delta.Server
	lrs   *lrs.Server
	relay *relay.Relay
	reg   *prometheus.Registry
	grpc  *grpc.Server

	// homes maps node ids to their home replica's name; a node it does
	// not name is homed here. A home not in the cluster is unreachable
	// at the address in gone.
	homes atomic.Pointer[map[string]string]
}

// replicaOption tunes a replica's relay config.
type replicaOption func(*relay.Config)

func newCluster(tb testing.TB) *cluster {
	tb.Helper()
	return &cluster{Env: xdstest.NewEnv(tb, xdstest.Options{}), replicas: map[string]*replica{}}
}

// addReplica starts replica name.
func (c *cluster) addReplica(tb testing.TB, name string, opts ...replicaOption) *replica {
	tb.Helper()
	r := &replica{name: name, reg: prometheus.NewRegistry()}
	r.homes.Store(&map[string]string{})
	r.view = xdstest.StartView(tb, view.Config{Client: c.Client})
	var err error
	if r.delta, err = delta.New(delta.Config{Config: xdsstream.Config{Source: r.view, Registerer: r.reg}}); err != nil {
		tb.Fatal(err)
	}
	if r.sotw, err = sotw.New(sotw.Config{Config: xdsstream.Config{Source: r.view, Registerer: r.reg}}); err != nil {
		tb.Fatal(err)
	}
	cfg := relay.Config{
		Self:       name,
		Home:       func(nodeID string) (string, string, bool) { return c.home(r, nodeID) },
		Registerer: r.reg,
		Rate:       1000,
		Burst:      100,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if r.relay, err = relay.New(cfg); err != nil {
		tb.Fatal(err)
	}
	if r.lrs, err = lrs.New(lrs.Config{Replica: name, Registerer: r.reg}); err != nil {
		tb.Fatal(err)
	}
	r.grpc = grpc.NewServer(append(grpcapi.ServerOptions(), grpc.StreamInterceptor(r.relay.StreamInterceptor()))...)
	hs := health.NewServer()
	grpcapi.Register(r.grpc, grpcapi.Services{SotW: r.sotw, Delta: r.delta, LRS: r.lrs, Health: hs})
	// Cleanups run last in, first out: the relay closes after its server,
	// which stops before its health service.
	tb.Cleanup(func() {
		if err := r.relay.Close(); err != nil {
			tb.Errorf("relay %s: Close: %v", name, err)
		}
	})
	tb.Cleanup(hs.Shutdown)
	r.addr = xdstest.Serve(tb, r.grpc)
	c.mu.Lock()
	c.replicas[name] = r
	c.mu.Unlock()
	return r
}

// gone is the address of a closed listener: a home that cannot be
// reached.
var gone = func() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}()

// home is replica r's Config.Home.
func (c *cluster) home(r *replica, nodeID string) (string, string, bool) {
	name, ok := (*r.homes.Load())[nodeID]
	if !ok || name == r.name {
		return r.name, r.addr, true
	}
	c.mu.Lock()
	h := c.replicas[name]
	c.mu.Unlock()
	if h == nil {
		return name, gone, false
	}
	return name, h.addr, false
}

// setHomes replaces r's map of homes.
func (r *replica) setHomes(m map[string]string) { r.homes.Store(&m) }

// apply writes clusters to etcd in one transaction and returns the
// revision, once every replica's view has it.
func (c *cluster) apply(tb testing.TB, clusters ...*clusterv3.Cluster) int64 {
	tb.Helper()
	var puts []store.Put
	for _, m := range clusters {
		puts = append(puts, xdstest.Put(tb, resource.Cluster, store.DefaultScope, m))
	}
	rev := c.Apply(tb, puts)
	c.mu.Lock()
	var views []*view.View
	for _, r := range c.replicas {
		views = append(views, r.view)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	for _, v := range views {
		if _, err := v.WaitRevision(ctx, rev); err != nil {
			tb.Fatal(err)
		}
	}
	return rev
}

func clusters(n int) []*clusterv3.Cluster {
	out := make([]*clusterv3.Cluster, n)
	for i := range out {
		out[i] = xdstest.Cluster(fmt.Sprintf("c%03d", i), 1000)
	}
	return out
}

// adsStream opens a SotW ADS stream on a new connection to addr.
func adsStream(t *testing.T, addr string) *xdstest.SotWStream {
	t.Helper()
	return xdstest.OpenSotW(t, xdstest.Dial(t, addr))
}

// deltaADSStream opens a delta ADS stream on a new connection to addr.
func deltaADSStream(t *testing.T, addr string) *xdstest.DeltaStream {
	t.Helper()
	return xdstest.OpenDelta(t, xdstest.Dial(t, addr))
}

func node(id string) *corev3.Node { return xdstest.Node(id, "test") }

// cdsRequest is a wildcard CDS request from node id.
func cdsRequest(id string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: node(id), TypeUrl: resource.Cluster.URL}
}

// deltaCDSRequest is a wildcard delta CDS request from node id.
func deltaCDSRequest(id string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{Node: node(id), TypeUrl: resource.Cluster.URL}
}

// waitFor polls cond until it holds, failing the test after the long
// timeout.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	xdstest.WaitFor(tb, what, func() (bool, string) { return cond(), "" })
}

// metric returns the value of the unlabelled counter or gauge name in
// reg, 0 if absent.
func metric(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// streamsOf returns r's registered streams of node id.
func streamsOf(r *replica, id string) []relay.StreamInfo {
	var out []relay.StreamInfo
	for _, s := range r.relay.Streams() {
		if s.NodeID == id {
			out = append(out, s)
		}
	}
	return out
}

// sotwNodes returns the node ids of r's SotW streams.
func sotwNodes(r *replica) []string {
	var out []string
	for _, s := range r.sotw.Streams() {
		out = append(out, s.NodeID)
	}
	return out
}

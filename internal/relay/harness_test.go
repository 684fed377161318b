package relay_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/delta"
	"github.com/legation-io/legation/internal/grpcapi"
	"github.com/legation-io/legation/internal/relay"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
	"github.com/legation-io/legation/internal/xdsstream"
)

// Two timeouts: a long one for what must happen, a short one for what must
// not.
const (
	defaultTestTimeout      = 20 * time.Second
	defaultTestShortTimeout = 300 * time.Millisecond
)

// cluster is one embedded etcd and replicas serving it, each with its own
// view, SotW and delta servers and Relay on a real gRPC server on
// 127.0.0.1, as xds-node builds them.
type cluster struct {
	client *clientv3.Client
	store  *store.Store

	mu       sync.Mutex // guards replicas
	replicas map[string]*replica
}

// replica is one replica of a cluster.
type replica struct {
	name  string
	addr  string
	view  *store.View
	sotw  *ads.Server
	delta *delta.Server
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
	etcd := storetest.Start(tb, storetest.Options{})
	client := etcd.Client(tb)
	c := &cluster{client: client, replicas: map[string]*replica{}}
	var err error
	if c.store, err = store.New(store.Config{Client: client}); err != nil {
		tb.Fatal(err)
	}
	return c
}

// startView runs a view of etcd until tb ends and waits for its load.
func startView(tb testing.TB, client *clientv3.Client) *store.View {
	tb.Helper()
	view, err := store.NewView(store.ViewConfig{Client: client})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); view.Run(ctx) }() //nolint:errcheck // nil on cancel
	tb.Cleanup(func() { cancel(); <-done })
	select {
	case <-view.Ready():
	case <-time.After(defaultTestTimeout):
		tb.Fatal("view not ready")
	}
	return view
}

// addReplica starts replica name.
func (c *cluster) addReplica(tb testing.TB, name string, opts ...replicaOption) *replica {
	tb.Helper()
	r := &replica{name: name, reg: prometheus.NewRegistry()}
	r.homes.Store(&map[string]string{})
	r.view = startView(tb, c.client)
	var err error
	if r.delta, err = delta.New(delta.Config{Config: xdsstream.Config{Source: r.view, Registerer: r.reg}}); err != nil {
		tb.Fatal(err)
	}
	if r.sotw, err = ads.New(ads.Config{Config: xdsstream.Config{Source: r.view, Registerer: r.reg}}); err != nil {
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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r.addr = lis.Addr().String()
	r.grpc = grpc.NewServer(append(grpcapi.ServerOptions(), grpc.StreamInterceptor(r.relay.StreamInterceptor()))...)
	grpcapi.Register(r.grpc, grpcapi.Services{SotW: r.sotw, Delta: r.delta})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(r.grpc, hs)
	served := make(chan struct{})
	go func() { defer close(served); r.grpc.Serve(lis) }() //nolint:errcheck // ends with Stop
	// Cleanups run last in, first out: the relay closes after its server.
	tb.Cleanup(func() {
		if err := r.relay.Close(); err != nil {
			tb.Errorf("relay %s: Close: %v", name, err)
		}
	})
	tb.Cleanup(func() { r.grpc.Stop(); <-served; hs.Shutdown() })
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
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var puts []store.Put
	for _, m := range clusters {
		body, err := resource.Marshal(resource.Cluster, m)
		if err != nil {
			tb.Fatal(err)
		}
		puts = append(puts, store.Put{Key: store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: m.GetName()}, Body: body})
	}
	plan, err := c.store.MakePlan(ctx, store.PlanRequest{Puts: puts})
	if err != nil {
		tb.Fatalf("plan: %v", err)
	}
	res, err := c.store.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		tb.Fatalf("apply: %v", err)
	}
	c.mu.Lock()
	var views []*store.View
	for _, r := range c.replicas {
		views = append(views, r.view)
	}
	c.mu.Unlock()
	for _, v := range views {
		if _, err := v.WaitRevision(ctx, res.Revision); err != nil {
			tb.Fatal(err)
		}
	}
	return res.Revision
}

// edsCluster is an EDS cluster; ms varies its content.
func edsCluster(name string, ms int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(ms) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			ServiceName: name,
			EdsConfig:   &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3},
		},
	}
}

func clusters(n int) []*clusterv3.Cluster {
	out := make([]*clusterv3.Cluster, n)
	for i := range out {
		out[i] = edsCluster(fmt.Sprintf("c%03d", i), 1000)
	}
	return out
}

// dial returns a client connection to addr, closed when tb ends.
func dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// stream is a client xDS stream, SotW or delta, with a receive goroutine.
type stream[Req, Resp any] struct {
	t      *testing.T
	s      grpc.BidiStreamingClient[Req, Resp]
	recv   chan result[Resp]
	cancel context.CancelFunc
}

type result[Resp any] struct {
	resp *Resp
	err  error
}

type (
	sotwStream  = stream[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	deltaStream = stream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
)

// open opens a stream with f on a new connection to addr; it is cancelled
// when t ends.
func open[Req, Resp any](t *testing.T, addr string, f func(context.Context, *grpc.ClientConn) (grpc.BidiStreamingClient[Req, Resp], error)) *stream[Req, Resp] {
	t.Helper()
	cc := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := f(ctx, cc)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	x := &stream[Req, Resp]{t: t, s: s, recv: make(chan result[Resp], 100), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := s.Recv()
			x.recv <- result[Resp]{r, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return x
}

func adsStream(t *testing.T, addr string) *sotwStream {
	return open(t, addr, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	})
}

func deltaADSStream(t *testing.T, addr string) *deltaStream {
	return open(t, addr, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse], error) {
		return discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	})
}

func (x *stream[Req, Resp]) send(r *Req) {
	x.t.Helper()
	if err := x.s.Send(r); err != nil {
		x.t.Fatalf("send: %v", err)
	}
}

// expect waits for the next response and fails the test without one.
func (x *stream[Req, Resp]) expect() *Resp {
	x.t.Helper()
	select {
	case r := <-x.recv:
		if r.err != nil {
			x.t.Fatalf("stream ended: %v", r.err)
		}
		return r.resp
	case <-time.After(defaultTestTimeout):
		x.t.Fatal("no response")
		return nil
	}
}

// expectNone fails the test if the stream gets a response or ends within
// the short timeout.
func (x *stream[Req, Resp]) expectNone() {
	x.t.Helper()
	select {
	case r := <-x.recv:
		x.t.Fatalf("unexpected response %v or end %v", r.resp, r.err)
	case <-time.After(defaultTestShortTimeout):
	}
}

// expectErr waits for the stream to end and returns its error.
func (x *stream[Req, Resp]) expectErr() error {
	x.t.Helper()
	for {
		select {
		case r := <-x.recv:
			if r.err != nil {
				return r.err
			}
		case <-time.After(defaultTestTimeout):
			x.t.Fatal("stream did not end")
			return nil
		}
	}
}

func node(id string) *corev3.Node { return &corev3.Node{Id: id, Cluster: "test"} }

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
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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

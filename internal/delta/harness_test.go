package delta_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	clusterv3svc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3svc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/delta"
	"github.com/legation-io/legation/internal/grpcapi"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
	"github.com/legation-io/legation/internal/xdsstream"
)

const (
	defaultTestTimeout      = 20 * time.Second
	defaultTestShortTimeout = 300 * time.Millisecond
)

// env is a real embedded etcd, a real view, and the delta server behind
// the ADS service on a real gRPC server on 127.0.0.1.
type env struct {
	client *clientv3.Client
	store  *store.Store
	view   *store.View
	srv    *delta.Server
	reg    *prometheus.Registry
	addr   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	etcd := storetest.Start(t, storetest.Options{})
	e := &env{client: etcd.Client(t), reg: prometheus.NewRegistry()}
	var err error
	if e.store, err = store.New(store.Config{Client: e.client}); err != nil {
		t.Fatal(err)
	}
	if e.view, err = store.NewView(store.ViewConfig{Client: e.client}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.view.Run(ctx) }() //nolint:errcheck // nil on cancel
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-e.view.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("view not ready")
	}
	if e.srv, err = delta.New(delta.Config{Config: xdsstream.Config{Source: e.view, Registerer: e.reg, CatchupTimeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// SotW too, for the equivalence of the two protocols.
	sotw, err := ads.New(ads.Config{Config: xdsstream.Config{Source: e.view}})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{SotW: sotw, Delta: e.srv})
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	e.addr = lis.Addr().String()
	return e
}

func (e *env) apply(t *testing.T, puts []store.Put, deletes ...store.Key) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	plan, err := e.store.MakePlan(ctx, store.PlanRequest{Puts: puts, Deletes: deletes})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	res, err := e.store.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, err := e.view.WaitRevision(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	return res.Revision
}

func put(t testing.TB, typ *resource.Type, scope string, m proto.Message) store.Put {
	t.Helper()
	body, err := resource.Marshal(typ, m)
	if err != nil {
		t.Fatal(err)
	}
	return store.Put{Key: store.Key{Type: typ, Scope: scope, Name: typ.NameOf(m)}, Body: body}
}

func key(typ *resource.Type, name string) store.Key {
	return store.Key{Type: typ, Scope: store.DefaultScope, Name: name}
}

func cluster(name string, ms int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(ms) * time.Millisecond),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
	}
}

// deltaStream is a raw delta ADS stream.
type deltaStream struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	recv   chan deltaResult
}

type deltaResult struct {
	resp *discoveryv3.DeltaDiscoveryResponse
	err  error
}

func (e *env) deltaADS(t *testing.T) *deltaStream {
	t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := &deltaStream{t: t, stream: s, recv: make(chan deltaResult, 100)}
	go func() {
		for {
			r, err := s.Recv()
			d.recv <- deltaResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	return d
}

func (d *deltaStream) send(r *discoveryv3.DeltaDiscoveryRequest) {
	d.t.Helper()
	if err := d.stream.Send(r); err != nil {
		d.t.Fatalf("send: %v", err)
	}
}

func (d *deltaStream) expect() *discoveryv3.DeltaDiscoveryResponse {
	d.t.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.t.Fatalf("stream ended: %v", r.err)
		}
		return r.resp
	case <-time.After(defaultTestTimeout):
		d.t.Fatal("no response")
		return nil
	}
}

func (d *deltaStream) expectNone() {
	d.t.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.t.Fatalf("stream ended: %v", r.err)
		}
		d.t.Fatalf("unexpected response: %v", r.resp)
	case <-time.After(defaultTestShortTimeout):
	}
}

func (d *deltaStream) expectErr() error {
	d.t.Helper()
	for {
		select {
		case r := <-d.recv:
			if r.err != nil {
				return r.err
			}
		case <-time.After(defaultTestTimeout):
			d.t.Fatal("stream did not end")
			return nil
		}
	}
}

// ack acknowledges resp.
func (d *deltaStream) ack(resp *discoveryv3.DeltaDiscoveryResponse) {
	d.t.Helper()
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

// versions maps the names of resp's resources to their versions.
func versions(resp *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.GetResources() {
		out[r.GetName()] = r.GetVersion()
	}
	return out
}

// newEnvTB is newEnv for fuzz targets, which have a testing.F rather than
// a *testing.T: the same real embedded etcd, view, delta server and gRPC
// server on 127.0.0.1, stopped when tb ends.
func newEnvTB(tb testing.TB, catchup time.Duration) *env {
	tb.Helper()
	etcd := storetest.Start(tb, storetest.Options{})
	e := &env{client: etcd.Client(tb), reg: prometheus.NewRegistry()}
	var err error
	if e.store, err = store.New(store.Config{Client: e.client}); err != nil {
		tb.Fatal(err)
	}
	if e.view, err = store.NewView(store.ViewConfig{Client: e.client}); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.view.Run(ctx) }() //nolint:errcheck // nil on cancel
	tb.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-e.view.Ready():
	case <-time.After(defaultTestTimeout):
		tb.Fatal("view not ready")
	}
	if e.srv, err = delta.New(delta.Config{Config: xdsstream.Config{Source: e.view, Registerer: e.reg, CatchupTimeout: catchup}}); err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	// SotW too, for the equivalence of the two protocols.
	sotw, err := ads.New(ads.Config{Config: xdsstream.Config{Source: e.view}})
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{SotW: sotw, Delta: e.srv})
	served := make(chan struct{})
	go func() { defer close(served); g.Serve(lis) }() //nolint:errcheck // ends with Stop
	tb.Cleanup(func() { g.Stop(); <-served })
	e.addr = lis.Addr().String()
	return e
}

// dial returns a client connection to e's gRPC server, closed when t ends.
func (e *env) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// newDeltaStream wraps a raw delta stream (of ADS or of a per-type
// service) with a receive goroutine.
func newDeltaStream(t *testing.T, s grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) *deltaStream {
	d := &deltaStream{t: t, stream: s, recv: make(chan deltaResult, 100)}
	go func() {
		for {
			r, err := s.Recv()
			d.recv <- deltaResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	return d
}

// deltaCDS opens a raw stream of the per-type DeltaClusters service.
func (e *env) deltaCDS(t *testing.T) *deltaStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := clusterv3svc.NewClusterDiscoveryServiceClient(e.dial(t)).DeltaClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return newDeltaStream(t, s)
}

// deltaEDS opens a raw stream of the per-type DeltaEndpoints service.
func (e *env) deltaEDS(t *testing.T) *deltaStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := endpointv3svc.NewEndpointDiscoveryServiceClient(e.dial(t)).DeltaEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return newDeltaStream(t, s)
}

// nack rejects resp with msg.
func (d *deltaStream) nack(resp *discoveryv3.DeltaDiscoveryResponse, msg string) {
	d.t.Helper()
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}})
}

// expectType is expect, checking the response's type.
func (d *deltaStream) expectType(typ *resource.Type) *discoveryv3.DeltaDiscoveryResponse {
	d.t.Helper()
	resp := d.expect()
	if resp.GetTypeUrl() != typ.URL {
		d.t.Fatalf("got a response of type %s, want %s: %v", resp.GetTypeUrl(), typ.URL, resp)
	}
	return resp
}

// sotwStream is a raw SotW ADS stream.
type sotwStream struct {
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	recv   chan sotwResult
}

type sotwResult struct {
	resp *discoveryv3.DiscoveryResponse
	err  error
}

// sotwADS opens a raw SotW stream of StreamAggregatedResources on the
// same server.
func (e *env) sotwADS(t *testing.T) *sotwStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(e.dial(t)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := &sotwStream{stream: s, recv: make(chan sotwResult, 100)}
	go func() {
		for {
			r, err := s.Recv()
			x.recv <- sotwResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	return x
}

// endpoints is a ClusterLoadAssignment for name with one endpoint per
// port on 127.0.0.1.
func endpoints(name string, ports ...uint32) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, 0, len(ports))
	for _, p := range ports {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p}}}},
			}},
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}

// routeConfig is a route configuration sending everything to cluster.
func routeConfig(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name:    name + "-vh",
		Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// scopedKey is key in scope.
func scopedKey(typ *resource.Type, scope, name string) store.Key {
	return store.Key{Type: typ, Scope: scope, Name: name}
}

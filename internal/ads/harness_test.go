package ads_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/grpcapi"
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

// env is a real embedded etcd, a real view on it, and an ads.Server on a
// real gRPC server on 127.0.0.1.
type env struct {
	etcd   *storetest.Etcd
	client *clientv3.Client
	store  *store.Store
	view   *store.View
	srv    *ads.Server
	reg    *prometheus.Registry
	addr   string
}

type envOption func(*ads.Config)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	e := &env{etcd: storetest.Start(t, storetest.Options{MaxTxnOps: 10000, MaxRequestBytes: 16 << 20}), reg: prometheus.NewRegistry()}
	e.client = e.etcd.Client(t)
	var err error
	if e.store, err = store.New(store.Config{Client: e.client, MaxTxnOps: 10000, MaxRequestBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if e.view, err = store.NewView(store.ViewConfig{Client: e.client, Registerer: e.reg}); err != nil {
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
	cfg := ads.Config{Config: xdsstream.Config{Source: e.view, Registerer: e.reg, CatchupTimeout: time.Second}}
	for _, o := range opts {
		o(&cfg)
	}
	if e.srv, err = ads.New(cfg); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(grpcapi.ServerOptions(), grpc.MaxRecvMsgSize(1<<20))...)
	grpcapi.Register(g, grpcapi.Services{SotW: e.srv})
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	e.addr = lis.Addr().String()
	return e
}

// apply writes puts and deletes in scope "default" (or the put's own
// scope) in one transaction and returns the revision.
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

// cluster is an EDS cluster over ADS; ms varies its content.
func cluster(name string, ms int64) *clusterv3.Cluster {
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

// endpoints is a ClusterLoadAssignment with one locality of the given
// ports on 127.0.0.1.
func endpoints(name string, ports ...uint32) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, 0, len(ports))
	for _, p := range ports {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p}}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality:            &corev3.Locality{Zone: "z1"},
		LbEndpoints:         lbs,
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}}}
}

// apiListener is a listener for proxyless gRPC: an HCM taking route
// configuration routeName over ADS. withRouter false leaves out the router
// filter, which grpc-go NACKs.
func apiListener(t testing.TB, name, routeName string, withRouter bool) *listenerv3.Listener {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: routeName,
			ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3},
		}},
	}
	if withRouter {
		router, err := anypb.New(&routerv3.Router{})
		if err != nil {
			t.Fatal(err)
		}
		hcm.HttpFilters = []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}
	}
	a, err := anypb.New(hcm)
	if err != nil {
		t.Fatal(err)
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: a}}
}

// routeConfig routes every path of host domain to cluster.
func routeConfig(name, domain, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name:    name + "-vh",
		Domains: []string{domain},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// xdsStream is a raw SotW stream: what a test sends and receives exactly.
type xdsStream struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	recv   chan recvResult
	cancel context.CancelFunc
}

type recvResult struct {
	resp *discoveryv3.DiscoveryResponse
	err  error
}

func (e *env) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// adsStream opens an ADS stream on a new connection.
func (e *env) adsStream(t *testing.T) *xdsStream {
	t.Helper()
	cc := e.conn(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return newXDSStream(t, s, cancel)
}

func newXDSStream(t *testing.T, s grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], cancel context.CancelFunc) *xdsStream {
	x := &xdsStream{t: t, stream: s, recv: make(chan recvResult, 100), cancel: cancel}
	go func() {
		for {
			r, err := s.Recv()
			x.recv <- recvResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return x
}

func (x *xdsStream) send(r *discoveryv3.DiscoveryRequest) {
	x.t.Helper()
	if err := x.stream.Send(r); err != nil {
		x.t.Fatalf("send: %v", err)
	}
}

// expect waits for the next response and fails the test without one.
func (x *xdsStream) expect() *discoveryv3.DiscoveryResponse {
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

// expectNone fails the test if a response arrives within the short
// timeout.
func (x *xdsStream) expectNone() {
	x.t.Helper()
	select {
	case r := <-x.recv:
		if r.err != nil {
			x.t.Fatalf("stream ended: %v", r.err)
		}
		x.t.Fatalf("unexpected response: version %s type %s, %d resources", r.resp.GetVersionInfo(), r.resp.GetTypeUrl(), len(r.resp.GetResources()))
	case <-time.After(defaultTestShortTimeout):
	}
}

// expectErr waits for the stream to end with an error and returns it.
func (x *xdsStream) expectErr() error {
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

// ack acknowledges resp, keeping the given names.
func (x *xdsStream) ack(resp *discoveryv3.DiscoveryResponse, names ...string) {
	x.t.Helper()
	x.send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
}

// names returns the names of the resources in resp, in order.
func names(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	typ, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok {
		t.Fatalf("response of unknown type %q", resp.GetTypeUrl())
	}
	out := make([]string, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		m, err := resource.Unmarshal(typ, a.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, typ.NameOf(m))
	}
	return out
}

func node(id, cluster string) *corev3.Node { return &corev3.Node{Id: id, Cluster: cluster} }

func ver(rev int64) string { return fmt.Sprint(rev) }

// Command gcp-server is the go-control-plane side of xds-loadgen's side by
// side runs (docs/operations/performance.md): a go-control-plane v0.14 snapshot cache
// serving ADS, state of the world and delta, to every node from one
// snapshot, with a control endpoint the load generator writes through and
// the process CPU and RSS on /metrics, as a Legation replica has them.
//
// HTTP (--http-addr):
//
//	POST /seed       {"clusters": [name...], "endpoints": [{"cluster", "addresses", "port"}...], "listeners": N}
//	POST /endpoints  {"cluster", "addresses", "port"}
//	GET  /metrics    Prometheus: process_cpu_seconds_total, process_resident_memory_bytes, go_*
//
// Each POST builds a new snapshot whose version is one more than the last
// and returns {"version": N} once the cache has it: what the responses'
// version_info (SotW) and system_version_info (delta) then say.
//
// It is its own Go module so that Legation's go.mod does not carry
// go-control-plane's server packages.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// oneSnapshot hashes every node to one key: the whole fleet shares one
// snapshot, so one SetSnapshot reaches every stream.
type oneSnapshot struct{}

func (oneSnapshot) ID(*corev3.Node) string { return "all" }

// endpointSet is xds-loadgen's fixture.EndpointSet (internal/testkit/fixture).
type endpointSet struct {
	Cluster   string   `json:"cluster"`
	Addresses []string `json:"addresses"`
	Port      uint32   `json:"port"`
}

// seedRequest is xds-loadgen's fixture.Set (internal/testkit/fixture).
type seedRequest struct {
	Clusters  []string      `json:"clusters"`
	Endpoints []endpointSet `json:"endpoints"`
	Listeners int           `json:"listeners"`
}

// state is the configuration the snapshots are built from.
type state struct {
	cache cachev3.SnapshotCache

	mu        sync.Mutex // guards the fields below, and orders SetSnapshot calls
	version   int64
	clusters  cachev3.Resources // at the version of the last seed
	listeners cachev3.Resources // likewise
	routes    cachev3.Resources // likewise

	endpoints map[string]types.Resource
	order     []string // endpoints' cluster names, in seed order
}

func (s *state) seed(req seedRequest) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clusters := make([]types.Resource, 0, len(req.Clusters))
	for _, c := range req.Clusters {
		clusters = append(clusters, cluster(c))
	}
	if req.Listeners < 0 || (req.Listeners > 0 && len(req.Clusters) == 0) {
		return 0, fmt.Errorf("listeners %d: must be 0, or positive with clusters", req.Listeners)
	}
	var listeners, routes []types.Resource
	for i := range req.Listeners {
		l, err := listener(i)
		if err != nil {
			return 0, err
		}
		listeners = append(listeners, l)
		routes = append(routes, route(i, req.Clusters[i%len(req.Clusters)]))
	}
	v := strconv.FormatInt(s.version+1, 10)
	s.clusters = cachev3.NewResources(v, clusters)
	s.listeners = cachev3.NewResources(v, listeners)
	s.routes = cachev3.NewResources(v, routes)
	s.endpoints = make(map[string]types.Resource, len(req.Endpoints))
	s.order = s.order[:0]
	for _, e := range req.Endpoints {
		if _, ok := s.endpoints[e.Cluster]; !ok {
			s.order = append(s.order, e.Cluster)
		}
		s.endpoints[e.Cluster] = e.loadAssignment()
	}
	return s.publish()
}

func (s *state) setEndpoints(e endpointSet) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.endpoints[e.Cluster]; !ok {
		s.order = append(s.order, e.Cluster)
	}
	s.endpoints[e.Cluster] = e.loadAssignment()
	return s.publish()
}

// publish sets a snapshot of the next version. The clusters keep the
// version of their last seed, so that an endpoint change does not resend
// them (one version for every type, as NewSnapshot makes, would: that is
// not how a fleet's control plane would use the cache). Called with mu
// held.
func (s *state) publish() (int64, error) {
	eps := make([]types.Resource, 0, len(s.order))
	for _, n := range s.order {
		eps = append(eps, s.endpoints[n])
	}
	v := s.version + 1
	snap := &cachev3.Snapshot{}
	snap.Resources[types.Cluster] = s.clusters
	snap.Resources[types.Listener] = s.listeners
	snap.Resources[types.Route] = s.routes
	snap.Resources[types.Endpoint] = cachev3.NewResources(strconv.FormatInt(v, 10), eps)
	if err := snap.Consistent(); err != nil {
		return 0, err
	}
	if err := s.cache.SetSnapshot(context.Background(), "all", snap); err != nil {
		return 0, err
	}
	s.version = v
	return v, nil
}

// listener and route are xds-loadgen's fixture.ListenerResource and
// RouteResource.
func listener(i int) (*listenerv3.Listener, error) {
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     fmt.Sprintf("lg-listener-%05d", i),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: fmt.Sprintf("lg-route-%05d", i), ConfigSource: ads}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name: fmt.Sprintf("lg-listener-%05d", i),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(20000 + i)}}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}}}},
	}, nil
}

func route(i int, cluster string) *routev3.RouteConfiguration {
	name := fmt.Sprintf("lg-route-%05d", i)
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name:    name,
		Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

func cluster(name string) *clusterv3.Cluster {
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: ads},
	}
}

func (e endpointSet) loadAssignment() *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, 0, len(e.Addresses))
	for _, a := range e.Addresses {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: a, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port}}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: e.Cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality:            &corev3.Locality{Zone: "z1"},
		LbEndpoints:         lbs,
		LoadBalancingWeight: wrapperspb.UInt32(1),
	}}}
}

// post decodes a JSON body into a T and answers {"version": N}.
func post[T any](apply func(T) (int64, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var req T
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 256<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		v, err := apply(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"version\":%d}\n", v)
	}
}

func main() {
	xdsAddr := flag.String("xds-addr", "127.0.0.1:18100", "gRPC listen address: ADS, state of the world and delta")
	httpAddr := flag.String("http-addr", "127.0.0.1:18101", "HTTP listen address: POST /seed, POST /endpoints, GET /metrics")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gcp-server: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *xdsAddr, *httpAddr); err != nil {
		log.Printf("gcp-server: %v", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, xdsAddr, httpAddr string) error {
	// ADS mode: a response waits until the request names every resource
	// the snapshot has of its type, as Envoy on ADS expects.
	st := &state{cache: cachev3.NewSnapshotCache(true, oneSnapshot{}, nil), endpoints: map[string]types.Resource{}}
	st.clusters = cachev3.NewResources("0", nil)
	st.listeners = cachev3.NewResources("0", nil)
	st.routes = cachev3.NewResources("0", nil)
	if _, err := st.publish(); err != nil {
		return err
	}
	srv := serverv3.NewServer(ctx, st.cache, nil)
	gs := grpc.NewServer(
		grpc.MaxConcurrentStreams(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/seed", post(st.seed))
	mux.Handle("/endpoints", post(st.setEndpoints))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	xl, err := net.Listen("tcp", xdsAddr)
	if err != nil {
		return fmt.Errorf("--xds-addr: %w", err)
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		xl.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(xl) }()
	go func() { errc <- hs.Serve(hl) }()
	log.Printf("gcp-server: ADS on %s, control and /metrics on http://%s", xl.Addr(), hl.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	gs.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if herr := hs.Shutdown(sctx); herr != nil && !errors.Is(herr, http.ErrServerClosed) && err == nil {
		err = herr
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

package xdstest

import (
	"fmt"
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
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// Put is the store.Put writing m, a resource of typ, in scope.
func Put(tb testing.TB, typ *resource.Type, scope string, m proto.Message) store.Put {
	tb.Helper()
	body, err := resource.Marshal(typ, m)
	if err != nil {
		tb.Fatal(err)
	}
	return store.Put{Key: store.Key{Type: typ, Scope: scope, Name: typ.NameOf(m)}, Body: body}
}

// Key is the key of resource name of typ in the default scope.
func Key(typ *resource.Type, name string) store.Key {
	return store.Key{Type: typ, Scope: store.DefaultScope, Name: name}
}

// ScopedKey is the key of resource name of typ in scope.
func ScopedKey(typ *resource.Type, scope, name string) store.Key {
	return store.Key{Type: typ, Scope: scope, Name: name}
}

// Version is the version_info (and delta system_version_info, and a delta
// resource's version) of etcd revision rev.
func Version(rev int64) string { return fmt.Sprint(rev) }

// Node is an xDS node: id in group (cluster) cluster.
func Node(id, cluster string) *corev3.Node { return &corev3.Node{Id: id, Cluster: cluster} }

// adsSource is a config source pointing at the ADS stream itself.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
}

// Cluster is an EDS cluster whose endpoints (service name: its own name)
// come over ADS. ms is its connect timeout in milliseconds, which makes
// versions of it differ; 0 leaves it unset (Envoy's default), as a zero
// timeout breaks the proto's rules and the store refuses it.
func Cluster(name string, ms int64) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: adsSource()},
	}
	if ms != 0 {
		c.ConnectTimeout = durationpb.New(time.Duration(ms) * time.Millisecond)
	}
	return c
}

// Endpoints is the ClusterLoadAssignment of cluster name: one endpoint on
// 127.0.0.1 per port, in one locality (zone z1). The locality and the
// endpoints have weight 1: grpc-go ignores a locality without one.
func Endpoints(name string, ports ...uint32) *endpointv3.ClusterLoadAssignment {
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

// APIListener is a listener for proxyless gRPC: an HTTP connection manager
// taking route configuration routeName over ADS (RDS). withRouter false
// leaves out the router filter, which grpc-go NACKs.
func APIListener(tb testing.TB, name, routeName string, withRouter bool) *listenerv3.Listener {
	tb.Helper()
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:     name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: routeName, ConfigSource: adsSource()}},
	}
	if withRouter {
		router, err := anypb.New(&routerv3.Router{})
		if err != nil {
			tb.Fatal(err)
		}
		hcm.HttpFilters = []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}
	}
	a, err := anypb.New(hcm)
	if err != nil {
		tb.Fatal(err)
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: a}}
}

// Route is route configuration name routing every path of host domain
// ("*": any) to cluster, in one virtual host name-vh.
func Route(name, domain, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name:    name + "-vh",
		Domains: []string{domain},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// Runtime is the runtime layer name holding key = value.
func Runtime(name, key, value string) *runtimev3.Runtime {
	return &runtimev3.Runtime{Name: name, Layer: &structpb.Struct{Fields: map[string]*structpb.Value{key: structpb.NewStringValue(value)}}}
}

// Names returns the names of the resources of a SotW response, in order;
// each must decode as the response's type.
func Names(tb testing.TB, resp *discoveryv3.DiscoveryResponse) []string {
	tb.Helper()
	typ, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok {
		tb.Fatalf("response of unknown type %q", resp.GetTypeUrl())
	}
	out := make([]string, 0, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		m, err := resource.Unmarshal(typ, a.GetValue())
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, typ.NameOf(m))
	}
	return out
}

// Versions maps the names of the resources of a delta response to their
// versions.
func Versions(resp *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.GetResources() {
		out[r.GetName()] = r.GetVersion()
	}
	return out
}

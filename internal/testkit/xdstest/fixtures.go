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
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// Put is the store.Put writing m, a resource of typ, in scope
// (fixture.Put); it fails tb if m does not marshal.
func Put(tb testing.TB, typ *resource.Type, scope string, m proto.Message) store.Put {
	tb.Helper()
	p, err := fixture.Put(typ, scope, m)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// PutNamed is fixture.PutNamed; it fails tb if m does not marshal.
func PutNamed(tb testing.TB, typ *resource.Type, scope, name string, m proto.Message) store.Put {
	tb.Helper()
	p, err := fixture.PutNamed(typ, scope, name, m)
	if err != nil {
		tb.Fatal(err)
	}
	return p
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

// Cluster is fixture.Cluster with a connect timeout of ms milliseconds,
// which makes versions of it differ; 0 leaves it unset.
func Cluster(name string, ms int64) *clusterv3.Cluster {
	return fixture.Cluster(name, time.Duration(ms)*time.Millisecond)
}

// Endpoints is the ClusterLoadAssignment of cluster name: one endpoint on
// 127.0.0.1 per port (fixture.LoadAssignment).
func Endpoints(name string, ports ...uint32) *endpointv3.ClusterLoadAssignment {
	return fixture.LoadAssignment(name, fixture.Loopback(ports...)...)
}

// APIListener is fixture.APIListener; it fails tb if the listener does not
// build.
func APIListener(tb testing.TB, name, routeName string, withRouter bool) *listenerv3.Listener {
	tb.Helper()
	l, err := fixture.APIListener(name, routeName, withRouter)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// Route is route configuration name routing every path of host domain
// ("*": any) to cluster, in one virtual host name-vh.
func Route(name, domain, cluster string) *routev3.RouteConfiguration {
	return fixture.Route(name, name+"-vh", domain, cluster)
}

// Runtime is the runtime layer name holding key = value.
func Runtime(name, key, value string) *runtimev3.Runtime {
	return fixture.Runtime(name, key, value)
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

// ConnectTimeoutMS is the connect timeout, in milliseconds, of the
// cluster a carries (see Cluster).
func ConnectTimeoutMS(tb testing.TB, a *anypb.Any) int64 {
	tb.Helper()
	m, err := resource.Unmarshal(resource.Cluster, a.GetValue())
	if err != nil {
		tb.Fatalf("not a cluster: %v", err)
	}
	return m.(*clusterv3.Cluster).GetConnectTimeout().AsDuration().Milliseconds()
}

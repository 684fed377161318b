package delta_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// The conformance tests check the delta rules of xds-protocol.rst
// ("Incremental xDS") and docs/design.md (promises 2, 3, 4, 6, 7) one rule per
// test, on raw streams: what must be sent with expect, what must not with
// expectNone.

func v(rev int64) string { return strconv.FormatInt(rev, 10) }

func listener(name, stat string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, StatPrefix: stat}
}

// checkResp fails unless resp carries exactly the resources (name to
// version) and removed_resources wanted.
func checkResp(t *testing.T, what string, resp *discoveryv3.DeltaDiscoveryResponse, want map[string]string, wantRemoved ...string) {
	t.Helper()
	if want == nil {
		want = map[string]string{}
	}
	if diff := cmp.Diff(want, xdstest.Versions(resp)); diff != "" {
		t.Errorf("%s: resources (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(wantRemoved, resp.GetRemovedResources(), cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("%s: removed_resources (-want +got):\n%s", what, diff)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// connectTimeoutOf decodes the cluster named name in resp and returns its
// connect timeout in ms.
func connectTimeoutOf(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse, name string) int64 {
	t.Helper()
	for _, r := range resp.GetResources() {
		if r.GetName() != name {
			continue
		}
		c := new(clusterv3.Cluster)
		if err := proto.Unmarshal(r.GetResource().GetValue(), c); err != nil {
			t.Fatal(err)
		}
		return c.GetConnectTimeout().AsDuration().Milliseconds()
	}
	t.Fatalf("no %s in %v", name, resp)
	return 0
}

// streamStatus polls e's delta streams until the one of node id satisfies
// ok, and returns it.
func streamStatus(t *testing.T, e *env, id string, ok func(delta.StreamStatus) bool) delta.StreamStatus {
	t.Helper()
	deadline := time.Now().Add(xdstest.Timeout)
	var last []delta.StreamStatus
	for time.Now().Before(deadline) {
		last = e.srv.Streams()
		for _, s := range last {
			if s.NodeID == id && ok(s) {
				return s
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no stream of node %q in the wanted state; streams: %+v", id, last)
	return delta.StreamStatus{}
}

func typeStatus(s delta.StreamStatus, typ *resource.Type) *delta.TypeStatus {
	if ts := s.Types[typ.Name]; ts != nil {
		return ts
	}
	return &delta.TypeStatus{}
}

// Legacy wildcard: the first request of a LDS/CDS-like type with no names
// subscribes to everything; of another type it subscribes to nothing.
func TestDeltaLegacyWildcard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "legacy wildcard CDS", resp, map[string]string{"a": v(r1), "b": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS with no names is not a wildcard", resp, nil)
	s.Ack(resp)
	r2 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 2)),
	})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "a new cluster", resp, map[string]string{"c": v(r2)})
	s.Ack(resp)
	s.ExpectNone() // the endpoints are not subscribed
}

// Explicit "*" subscribes to everything, on any type; unsubscribing "*"
// stops it. Here on the per-type DeltaEndpoints service.
func TestDeltaExplicitWildcard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 1)),
	})
	s := e.deltaEDS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, ResourceNamesSubscribe: []string{"*"}})
	resp := s.ExpectType(resource.Endpoint)
	checkResp(t, "*", resp, map[string]string{"a": v(r1), "b": v(r1)})
	s.Ack(resp)
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c", 1))})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "a new resource under *", resp, map[string]string{"c": v(r2)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"*"}})
	s.ExpectNone()
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 2))})
	s.ExpectNone() // no longer subscribed
}

// Wildcard plus names: "*" and explicit names together; an explicit name
// that does not exist is removed; unsubscribing an explicit name that the
// wildcard also covers keeps it.
func TestDeltaWildcardPlusNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
		ResourceNamesSubscribe: []string{"*", "a", "x"}})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "* + a + x", resp, map[string]string{"a": v(r1), "b": v(r1)}, "x")
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a"}})
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 2))})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "a under * after unsubscribing the name a", resp, map[string]string{"a": v(r2)})
	s.Ack(resp)
	r3 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("x", 1))})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "x created", resp, map[string]string{"x": v(r3)})
}

// Named subscriptions may be added and removed at any time; each
// subscribe is answered with the new names only, an unsubscribe with
// nothing, and an unsubscribed resource's changes are not sent.
func TestDeltaNamedSubscribeUnsubscribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp := s.ExpectType(resource.Endpoint)
	checkResp(t, "subscribe a", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"b"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "subscribe b", resp, map[string]string{"b": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{"a"}})
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 2)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 2)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c", 2)),
	})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "a, b, c changed; only b subscribed", resp, map[string]string{"b": v(r2)})
	s.Ack(resp)
	s.ExpectNone()
	// Subscribing again sends the current version.
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "subscribe a again", resp, map[string]string{"a": v(r2)})
}

// Unsubscribing names that were never subscribed is ignored, on a named
// and on a wildcard subscription.
func TestDeltaPhantomUnsubscribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{"b", "never"}})
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a", "never"}})
	s.ExpectNone()
	r2 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 2)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 2)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 2)),
	})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "CDS after phantom unsubscribes", resp, map[string]string{"a": v(r2)})
	s.Ack(resp)
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS after phantom unsubscribes", resp, map[string]string{"a": v(r2)})
	s.Ack(resp)
	s.ExpectNone()
}

// A name asked for that does not exist is listed in removed_resources,
// once; created later it is sent; asked again it is listed again.
func TestDeltaAbsentNameRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", "nope"}})
	resp := s.ExpectType(resource.Endpoint)
	checkResp(t, "a and nope", resp, map[string]string{"a": v(r1)}, "nope")
	s.Ack(resp)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("nope", 1))}) // another type
	s.ExpectNone()
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"nope"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "nope asked again", resp, nil, "nope")
	s.Ack(resp)
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("nope", 1))})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "nope created", resp, map[string]string{"nope": v(r2)})
	s.Ack(resp)
	e.Apply(t, nil, xdstest.Key(resource.Endpoint, "nope"))
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "nope deleted", resp, nil, "nope")
	s.Ack(resp)
	s.ExpectNone()
}

// A deletion is sent as removed_resources, here on the per-type
// DeltaClusters service.
func TestDeltaDeletionRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
	})
	s := e.deltaCDS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}}) // no type_url: the service's
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"a": v(r1), "b": v(r1)})
	s.Ack(resp)
	r2 := e.Apply(t, nil, xdstest.Key(resource.Cluster, "a"))
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "a deleted", resp, nil, "a")
	if resp.GetSystemVersionInfo() != v(r2) {
		t.Fatalf("system_version_info %q, want %d", resp.GetSystemVersionInfo(), r2)
	}
	s.Ack(resp)
	s.ExpectNone()
	st := streamStatus(t, e, "n1", func(delta.StreamStatus) bool { return true })
	if st.Protocol != "delta-cluster" {
		t.Errorf("protocol %q, want delta-cluster", st.Protocol)
	}
}

// A node sees its group's resource over the default one; the default's
// changes are then not sent; when the override disappears the default is
// sent in its place. Another group's resources are never sent.
func TestDeltaScopeOverride(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
	})
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "g1", xdstest.Cluster("a", 2))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "override", resp, map[string]string{"a": v(r2), "b": v(r1)})
	if got := connectTimeoutOf(t, resp, "a"); got != 2 {
		t.Fatalf("a is the default's (%dms), want g1's", got)
	}
	s.Ack(resp)
	r3 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 3))})
	s.ExpectNone() // overridden
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "g2", xdstest.Cluster("b", 9)), xdstest.Put(t, resource.Cluster, "g2", xdstest.Cluster("z", 9))})
	s.ExpectNone() // another group
	e.Apply(t, nil, xdstest.ScopedKey(resource.Cluster, "g1", "a"))
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "override deleted", resp, map[string]string{"a": v(r3)})
	if got := connectTimeoutOf(t, resp, "a"); got != 3 {
		t.Fatalf("a is %dms, want the default's 3ms", got)
	}
	s.Ack(resp)
	r5 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "g1", xdstest.Cluster("c", 5))})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "group-only resource", resp, map[string]string{"c": v(r5)})
	s.Ack(resp)
	e.Apply(t, nil, xdstest.ScopedKey(resource.Cluster, "g1", "c"))
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "group-only resource deleted", resp, nil, "c")
}

// Reconnect: initial_resource_versions are honoured, for wildcard and for
// named subscriptions: what the client holds at the current version is not
// resent, what changed is sent, what is gone is removed.
func TestDeltaReconnectInitialVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c", 1)),
	})
	r2 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 2)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 2)),
	})
	e.Apply(t, nil, xdstest.Key(resource.Cluster, "c"), xdstest.Key(resource.Endpoint, "c"))

	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"a": v(r1), "b": v(r1), "c": v(r1), "d": v(r1)}})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS reconnect", resp, map[string]string{"b": v(r2)}, "c", "d")
	s.Ack(resp)
	// Envoy resubscribes every name it wants on a new stream, presenting
	// what it holds: only what changed is sent.
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", "b", "c"},
		InitialResourceVersions: map[string]string{"a": v(r1), "b": v(r1), "c": v(r1)}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS reconnect", resp, map[string]string{"b": v(r2)}, "c")
	s.Ack(resp)
	s.ExpectNone()

	// Holding everything at the current version: nothing at all is sent.
	s2 := e.deltaCDS(t)
	s2.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n2"},
		InitialResourceVersions: map[string]string{"a": v(r1), "b": v(r2)}})
	s2.ExpectNone()
	r4 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 4))})
	resp = s2.ExpectType(resource.Cluster)
	checkResp(t, "a change after a silent reconnect", resp, map[string]string{"a": v(r4)})
	s.ExpectType(resource.Cluster) // the first stream too
}

// A name the client explicitly (re)subscribes is always sent, even if the
// server thinks the client holds it at the current version (Envoy can
// forget resources).
func TestDeltaSubscribeResends(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"a": v(r1), "b": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"a"}})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "a subscribed while held", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS a", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS a again", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.ExpectNone()
	// On a new stream, a name subscribed without being presented in
	// initial_resource_versions is sent.
	s2 := e.deltaADS(t)
	s2.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n2"}, TypeUrl: resource.Cluster.URL,
		ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: map[string]string{"a": v(r1)}})
	resp = s2.ExpectType(resource.Cluster)
	checkResp(t, "b not presented", resp, map[string]string{"b": v(r1)})
}

// Responses carry distinct nonces; each request's response_nonce and
// error_detail are tracked per type (an ACK of CDS and a NACK of EDS on
// one stream).
func TestDeltaNoncesPerType(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	cds := s.ExpectType(resource.Cluster)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	eds := s.ExpectType(resource.Endpoint)
	if cds.GetNonce() == "" || eds.GetNonce() == "" || cds.GetNonce() == eds.GetNonce() {
		t.Fatalf("nonces %q and %q: want distinct and non-empty", cds.GetNonce(), eds.GetNonce())
	}
	st := streamStatus(t, e, "n1", func(st delta.StreamStatus) bool {
		return typeStatus(st, resource.Cluster).Outstanding == cds.GetNonce() && typeStatus(st, resource.Endpoint).Outstanding == eds.GetNonce()
	})
	if got := typeStatus(st, resource.Cluster).Resources["a"]; got != (delta.ResourceStatus{VersionSent: v(r1)}) {
		t.Errorf("cluster a before its ACK: %+v", got)
	}
	s.Ack(cds)
	s.Nack(eds, "no thanks")
	st = streamStatus(t, e, "n1", func(st delta.StreamStatus) bool {
		return typeStatus(st, resource.Cluster).SystemVersionAcked == v(r1) && typeStatus(st, resource.Endpoint).LastNack != ""
	})
	c, ep := typeStatus(st, resource.Cluster), typeStatus(st, resource.Endpoint)
	if c.Outstanding != "" || c.NackVersion != "" || c.Resources["a"].VersionAcked != v(r1) {
		t.Errorf("cluster status after ACK: %+v", c)
	}
	if ep.Outstanding != "" || ep.NackVersion != v(r1) || ep.LastNack != "no thanks" || ep.SystemVersionAcked != "" || ep.Resources["a"].VersionAcked != "" {
		t.Errorf("endpoint status after NACK: %+v", ep)
	}
	r2 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 2))})
	eds2 := s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS change after the NACK", eds2, map[string]string{"a": v(r2)})
	if eds2.GetNonce() == eds.GetNonce() || eds2.GetNonce() == cds.GetNonce() {
		t.Fatalf("nonce %q reused", eds2.GetNonce())
	}
	s.Ack(eds2)
	st = streamStatus(t, e, "n1", func(st delta.StreamStatus) bool {
		return typeStatus(st, resource.Endpoint).SystemVersionAcked == v(r2)
	})
	if ep := typeStatus(st, resource.Endpoint); ep.NackVersion != "" || ep.LastNack != "" {
		t.Errorf("an ACK clears the NACK: %+v", ep)
	}
}

// A NACK never causes a resend loop: nothing more is sent for the type
// until what the stream would receive of it changes; a change elsewhere
// in etcd does not count.
func TestDeltaNACKNoLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"a": v(r1), "b": v(r1)})
	s.Nack(resp, "bad cluster")
	s.ExpectNone()
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Cluster, "g2", xdstest.Cluster("a", 7)),
		xdstest.Put(t, resource.Listener, store.DefaultScope, listener("l", "l")),
	})
	s.ExpectNone()
	// The client sends the NACK again (as Envoy may, e.g. with a new
	// subscription of another type): still nothing.
	s.Nack(resp, "bad cluster")
	s.ExpectNone()
	r3 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "g1", xdstest.Cluster("a", 3))})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "a change after the NACK", resp, map[string]string{"a": v(r3)})
	s.Nack(resp, "bad again")
	s.ExpectNone()
	r4 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 4))})
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "another change after the NACK", resp, map[string]string{"b": v(r4)})
	s.Ack(resp)
	s.ExpectNone()
}

// At most one outstanding response per type per stream; changes made while
// one is un-ACKed coalesce into one response with the latest versions.
// Another type is not held back, and a stale nonce is not an ACK.
func TestDeltaOneOutstandingCoalesces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	first := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", first, map[string]string{"a": v(r1), "b": v(r1)})
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 2))})
	r3 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 3))})
	r4 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 4)), xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c", 4))})
	s.ExpectNone()
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Cluster.URL, ResponseNonce: "stale"})
	s.ExpectNone()
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}})
	resp := s.ExpectType(resource.Endpoint) // EDS is not held back by CDS
	checkResp(t, "EDS", resp, map[string]string{"a": v(r1)})
	s.Ack(resp)
	s.Ack(first)
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "coalesced", resp, map[string]string{"a": v(r4), "b": v(r3), "c": v(r4)})
	if resp.GetSystemVersionInfo() != v(r4) {
		t.Errorf("system_version_info %q, want %d", resp.GetSystemVersionInfo(), r4)
	}
	s.Ack(resp)
	s.ExpectNone()
}

// Versions: a resource's version is the decimal etcd mod_revision of its
// key; system_version_info is the view's revision (promise 2).
func TestDeltaVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1))})
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "g1", xdstest.Cluster("b", 1))})
	r3 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Listener, store.DefaultScope, listener("l", "l"))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	want := map[string]string{}
	for _, k := range []store.Key{xdstest.Key(resource.Cluster, "a"), xdstest.ScopedKey(resource.Cluster, "g1", "b")} {
		g, err := e.Client.Get(ctx, e.Store.EtcdKey(k))
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", k, g, err)
		}
		want[k.Name] = v(g.Kvs[0].ModRevision)
	}
	checkResp(t, "versions are mod_revisions", resp, want)
	if resp.GetSystemVersionInfo() != v(r3) {
		t.Fatalf("system_version_info %q, want the view's revision %d", resp.GetSystemVersionInfo(), r3)
	}
}

// Delta streams appear in Streams() (served at /debug/streams) with the
// node, group, protocol and per-resource versions sent and ACKed.
func TestDeltaStreamsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n-status", Cluster: "g1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	st := streamStatus(t, e, "n-status", func(st delta.StreamStatus) bool { return typeStatus(st, resource.Cluster).Outstanding != "" })
	if st.Group != "g1" || st.Protocol != "delta-ads" || st.ConnectedAt.IsZero() {
		t.Errorf("stream: %+v", st)
	}
	if diff := cmp.Diff(&delta.TypeStatus{SystemVersionSent: v(r1), Outstanding: resp.GetNonce(), Wildcard: true, Held: 1,
		Resources: map[string]delta.ResourceStatus{"a": {VersionSent: v(r1)}}}, typeStatus(st, resource.Cluster)); diff != "" {
		t.Errorf("before the ACK (-want +got):\n%s", diff)
	}
	s.Ack(resp)
	st = streamStatus(t, e, "n-status", func(st delta.StreamStatus) bool { return typeStatus(st, resource.Cluster).Outstanding == "" })
	if diff := cmp.Diff(&delta.TypeStatus{SystemVersionSent: v(r1), SystemVersionAcked: v(r1), Wildcard: true, Held: 1,
		Resources: map[string]delta.ResourceStatus{"a": {VersionSent: v(r1), VersionAcked: v(r1)}}}, typeStatus(st, resource.Cluster)); diff != "" {
		t.Errorf("after the ACK (-want +got):\n%s", diff)
	}
	s.Client().CloseSend() //nolint:errcheck // the test only needs the server to see the end
	deadline := time.Now().Add(xdstest.Timeout)
	for len(e.srv.Streams()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("closed stream still listed: %+v", e.srv.Streams())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Malformed requests end the stream with InvalidArgument; the server
// keeps serving.
func TestDeltaBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1))})
	for _, tc := range []struct {
		name string
		open func(testing.TB) *xdstest.DeltaStream
		req  *discoveryv3.DeltaDiscoveryRequest
	}{
		{"ADS without type_url", e.deltaADS, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}}},
		{"ADS with an unknown type", e.deltaADS, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/no.Such"}},
		{"CDS service asked for endpoints", e.deltaCDS, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			s.Send(tc.req)
			if err := s.ExpectErr(); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
	// An unknown type after a good request ends the stream too.
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: "bogus"})
	if err := s.ExpectErr(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	s = e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n2"}, TypeUrl: resource.Cluster.URL})
	checkResp(t, "after bad requests", s.ExpectType(resource.Cluster), map[string]string{"a": v(r1)})
}

// Promise 3: a client presenting a version newer than the view waits for
// it, bounded; then the stream ends with UNAVAILABLE.
func TestDeltaCatchupUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: map[string]string{"a": v(r1 + 1000)}})
	if err := s.ExpectErr(); status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
}

// Make before break on delta ADS: one change goes out CDS, EDS, then
// LDS/RDS; the clusters it removes go only after the routes that dropped
// them were ACKed.
func TestDeltaMakeBeforeBreak(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c1", 1)),
		xdstest.Put(t, resource.Route, store.DefaultScope, xdstest.Route("r1", "*", "c1")),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"c1": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"c1", "c2"}})
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS", resp, map[string]string{"c1": v(r1)}, "c2")
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Route.URL, ResourceNamesSubscribe: []string{"r1"}})
	resp = s.ExpectType(resource.Route)
	checkResp(t, "RDS", resp, map[string]string{"r1": v(r1)})
	s.Ack(resp)

	// One apply moves r1 from c1 to a new c2 and deletes c1.
	r2 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c2", 1)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("c2", 1)),
		xdstest.Put(t, resource.Route, store.DefaultScope, xdstest.Route("r1", "*", "c2")),
	}, xdstest.Key(resource.Cluster, "c1"), xdstest.Key(resource.Endpoint, "c1"))
	cds := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS first, c1 kept", cds, map[string]string{"c2": v(r2)})
	eds := s.ExpectType(resource.Endpoint)
	checkResp(t, "EDS second", eds, map[string]string{"c2": v(r2)})
	rds := s.ExpectType(resource.Route)
	checkResp(t, "RDS third", rds, map[string]string{"r1": v(r2)})
	s.Ack(cds)
	s.Ack(eds)
	s.ExpectNone() // c1 stays until r1 is ACKed
	s.Ack(rds)
	// The cluster and its endpoints go once r1 is ACKed, in push order.
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "c1 removed after the RDS ACK", resp, nil, "c1")
	s.Ack(resp)
	resp = s.ExpectType(resource.Endpoint)
	checkResp(t, "c1's endpoints removed after the RDS ACK", resp, nil, "c1")
	s.Ack(resp)
	s.ExpectNone()
}

// Make before break must not hold a removal forever when the referrers'
// change sends this client nothing (here: the change of a default listener
// its group overrides).
func TestDeltaMakeBeforeBreakReferrerUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c2", 1)),
		xdstest.Put(t, resource.Listener, store.DefaultScope, listener("l", "default")),
		xdstest.Put(t, resource.Listener, "g1", listener("l", "g1")),
	})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL})
	resp := s.ExpectType(resource.Cluster)
	checkResp(t, "CDS", resp, map[string]string{"c1": v(r1), "c2": v(r1)})
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Listener.URL})
	resp = s.ExpectType(resource.Listener)
	checkResp(t, "LDS", resp, map[string]string{"l": v(r1)})
	s.Ack(resp)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Listener, store.DefaultScope, listener("l", "default2"))}, xdstest.Key(resource.Cluster, "c1"))
	resp = s.ExpectType(resource.Cluster)
	checkResp(t, "c1 removed", resp, nil, "c1")
	s.Ack(resp)
	s.ExpectNone()
}

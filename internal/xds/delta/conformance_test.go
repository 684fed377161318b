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
// ("Incremental xDS") and docs/concepts/design.md (promises 2, 3, 4, 6, 7) one rule per
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

// dreq is a delta request, as the scripts send them.
type dreq = discoveryv3.DeltaDiscoveryRequest

// Subscriptions: wildcards, names, absent names, deletions and scopes,
// each case one rule of xds-protocol.rst's "Incremental xDS".
func TestDeltaSubscriptions(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// The first request of a LDS/CDS-like type with no names
		// subscribes to everything; of another type it subscribes to
		// nothing.
		{name: "legacy wildcard", steps: []step{
			apply(cds("a", 1), cds("b", 1), eds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "legacy wildcard CDS", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL}),
			expect(resource.Endpoint, "EDS with no names is not a wildcard", nil), ack(),
			apply(cds("c", 1), eds("a", 2)),
			expect(resource.Cluster, "a new cluster", vers{"c": 2}), ack(),
			none(), // the endpoints are not subscribed
		}},
		// Explicit "*" subscribes to everything, on any type;
		// unsubscribing "*" stops it. Here on the per-type DeltaEndpoints
		// service.
		{name: "explicit wildcard until unsubscribed", steps: []step{
			apply(eds("a", 1), eds("b", 1)),
			open((*env).deltaEDS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, ResourceNamesSubscribe: []string{"*"}}),
			expect(resource.Endpoint, "*", vers{"a": 1, "b": 1}), ack(),
			apply(eds("c", 1)),
			expect(resource.Endpoint, "a new resource under *", vers{"c": 2}), ack(),
			send(&dreq{ResourceNamesUnsubscribe: []string{"*"}}),
			none(),
			apply(eds("a", 2)),
			none(), // no longer subscribed
		}},
		// "*" and explicit names together; an explicit name that does not
		// exist is removed; unsubscribing an explicit name that the
		// wildcard also covers keeps it, and sends it again: the client
		// cannot tell whether the wildcard covers it ("Unsubscribing from
		// Resources").
		{name: "wildcard plus names", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*", "a", "x"}}),
			expect(resource.Cluster, "* + a + x", vers{"a": 1, "b": 1}, "x"), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a"}}),
			expect(resource.Cluster, "a sent again after unsubscribing the name a", vers{"a": 1}), ack(),
			none(),
			apply(cds("a", 2)),
			expect(resource.Cluster, "a under * after unsubscribing the name a", vers{"a": 2}), ack(),
			apply(cds("x", 1)),
			expect(resource.Cluster, "x created", vers{"x": 3}),
		}},
		// Named subscriptions may be added and removed at any time; each
		// subscribe is answered with the new names only, an unsubscribe
		// with nothing, and an unsubscribed resource's changes are not
		// sent.
		{name: "named subscribe and unsubscribe", steps: []step{
			apply(eds("a", 1), eds("b", 1), eds("c", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "subscribe a", vers{"a": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"b"}}),
			expect(resource.Endpoint, "subscribe b", vers{"b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{"a"}}),
			none(),
			apply(eds("a", 2), eds("b", 2), eds("c", 2)),
			expect(resource.Endpoint, "a, b, c changed; only b subscribed", vers{"b": 2}), ack(),
			none(),
			// Subscribing again sends the current version.
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "subscribe a again", vers{"a": 2}),
		}},
		// Unsubscribing names that were never subscribed is ignored, on a
		// named and on a wildcard subscription.
		{name: "phantom unsubscribes ignored", steps: []step{
			apply(cds("a", 1), eds("a", 1), eds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"a": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "EDS", vers{"a": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{"b", "never"}}),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a", "never"}}),
			none(),
			apply(cds("a", 2), eds("a", 2), eds("b", 2)),
			expect(resource.Cluster, "CDS after phantom unsubscribes", vers{"a": 2}), ack(),
			expect(resource.Endpoint, "EDS after phantom unsubscribes", vers{"a": 2}), ack(),
			none(),
		}},
		// A name asked for that does not exist is listed in
		// removed_resources, once; created later it is sent; asked again
		// it is listed again.
		{name: "absent name listed as removed", steps: []step{
			apply(eds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", "nope"}}),
			expect(resource.Endpoint, "a and nope", vers{"a": 1}, "nope"), ack(),
			apply(cds("nope", 1)), // another type
			none(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"nope"}}),
			expect(resource.Endpoint, "nope asked again", nil, "nope"), ack(),
			apply(eds("nope", 1)),
			expect(resource.Endpoint, "nope created", vers{"nope": 3}), ack(),
			applyDel(nil, xdstest.Key(resource.Endpoint, "nope")),
			expect(resource.Endpoint, "nope deleted", nil, "nope"), ack(),
			none(),
		}},
		// A deletion is sent as removed_resources, here on the per-type
		// DeltaClusters service.
		{name: "deletion sent as removed", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaCDS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}}), // no type_url: the service's
			expect(resource.Cluster, "CDS", vers{"a": 1, "b": 1}), ack(),
			applyDel(nil, xdstest.Key(resource.Cluster, "a")),
			expect(resource.Cluster, "a deleted", nil, "a"),
			check(func(r *scriptRun) {
				if r.last.GetSystemVersionInfo() != v(r.rev(2)) {
					r.t.Fatalf("system_version_info %q, want %d", r.last.GetSystemVersionInfo(), r.rev(2))
				}
			}),
			ack(),
			none(),
			check(func(r *scriptRun) {
				st := streamStatus(r.t, r.e, "n1", func(delta.StreamStatus) bool { return true })
				if st.Protocol != "delta-cluster" {
					r.t.Errorf("protocol %q, want delta-cluster", st.Protocol)
				}
			}),
		}},
		// A node sees its group's resource over the default one; the
		// default's changes are then not sent; when the override
		// disappears the default is sent in its place. Another group's
		// resources are never sent.
		{name: "group scope overrides the default", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			apply(cdsIn("g1", "a", 2)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "override", vers{"a": 2, "b": 1}),
			check(func(r *scriptRun) {
				if got := connectTimeoutOf(r.t, r.last, "a"); got != 2 {
					r.t.Fatalf("a is the default's (%dms), want g1's", got)
				}
			}),
			ack(),
			apply(cds("a", 3)),
			none(), // overridden
			apply(cdsIn("g2", "b", 9), cdsIn("g2", "z", 9)),
			none(), // another group
			applyDel(nil, xdstest.ScopedKey(resource.Cluster, "g1", "a")),
			expect(resource.Cluster, "override deleted", vers{"a": 3}),
			check(func(r *scriptRun) {
				if got := connectTimeoutOf(r.t, r.last, "a"); got != 3 {
					r.t.Fatalf("a is %dms, want the default's 3ms", got)
				}
			}),
			ack(),
			apply(cdsIn("g1", "c", 5)),
			expect(resource.Cluster, "group-only resource", vers{"c": 6}), ack(),
			applyDel(nil, xdstest.ScopedKey(resource.Cluster, "g1", "c")),
			expect(resource.Cluster, "group-only resource deleted", nil, "c"),
		}},
	})
}

// Resuming: what a new stream presents in initial_resource_versions
// decides what it is sent (promises 3 and 4), and an explicit subscribe is
// always answered.
func TestDeltaResume(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// initial_resource_versions are honoured, for wildcard and for
		// named subscriptions: what the client holds at the current
		// version is not resent, what changed is sent, what is gone is
		// removed.
		{name: "reconnect honours initial versions", steps: []step{
			apply(cds("a", 1), cds("b", 1), cds("c", 1), eds("a", 1), eds("b", 1), eds("c", 1)),
			apply(cds("b", 2), eds("b", 2)),
			applyDel(nil, xdstest.Key(resource.Cluster, "c"), xdstest.Key(resource.Endpoint, "c")),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL,
				InitialResourceVersions: map[string]string{"a": "@1", "b": "@1", "c": "@1", "d": "@1"}}),
			expect(resource.Cluster, "CDS reconnect", vers{"b": 2}, "c", "d"), ack(),
			// Envoy resubscribes every name it wants on a new stream,
			// presenting what it holds: only what changed is sent.
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", "b", "c"},
				InitialResourceVersions: map[string]string{"a": "@1", "b": "@1", "c": "@1"}}),
			expect(resource.Endpoint, "EDS reconnect", vers{"b": 2}, "c"), ack(),
			none(),
			// Holding everything at the current version: nothing at all
			// is sent.
			open((*env).deltaCDS),
			send(&dreq{Node: &corev3.Node{Id: "n2"}, InitialResourceVersions: map[string]string{"a": "@1", "b": "@2"}}),
			none(),
			apply(cds("a", 4)),
			expect(resource.Cluster, "a change after a silent reconnect", vers{"a": 4}),
			on(1),
			expectAny(resource.Cluster), // the first stream too
		}},
		// A name the client explicitly (re)subscribes is always sent, even
		// if the server thinks the client holds it at the current version
		// (Envoy can forget resources).
		{name: "explicit subscribe always resends", steps: []step{
			apply(cds("a", 1), cds("b", 1), eds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Cluster, "a subscribed while held", vers{"a": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "EDS a", vers{"a": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "EDS a again", vers{"a": 1}), ack(),
			none(),
			// On a new stream, a name subscribed without being presented
			// in initial_resource_versions is sent.
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n2"}, TypeUrl: resource.Cluster.URL,
				ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: map[string]string{"a": "@1"}}),
			expect(resource.Cluster, "b not presented", vers{"b": 1}),
		}},
	})
}

// ACKs and NACKs: what is sent after each, per type.
func TestDeltaAckNack(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// A NACK never causes a resend loop: nothing more is sent for the
		// type until what the stream would receive of it changes; a
		// change elsewhere in etcd does not count (promise 7).
		{name: "NACK never loops", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"a": 1, "b": 1}),
			nack("bad cluster"),
			none(),
			apply(eds("a", 1), cdsIn("g2", "a", 7), lds(store.DefaultScope, "l", "l")),
			none(),
			// The client sends the NACK again (as Envoy may, e.g. with a
			// new subscription of another type): still nothing.
			nack("bad cluster"),
			none(),
			apply(cdsIn("g1", "a", 3)),
			expect(resource.Cluster, "a change after the NACK", vers{"a": 3}),
			nack("bad again"),
			none(),
			apply(cds("b", 4)),
			expect(resource.Cluster, "another change after the NACK", vers{"b": 4}), ack(),
			none(),
		}},
		// At most one outstanding response per type per stream; changes
		// made while one is un-ACKed coalesce into one response with the
		// latest versions. Another type is not held back, and a stale
		// nonce is not an ACK.
		{name: "one outstanding response per type, changes coalesced", steps: []step{
			apply(cds("a", 1), cds("b", 1), eds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"a": 1, "b": 1}), save("first"),
			apply(cds("a", 2)),
			apply(cds("b", 3)),
			apply(cds("a", 4), cds("c", 4)),
			none(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResponseNonce: "stale"}),
			none(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a"}}),
			expect(resource.Endpoint, "EDS", vers{"a": 1}), // EDS is not held back by CDS
			ack(),
			ackOf("first"),
			expect(resource.Cluster, "coalesced", vers{"a": 4, "b": 3, "c": 4}),
			check(func(r *scriptRun) {
				if r.last.GetSystemVersionInfo() != v(r.rev(4)) {
					r.t.Errorf("system_version_info %q, want %d", r.last.GetSystemVersionInfo(), r.rev(4))
				}
			}),
			ack(),
			none(),
		}},
	})
}

// Make before break on delta ADS (promise 6).
func TestDeltaMakeBeforeBreak(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// One change goes out CDS, EDS, then LDS/RDS; the clusters it
		// removes go only after the routes that dropped them were ACKed.
		{name: "removal after the route's ACK", steps: []step{
			apply(cds("c1", 1), eds("c1", 1), rds("r1", "*", "c1")),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"c1": 1}), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"c1", "c2"}}),
			expect(resource.Endpoint, "EDS", vers{"c1": 1}, "c2"), ack(),
			send(&dreq{TypeUrl: resource.Route.URL, ResourceNamesSubscribe: []string{"r1"}}),
			expect(resource.Route, "RDS", vers{"r1": 1}), ack(),
			// One apply moves r1 from c1 to a new c2 and deletes c1.
			applyDel([]res{cds("c2", 1), eds("c2", 1), rds("r1", "*", "c2")},
				xdstest.Key(resource.Cluster, "c1"), xdstest.Key(resource.Endpoint, "c1")),
			expect(resource.Cluster, "CDS first, c1 kept", vers{"c2": 2}), save("cds"),
			expect(resource.Endpoint, "EDS second", vers{"c2": 2}), save("eds"),
			expect(resource.Route, "RDS third", vers{"r1": 2}), save("rds"),
			ackOf("cds"),
			ackOf("eds"),
			none(), // c1 stays until r1 is ACKed
			ackOf("rds"),
			// The cluster and its endpoints go once r1 is ACKed, in push
			// order.
			expect(resource.Cluster, "c1 removed after the RDS ACK", nil, "c1"), ack(),
			expect(resource.Endpoint, "c1's endpoints removed after the RDS ACK", nil, "c1"), ack(),
			none(),
		}},
		// Make before break must not hold a removal forever when the
		// referrers' change sends this client nothing (here: the change of
		// a default listener its group overrides).
		{name: "removal not held when the referrers' change sends nothing", steps: []step{
			apply(cds("c1", 1), cds("c2", 1), lds(store.DefaultScope, "l", "default"), lds("g1", "l", "g1")),
			open((*env).deltaADS),
			send(&dreq{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "CDS", vers{"c1": 1, "c2": 1}), ack(),
			send(&dreq{TypeUrl: resource.Listener.URL}),
			expect(resource.Listener, "LDS", vers{"l": 1}), ack(),
			applyDel([]res{lds(store.DefaultScope, "l", "default2")}, xdstest.Key(resource.Cluster, "c1")),
			expect(resource.Cluster, "c1 removed", nil, "c1"), ack(),
			none(),
		}},
	})
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

package sotw_test

// The SotW conformance suite: one test per protocol rule Legation keeps
// (docs/concepts/design.md promises 2, 3, 4, 6, 7, 10 and its protocol rules), each on raw gRPC
// streams against the real server, a real view and a real embedded etcd.
// Each test asserts what is sent (versions, names, nonces) and, with the
// short timeout, what must not be.

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cdsv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	edsv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	ldsv3 "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	rdsv3 "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// Rule 1: version_info is the decimal etcd revision of the view a response
// was built from; nonces are unique on a stream.
func TestSotWVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1)),
	})
	s := e.adsStream(t)
	nonces := map[string]bool{}
	got := func(resp *discoveryv3.DiscoveryResponse) {
		t.Helper()
		if resp.GetNonce() == "" || nonces[resp.GetNonce()] {
			t.Fatalf("nonce %q of a %s response at %s is empty or was sent before on this stream", resp.GetNonce(), resp.GetTypeUrl(), resp.GetVersionInfo())
		}
		nonces[resp.GetNonce()] = true
	}

	s.Send(sotwRequest(resource.Cluster, xdstest.Node("n1", "")))
	resp := s.Expect()
	checkResp(t, resp, resource.Cluster, xdstest.Version(r), "a", "b")
	got(resp)
	s.Ack(resp)
	s.Send(sotwRequest(resource.Endpoint, nil, "a"))
	resp = s.Expect()
	checkResp(t, resp, resource.Endpoint, xdstest.Version(r), "a")
	got(resp)
	s.Ack(resp, "a")

	for i := int64(2); i < 12; i++ {
		// A write outside the prefix moves etcd's revision but not the
		// resources: versions follow the revision, not a counter.
		if _, err := e.Client.Put(context.Background(), "/elsewhere/k", strconv.FormatInt(i, 10)); err != nil {
			t.Fatal(err)
		}
		r = e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", i))})
		resp = s.Expect()
		checkResp(t, resp, resource.Cluster, xdstest.Version(r), "a", "b")
		got(resp)
		s.Ack(resp)
		r = e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", uint32(i)))})
		resp = s.Expect()
		checkResp(t, resp, resource.Endpoint, xdstest.Version(r), "a")
		got(resp)
		s.Ack(resp, "a")
	}
	s.ExpectNone()
	if len(nonces) != 22 {
		t.Fatalf("got %d distinct nonces, want 22", len(nonces))
	}
}

// req is a SotW request, as the scripts send them.
type req = discoveryv3.DiscoveryRequest

// Requests: which request of a type the server answers (rules 2 and 3).
func TestSotWRequests(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// Rule 2: the latest request of a type is answered; a request
		// carrying a stale or unknown nonce is ignored.
		{name: "latest request answered, stale nonces ignored", steps: []step{
			apply(eds("a", 1), eds("b", 1), eds("c", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, xdstest.Node("n1", ""), "a")),
			expect(resource.Endpoint, anyVersion, "a"), save("first"),
			// The client's next request (a,b) supersedes the first: b is
			// sent.
			ack("a", "b"),
			expect(resource.Endpoint, sameAs("first"), "b"), save("second"),
			// A request answering the first response is stale now,
			// whatever it asks for; so is one with a nonce never sent.
			sendf(func(r *scriptRun) *req {
				first := r.saved["first"]
				return &req{TypeUrl: resource.Endpoint.URL, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce(), ResourceNames: []string{"c"}}
			}),
			sendf(func(r *scriptRun) *req {
				return &req{TypeUrl: resource.Endpoint.URL, VersionInfo: r.saved["first"].GetVersionInfo(), ResponseNonce: "no-such-nonce", ResourceNames: []string{"c"}}
			}),
			// Ignored means not subscribed either.
			apply(eds("c", 2)),
			none(),
			check(func(r *scriptRun) {
				if got := gatherValue(r.t, r.e, "legation_sotw_stale_nonce_requests_total"); got != 2 {
					r.t.Errorf("legation_sotw_stale_nonce_requests_total = %v, want 2", got)
				}
			}),
			// The latest request (only b) rules: a is no longer sent, b
			// is.
			ackOf("second", "b"),
			// The stream handles its requests in order: once a stale
			// request sent after the ACK is counted, the ACK was handled,
			// before the change below reaches the stream.
			sendf(func(r *scriptRun) *req {
				first := r.saved["first"]
				return &req{TypeUrl: resource.Endpoint.URL, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce(), ResourceNames: []string{"a"}}
			}),
			check(func(r *scriptRun) {
				xdstest.WaitFor(r.t, "the ACK of b handled", func() (bool, string) {
					got := gatherValue(r.t, r.e, "legation_sotw_stale_nonce_requests_total")
					return got == 3, "legation_sotw_stale_nonce_requests_total = " + strconv.FormatFloat(got, 'g', -1, 64) + ", want 3"
				})
			}),
			apply(eds("a", 3)),
			none(),
			apply(eds("b", 3)),
			expect(resource.Endpoint, at(4), "b"),
		}},
		// A request of a type with no nonce, sent before the client read
		// the first response of the type, is stale: ignored, as one with
		// an old nonce (neither starting the type over nor taking its
		// names), so nothing is sent twice at one version; the client's
		// ACK of that response carries its names. A resuming client asks
		// for the EDS names it held, then, its CDS response in, for the
		// new set before its first EDS response came; the server must not
		// resend that response, nor (taking the names at once) resend a
		// re-added endpoint set at the same version as the response on
		// its way.
		{name: "requests before the first response are stale", steps: []step{
			apply(eds("a", 1), eds("b", 1), cds("c", 1)),
			open((*env).adsStream),
			// Each response is read here before the next request is sent,
			// so that it is sent first: the client has not read it yet.
			send(&req{Node: xdstest.Node("n1", ""), TypeUrl: resource.Endpoint.URL, VersionInfo: "@1", ResourceNames: []string{"a", "gone"}}),
			expect(resource.Endpoint, at(1), "a"), save("first"),
			send(&req{TypeUrl: resource.Endpoint.URL, VersionInfo: "@1", ResourceNames: []string{"b"}}),
			send(&req{TypeUrl: resource.Endpoint.URL, VersionInfo: "@1", ResourceNames: []string{"a", "b"}}),
			send(&req{TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, at(1), "c"),
			send(&req{TypeUrl: resource.Cluster.URL}),
			none(),
			// The ACK of the first response carries the names: b is new.
			ackOf("first", "a", "b"),
			expect(resource.Endpoint, at(1), "b"),
			none(),
			check(func(r *scriptRun) {
				if got := gatherValue(r.t, r.e, "legation_sotw_stale_nonce_requests_total"); got != 3 {
					r.t.Errorf("legation_sotw_stale_nonce_requests_total = %v, want 3", got)
				}
			}),
		}},
	})
}

// ACKs and NACKs: what is sent after each (rules 3 and 4).
func TestSotWAckNack(t *testing.T) {
	t.Parallel()
	const badTimeout = "cluster a: bad connect timeout"
	runScripts(t, []script{
		// Rule 3: an ACK gets nothing until the state changes; then the
		// new state is sent.
		{name: "ACK answered only by a change", steps: []step{
			apply(cds("a", 1), eds("a", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""))),
			expect(resource.Cluster, at(1), "a"), save("cds"), ack(),
			send(sotwRequest(resource.Endpoint, nil, "a")),
			expect(resource.Endpoint, at(1), "a"), save("eds"), ack("a"),
			// The same ACK again is still nothing to answer, nor a change
			// of a type the stream does not subscribe to.
			ackOf("cds"),
			ackOf("eds", "a"),
			apply(lds("l", "r")),
			none(),
			apply(cds("a", 2)),
			expect(resource.Cluster, at(3), "a"), bodies(cds("a", 2)), ack(),
			apply(eds("a", 2)),
			expect(resource.Endpoint, at(4), "a"), bodies(eds("a", 2)), ack("a"),
			none(),
		}},
		// Rule 4 (promise 7): after a NACK nothing more is sent for the
		// type until what the stream would receive for it changes; the
		// NACK is counted and shown in the stream's status.
		{name: "NACK of CDS", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("nacker", ""))),
			expect(resource.Cluster, at(1), "a", "b"), ack(),
			send(sotwRequest(resource.Endpoint, nil, "a")),
			expectAny(), ack("a"),
			apply(cds("a", 2)),
			expect(resource.Cluster, at(2), "a", "b"), save("nacked"),
			nack(1, badTimeout),
			// None of these changes what the stream receives for CDS: a
			// change of another type it subscribes to (sent, alone), of a
			// type it does not, a write outside the prefix, the same NACK
			// again (Envoy repeats it on a new request).
			apply(eds("a", 2)),
			expect(resource.Endpoint, at(3), "a"), ack("a"),
			apply(lds("l", "r")),
			check(func(r *scriptRun) { advanceOutsidePrefix(r.t, r.e) }),
			nackOf("nacked", 1, badTimeout),
			none(),
			check(func(r *scriptRun) {
				if got := gatherValue(r.t, r.e, "legation_sotw_nacks_total", "type", "cluster"); got != 1 {
					r.t.Errorf("legation_sotw_nacks_total{type=cluster} = %v, want 1", got)
				}
				st := streamStatus(r.t, r.e, "nacker")
				want := sotw.TypeStatus{VersionSent: xdstest.Version(r.rev(2)), VersionAcked: xdstest.Version(r.rev(1)), Nonce: r.saved["nacked"].GetNonce(),
					NackVersion: xdstest.Version(r.rev(2)), LastNack: badTimeout, Wildcard: true, Resources: 2}
				if got := st.Types["cluster"]; got == nil || *got != want {
					r.t.Errorf("Streams(): cluster status %+v, want %+v", got, want)
				}
			}),
			// A change past the NACKed version is sent, and ACKing it
			// clears the NACK.
			apply(cds("b", 3)),
			expect(resource.Cluster, at(5), "a", "b"), bodies(cds("a", 2), cds("b", 3)), ack(),
			check(func(r *scriptRun) {
				waitFor(r.t, func() bool { return streamStatus(r.t, r.e, "nacker").Types["cluster"].LastNack == "" }, "the NACK to clear after an ACK")
			}),
		}},
		{name: "NACK of EDS", steps: []step{
			apply(eds("a", 1), eds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, xdstest.Node("nacker", ""), "a")),
			expect(resource.Endpoint, at(1), "a"), ack("a"),
			apply(eds("a", 2)),
			expect(resource.Endpoint, at(2), "a"),
			nack(1, "duplicate endpoint address", "a"),
			// Another resource of the type that the stream does not ask
			// for, another type, a write outside the prefix: none counts.
			apply(eds("b", 2)),
			apply(cds("a", 1)),
			check(func(r *scriptRun) { advanceOutsidePrefix(r.t, r.e) }),
			none(),
			check(func(r *scriptRun) {
				if got := gatherValue(r.t, r.e, "legation_sotw_nacks_total", "type", "endpoint"); got != 1 {
					r.t.Errorf("legation_sotw_nacks_total{type=endpoint} = %v, want 1", got)
				}
				if got := streamStatus(r.t, r.e, "nacker").Types["endpoint"]; got == nil || got.LastNack != "duplicate endpoint address" || got.NackVersion != xdstest.Version(r.rev(2)) {
					r.t.Errorf("Streams(): endpoint status %+v, want the NACK of version %d", got, r.rev(2))
				}
			}),
			apply(eds("a", 3)),
			expect(resource.Endpoint, at(5), "a"), bodies(eds("a", 3)),
		}},
	})
}

// What a stream is sent of each type: full state, named hints, the node's
// scopes (rules 5, 6, 7 and 9).
func TestSotWState(t *testing.T) {
	t.Parallel()
	fullState := []res{cds("a", 1), cds("b", 1), cds("c", 1), lds("l1", "r"), lds("l2", "r"), lds("l3", "r")}
	named := []res{eds("a", 1), eds("b", 1), eds("c", 1), rds("r1", "one", "a"), rds("r2", "two", "b"), rds("r3", "three", "c")}
	runScripts(t, []script{
		// Rule 5: LDS/CDS wildcard responses carry the full set, and a
		// resource left out is removed.
		{name: "wildcard full state", steps: []step{
			apply(fullState...),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""))),
			expect(resource.Cluster, anyVersion, "a", "b", "c"), ack(),
			send(sotwRequest(resource.Listener, nil)),
			expect(resource.Listener, anyVersion, "l1", "l2", "l3"), ack(),
			apply(cds("b", 2)),
			expect(resource.Cluster, at(2), "a", "b", "c"), bodies(cds("a", 1), cds("b", 2), cds("c", 1)), ack(),
			applyDel(nil, xdstest.Key(resource.Cluster, "c")),
			expect(resource.Cluster, at(3), "a", "b"), ack(),
			apply(cds("c", 3)),
			expect(resource.Cluster, at(4), "a", "b", "c"), ack(),
			apply(ldsStat("l1", "r", "v2")),
			expect(resource.Listener, at(5), "l1", "l2", "l3"), ack(),
			none(),
		}},
		// Rule 5: explicit LDS names get the full named set.
		{name: "explicit names full state", steps: []step{
			apply(fullState...),
			open((*env).adsStream),
			send(sotwRequest(resource.Listener, xdstest.Node("n2", ""), "l1", "l2", "missing")),
			expect(resource.Listener, anyVersion, "l1", "l2"), ack("l1", "l2", "missing"),
			apply(ldsStat("l1", "r", "v3")),
			expect(resource.Listener, at(2), "l1", "l2"), ack("l1", "l2", "missing"),
			// A listener not named is none of the stream's business.
			apply(lds("l3", "r2")),
			none(),
			// A named one that appears is sent with the rest.
			apply(lds("missing", "r")),
			expect(resource.Listener, at(4), "l1", "l2", "missing"), ack("l1", "l2", "missing"),
			applyDel(nil, xdstest.Key(resource.Listener, "l2")),
			expect(resource.Listener, at(5), "l1", "missing"),
		}},
		// Rule 6: EDS sends what was asked for, and once the stream holds
		// it, only what changed; names added at the same version are
		// answered with the new ones only.
		{name: "EDS named hints", steps: []step{
			apply(named...),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, xdstest.Node("n1", ""), "a", "b", "missing")),
			expect(resource.Endpoint, at(1), "a", "b"), ack("a", "b", "missing"),
			apply(eds("a", 2)),
			expect(resource.Endpoint, at(2), "a"), bodies(eds("a", 2)), ack("a", "b", "missing"),
			// c is not asked for.
			apply(eds("c", 2)),
			none(),
			// Asking for c at the same version: c only, at the current
			// version.
			ack("a", "b", "c", "missing"),
			expect(resource.Endpoint, at(3), "c"), bodies(eds("c", 2)), ack("a", "b", "c", "missing"),
			// Dropping b: its changes are not sent any more.
			ack("a", "c", "missing"),
			apply(eds("b", 3)),
			none(),
			// Two changed in one apply: both, and only them.
			apply(eds("c", 3), eds("missing", 3)),
			expect(resource.Endpoint, at(5), "c", "missing"),
		}},
		// Rule 6, on RDS.
		{name: "RDS named hints", steps: []step{
			apply(named...),
			open((*env).adsStream),
			send(sotwRequest(resource.Route, xdstest.Node("n2", ""), "r1", "r2")),
			expect(resource.Route, anyVersion, "r1", "r2"), ack("r1", "r2"),
			apply(rds("r2", "two", "c")),
			expect(resource.Route, at(2), "r2"), bodies(rds("r2", "two", "c")), ack("r1", "r2"),
			ack("r1", "r2", "r3"),
			expect(resource.Route, at(2), "r3"), ack("r1", "r2", "r3"),
			none(),
		}},
		// Rule 7: the node of the stream's first request is the stream's
		// node; later requests need not carry it.
		{name: "node of the first request remembered", steps: []step{
			apply(cds("a", 1), cdsIn("edge", "a", 2), eds("a", 1), edsIn("edge", "a", 2)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", "edge"))),
			expectAny(), bodies(cds("a", 2)),
			ack(), // no node
			send(sotwRequest(resource.Endpoint, nil, "a")),
			expectAny(), bodies(eds("a", 2)), ack("a"),
			// The default's resources are overridden for this node: their
			// changes are nothing to it; the group's are sent.
			apply(eds("a", 3)),
			none(),
			apply(edsIn("edge", "a", 4)),
			expect(resource.Endpoint, at(3), "a"), bodies(eds("a", 4)),
			check(func(r *scriptRun) {
				if st := streamStatus(r.t, r.e, "n1"); st.Group != "edge" {
					r.t.Errorf("Streams(): group %q, want edge", st.Group)
				}
			}),
		}},
		// Rule 9: a node sees the default scope plus its group's, the
		// group's resource winning over a default one of the same name.
		{name: "default scope plus the group's", steps: []step{
			apply(cds("a", 1), cds("b", 1), cdsIn("edge", "a", 2), cdsIn("edge", "c", 2), cdsIn("other-group", "d", 2)),
			open((*env).adsStream), send(sotwRequest(resource.Cluster, xdstest.Node("n1", "edge"))),
			open((*env).adsStream), send(sotwRequest(resource.Cluster, xdstest.Node("n2", "other"))),
			open((*env).adsStream), send(sotwRequest(resource.Cluster, xdstest.Node("n3", ""))),
			on(1), expect(resource.Cluster, at(1), "a", "b", "c"), bodies(cdsIn("edge", "a", 2), cds("b", 1), cdsIn("edge", "c", 2)), ack(),
			on(2), expect(resource.Cluster, at(1), "a", "b"), bodies(cds("a", 1), cds("b", 1)), ack(),
			on(3), expect(resource.Cluster, at(1), "a", "b"), bodies(cds("a", 1), cds("b", 1)), ack(),
			// The override goes: the default is sent again. The other
			// nodes are not concerned.
			applyDel(nil, store.Key{Type: resource.Cluster, Scope: "edge", Name: "a"}),
			on(1), expect(resource.Cluster, at(2), "a", "b", "c"), bodies(cds("a", 1), cds("b", 1), cdsIn("edge", "c", 2)), ack(),
			noneOn(2, 3),
			// A default change reaches all of them.
			apply(cds("b", 3)),
			check(func(r *scriptRun) {
				for _, s := range r.streams {
					if resp := s.Expect(); resp.GetVersionInfo() != xdstest.Version(r.rev(3)) {
						r.t.Fatalf("version %s, want %d", resp.GetVersionInfo(), r.rev(3))
					}
				}
			}),
		}},
	})
}

// Rule 10 (promise 6): make before break on ADS.
func TestSotWMakeBeforeBreak(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// One change goes out CDS, EDS, LDS, RDS, whatever the order the
		// stream subscribed in.
		{name: "order", steps: []step{
			apply(cds("c1", 1), eds("c1", 1), lds("l", "r"), rds("r", "svc", "c1")),
			open((*env).adsStream),
			// Subscribed in the reverse order: the order sent is the
			// server's.
			subscribe([]*resource.Type{resource.Route, resource.Listener, resource.Endpoint, resource.Cluster},
				map[*resource.Type][]string{resource.Route: {"r"}, resource.Endpoint: {"c1"}}),
			apply(rds("r", "svc2", "c1"), ldsStat("l", "r", "v2"), eds("c1", 2), cds("c1", 2)),
			check(func(r *scriptRun) {
				for _, typ := range []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route} {
					resp := r.s.Expect()
					if resp.GetTypeUrl() != typ.URL {
						r.t.Fatalf("got a %s response, want %s next (order CDS, EDS, LDS, RDS)", resp.GetTypeUrl(), typ)
					}
					if resp.GetVersionInfo() != xdstest.Version(r.rev(2)) {
						r.t.Fatalf("%s version %s, want %d", typ, resp.GetVersionInfo(), r.rev(2))
					}
				}
			}),
			none(),
		}},
		// A cluster the change removes stays until the route and listener
		// that dropped it are ACKed.
		{name: "removal", steps: []step{
			apply(cds("x", 1), cds("y", 1), eds("x", 1), eds("y", 1), lds("l", "r"), rds("r", "svc", "x")),
			open((*env).adsStream),
			subscribe([]*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route},
				map[*resource.Type][]string{resource.Route: {"r"}, resource.Endpoint: {"x", "y"}}),
			// One apply: x goes, the route moves to y.
			applyDel([]res{rds("r", "svc", "y"), ldsStat("l", "r", "v2"), eds("y", 2)},
				xdstest.Key(resource.Cluster, "x"), xdstest.Key(resource.Endpoint, "x")),
			expect(resource.Cluster, at(1), "x", "y"), bodies(cds("x", 1), cds("y", 1)), save("interim"),
			expect(resource.Endpoint, at(2), "y"), save("eds"),
			expect(resource.Listener, at(2), "l"), save("lds"),
			expect(resource.Route, at(2), "r"), bodies(rds("r", "svc", "y")), save("rds"),
			// x stays until the route and listener that dropped it are
			// ACKed.
			ackOf("interim"),
			ackOf("eds", "x", "y"),
			none(),
			ackOf("lds"),
			none(),
			ackOf("rds", "r"),
			expect(resource.Cluster, at(2), "y"),
			check(func(r *scriptRun) {
				if got := gatherValue(r.t, r.e, "legation_sotw_mbb_holds_total"); got != 1 {
					r.t.Errorf("legation_sotw_mbb_holds_total = %v, want 1", got)
				}
			}),
		}},
		{name: "removal held while the route is NACKed", steps: []step{
			apply(cds("x", 1), cds("y", 1), lds("l", "r"), rds("r", "svc", "x")),
			open((*env).adsStream),
			subscribe([]*resource.Type{resource.Cluster, resource.Route}, map[*resource.Type][]string{resource.Route: {"r"}}),
			applyDel([]res{rds("r", "svc", "y")}, xdstest.Key(resource.Cluster, "x")),
			expect(resource.Cluster, anyVersion, "x", "y"), save("interim"),
			expect(resource.Route, at(2), "r"),
			ackOf("interim"),
			none(),
			// The route is rejected: the client still routes to x by its
			// old route, so x stays until a later route is ACKed.
			nack(0, "route r: bad", "r"),
			none(),
			apply(rds("r", "svc.example", "y")),
			expect(resource.Route, at(3), "r"),
			none(), // not before the ACK
			ack("r"),
			expect(resource.Cluster, at(3), "y"),
		}},
		{name: "no referrers: removed at once", steps: []step{
			apply(cds("x", 1), cds("y", 1)),
			open((*env).adsStream),
			subscribe([]*resource.Type{resource.Cluster}, nil),
			applyDel(nil, xdstest.Key(resource.Cluster, "x")),
			expect(resource.Cluster, at(2), "y"),
		}},
	})
}

// Rule 8 (promises 3 and 4): what a new stream presents decides what it is
// sent.
func TestSotWNoNeedlessResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1)),
	})

	t.Run("current version", func(t *testing.T) {
		before := gatherValue(t, e, "legation_sotw_resends_avoided_total")
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(r1)})
		// Asked again before any response: still nothing.
		s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(r1)})
		s.ExpectNone()
		if got := gatherValue(t, e, "legation_sotw_resends_avoided_total") - before; got != 1 {
			t.Errorf("legation_sotw_resends_avoided_total grew by %v, want 1", got)
		}
		r := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 2))})
		resp := s.Expect()
		checkResp(t, resp, resource.Cluster, xdstest.Version(r), "a", "b")
		checkBodies(t, resp, xdstest.Cluster("a", 1), xdstest.Cluster("b", 2))
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1))}) // as it was
		s.Ack(resp)
		s.Expect()
	})

	t.Run("older version, set unchanged since", func(t *testing.T) {
		cur := e.View.Snapshot().Revision
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 2))})
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(cur)})
		s.ExpectNone()
	})

	t.Run("older version, set changed since", func(t *testing.T) {
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(r1)})
		resp := s.Expect()
		checkResp(t, resp, resource.Cluster, xdstest.Version(e.View.Snapshot().Revision), "a", "b")
	})

	t.Run("newer than the view, never reached", func(t *testing.T) {
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(e.View.Snapshot().Revision + 1000)})
		if err := s.ExpectErr(); grpcstatus.Code(err) != codes.Unavailable {
			t.Fatalf("stream ended with %v, want Unavailable", err)
		}
		if got := gatherValue(t, e, "legation_sotw_catchup_failures_total"); got != 1 {
			t.Errorf("legation_sotw_catchup_failures_total = %v, want 1", got)
		}
	})

	t.Run("newer than the view, reached in time", func(t *testing.T) {
		pr, err := e.Client.Put(context.Background(), "/elsewhere/k", "v")
		if err != nil {
			t.Fatal(err)
		}
		if e.View.Snapshot().Revision >= pr.Header.Revision {
			t.Fatalf("the view is at %d already; the test needs it behind %d", e.View.Snapshot().Revision, pr.Header.Revision)
		}
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(pr.Header.Revision)})
		s.ExpectNone() // waited, then nothing: unchanged since
		r := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 3))})
		checkResp(t, s.Expect(), resource.Cluster, xdstest.Version(r), "a", "b")
	})

	t.Run("catch-up keeps changes made meanwhile", func(t *testing.T) {
		// Room for two applies during the wait, however loaded the machine.
		e := newEnv(t, func(c *sotw.Config) { c.CatchupTimeout = xdstest.Timeout })
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1))})
		s := e.adsStream(t)
		s.Send(sotwRequest(resource.Endpoint, xdstest.Node("n1", ""), "a"))
		resp := s.Expect()
		s.Ack(resp, "a")
		waits := gatherValue(t, e, "legation_sotw_catchup_waits_total")
		g, err := e.Client.Get(context.Background(), "/elsewhere/k")
		if err != nil {
			t.Fatal(err)
		}
		want := g.Header.Revision + 2
		// The stream waits for the view to reach want; meanwhile an
		// endpoint it holds changes.
		s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Cluster.URL, VersionInfo: xdstest.Version(want)})
		waitFor(t, func() bool { return gatherValue(t, e, "legation_sotw_catchup_waits_total") > waits }, "the stream to wait for the view")
		e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 5))})
		if r := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1))}); r != want {
			t.Fatalf("applied at %d, want %d", r, want)
		}
		// CDS: unchanged since what the client presented; EDS: a changed.
		resp = s.Expect()
		checkResp(t, resp, resource.Endpoint, xdstest.Version(want), "a")
		checkBodies(t, resp, xdstest.Endpoints("a", 5))
		s.ExpectNone()
	})

	t.Run("named, current version", func(t *testing.T) {
		// grpc-go issue #7013: a SotW client may present V having dropped
		// a resource it names again.
		cur := xdstest.Version(e.View.Snapshot().Revision)
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Endpoint.URL, VersionInfo: cur, ResourceNames: []string{"a"}})
		checkResp(t, s.Expect(), resource.Endpoint, cur, "a")
	})

	t.Run("named, current version, trusted", func(t *testing.T) {
		e := newEnv(t, func(c *sotw.Config) { c.TrustVersion = true })
		r := e.Apply(t, []store.Put{
			xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1)),
			xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("b", 1)),
		})
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Endpoint.URL, VersionInfo: xdstest.Version(r), ResourceNames: []string{"a", "b"}})
		s.ExpectNone()
		r = e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("b", 2))})
		checkResp(t, s.Expect(), resource.Endpoint, xdstest.Version(r), "b")

		// A name asked for later on a stream that has had no response of
		// the type yet (so no nonce to give) is one the client does not
		// hold: it is sent, however old.
		s = e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), TypeUrl: resource.Endpoint.URL, VersionInfo: xdstest.Version(r), ResourceNames: []string{"b"}})
		s.ExpectNone()
		s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, VersionInfo: xdstest.Version(r), ResourceNames: []string{"a", "b"}})
		checkResp(t, s.Expect(), resource.Endpoint, xdstest.Version(r), "a")
	})
}

// Rule 11 (promise 10): a malformed request ends the stream with a status,
// and the server serves on.
func TestSotWBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1))})
	tests := []struct {
		name string
		open func(testing.TB) *xdstest.SotWStream
		reqs []*discoveryv3.DiscoveryRequest
		want codes.Code
	}{
		{name: "ads without type_url", open: e.adsStream,
			reqs: []*discoveryv3.DiscoveryRequest{{Node: xdstest.Node("n1", "")}}, want: codes.InvalidArgument},
		{name: "ads unknown type_url", open: e.adsStream,
			reqs: []*discoveryv3.DiscoveryRequest{{Node: xdstest.Node("n1", ""), TypeUrl: "type.googleapis.com/no.such.Type"}}, want: codes.InvalidArgument},
		{name: "ads, bad request after a good one", open: e.adsStream,
			reqs: []*discoveryv3.DiscoveryRequest{sotwRequest(resource.Cluster, xdstest.Node("n1", "")), {TypeUrl: "type.googleapis.com/no.such.Type"}}, want: codes.InvalidArgument},
		{name: "cds service, endpoint type_url", open: e.cdsStream,
			reqs: []*discoveryv3.DiscoveryRequest{sotwRequest(resource.Endpoint, xdstest.Node("n1", ""), "a")}, want: codes.InvalidArgument},
		{name: "ads oversized", open: e.adsStream,
			reqs: []*discoveryv3.DiscoveryRequest{{Node: xdstest.Node("n1", ""), TypeUrl: resource.Cluster.URL, ResourceNames: []string{strings.Repeat("x", 1<<20+1)}}}, want: codes.ResourceExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := gatherValue(t, e, "legation_sotw_bad_requests_total")
			s := tc.open(t)
			for _, req := range tc.reqs {
				if err := s.Client().Send(req); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
			}
			if err := s.ExpectErr(); grpcstatus.Code(err) != tc.want {
				t.Fatalf("stream ended with %v, want %s", err, tc.want)
			}
			if tc.want == codes.InvalidArgument {
				if got := gatherValue(t, e, "legation_sotw_bad_requests_total") - before; got != 1 {
					t.Errorf("legation_sotw_bad_requests_total grew by %v, want 1", got)
				}
			}
			// The server serves on.
			s = e.adsStream(t)
			s.Send(sotwRequest(resource.Cluster, xdstest.Node("n2", "")))
			checkResp(t, s.Expect(), resource.Cluster, xdstest.Version(r), "a")
		})
	}

	t.Run("cds service, empty type_url", func(t *testing.T) {
		s := e.cdsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "")})
		resp := s.Expect()
		checkResp(t, resp, resource.Cluster, xdstest.Version(r), "a")
		s.Send(&discoveryv3.DiscoveryRequest{VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
		s.ExpectNone()
	})
}

// Rule 12: the per-type services and the unary Fetch.
func TestSotWPerTypeServices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1)),
		xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("b", 1)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("b", 1)),
		xdstest.Put(t, resource.Listener, "default", xdstest.APIListener(t, "l", "r", true)),
		xdstest.Put(t, resource.Route, "default", xdstest.Route("r", "svc", "a")),
		xdstest.Put(t, resource.Route, "default", xdstest.Route("r2", "svc2", "b")),
	})
	l2 := xdstest.APIListener(t, "l", "r", true)
	l2.StatPrefix = "v2"
	tests := []struct {
		name   string
		open   func(testing.TB) *xdstest.SotWStream
		typ    *resource.Type
		names  []string // asked for
		first  []string // first response
		change proto.Message
		second []string // response to the change
	}{
		{"StreamClusters", e.cdsStream, resource.Cluster, nil, []string{"a", "b"}, xdstest.Cluster("a", 2), []string{"a", "b"}},
		{"StreamEndpoints", e.edsStream, resource.Endpoint, []string{"a", "b"}, []string{"a", "b"}, xdstest.Endpoints("b", 2), []string{"b"}},
		{"StreamListeners", e.ldsStream, resource.Listener, nil, []string{"l"}, l2, []string{"l"}},
		{"StreamRoutes", e.rdsStream, resource.Route, []string{"r", "r2"}, []string{"r", "r2"}, xdstest.Route("r", "svc", "b"), []string{"r"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			s.Send(sotwRequest(tc.typ, xdstest.Node("n1", ""), tc.names...))
			resp := s.Expect()
			checkResp(t, resp, tc.typ, resp.GetVersionInfo(), tc.first...)
			s.Ack(resp, tc.names...)
			rev := e.Apply(t, []store.Put{xdstest.Put(t, tc.typ, "default", tc.change)})
			resp = s.Expect()
			checkResp(t, resp, tc.typ, xdstest.Version(rev), tc.second...)
			s.Ack(resp, tc.names...)
			s.ExpectNone()
		})
	}

	t.Run("FetchClusters", func(t *testing.T) {
		c := cdsv3.NewClusterDiscoveryServiceClient(e.conn(t))
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
		defer cancel()
		cur := xdstest.Version(e.View.Snapshot().Revision)
		resp, err := c.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "")})
		if err != nil {
			t.Fatal(err)
		}
		checkResp(t, resp, resource.Cluster, cur, "a", "b")
		checkBodies(t, resp, xdstest.Cluster("a", 2), xdstest.Cluster("b", 1))
		_, err = c.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), VersionInfo: cur})
		if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not modified") {
			t.Fatalf("FetchClusters at the current version: %v, want Unavailable, not modified", err)
		}
		// A version the set changed since is answered.
		resp, err = c.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", ""), VersionInfo: xdstest.Version(r)})
		if err != nil {
			t.Fatal(err)
		}
		checkResp(t, resp, resource.Cluster, cur, "a", "b")
		_, err = c.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{TypeUrl: resource.Route.URL})
		if grpcstatus.Code(err) != codes.InvalidArgument {
			t.Fatalf("FetchClusters of routes: %v, want InvalidArgument", err)
		}
	})
}

// Rule 13: a response body is encoded once and shared by every stream
// sending it.
func TestSotWSharedEncoding(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t)
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("b", 1)),
	})
	streams := make([]*xdstest.SotWStream, n)
	for i := range streams {
		s := e.adsStream(t)
		s.Send(sotwRequest(resource.Endpoint, xdstest.Node("n"+strconv.Itoa(i), ""), "a", "b"))
		streams[i] = s
	}
	for _, s := range streams {
		s.Ack(s.Expect(), "a", "b")
	}
	// Every ACK is taken before counting.
	waitFor(t, func() bool {
		for _, st := range e.srv.Streams() {
			if ts := st.Types["endpoint"]; ts == nil || ts.VersionAcked != ts.VersionSent {
				return false
			}
		}
		return true
	}, "every stream to ACK")
	encodes := gatherValue(t, e, "legation_sotw_response_encodes_total")
	responses := gatherValue(t, e, "legation_sotw_responses_total", "type", "endpoint")

	r := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 2))})
	for _, s := range streams {
		resp := s.Expect()
		checkResp(t, resp, resource.Endpoint, xdstest.Version(r), "a")
		checkBodies(t, resp, xdstest.Endpoints("a", 2))
	}
	if got := gatherValue(t, e, "legation_sotw_response_encodes_total") - encodes; got != 1 {
		t.Errorf("legation_sotw_response_encodes_total grew by %v for one change sent to %d streams, want 1", got, n)
	}
	if got := gatherValue(t, e, "legation_sotw_responses_total", "type", "endpoint") - responses; got != n {
		t.Errorf("legation_sotw_responses_total{type=endpoint} grew by %v, want %d", got, n)
	}
}

// Rule 14: a client that does not read blocks only itself; when it reads
// again it gets the latest state, skipping what it missed.
func TestSotWSlowClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Each CDS response is over 64 KiB, the client's window: a stream that
	// does not read blocks the server's sends to it after a few.
	big := xdstest.Cluster("big", 1)
	pad, err := structpb.NewStruct(map[string]any{"pad": strings.Repeat("x", 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	big.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"test": pad}}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", big), xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 0))})

	slow, cancelSlow := e.stalledADS(t)
	if err := slow.Send(sotwRequest(resource.Cluster, xdstest.Node("slow", ""))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, st := range e.srv.Streams() {
			if st.NodeID == "slow" && st.Types["cluster"] != nil && st.Types["cluster"].VersionSent != "" {
				return true
			}
		}
		return false
	}, "the slow stream's first response to go out")
	fast := e.adsStream(t)
	fast.Send(sotwRequest(resource.Cluster, xdstest.Node("fast", "")))
	fast.Ack(fast.Expect())

	const applies = 50
	var last int64
	for i := int64(1); i <= applies; i++ {
		last = e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", i))})
	}
	// The fast stream has the latest without the slow one reading a byte.
	for {
		resp := fast.Expect()
		fast.Ack(resp)
		if resp.GetVersionInfo() == xdstest.Version(last) {
			checkBodies(t, resp, xdstest.Cluster("a", applies), big)
			break
		}
	}

	got := 0
	prev := int64(0)
	for {
		resp, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got++
		v, err := strconv.ParseInt(resp.GetVersionInfo(), 10, 64)
		if err != nil || v <= prev {
			t.Fatalf("response %d: version %q after %d", got, resp.GetVersionInfo(), prev)
		}
		prev = v
		if err := slow.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if v == last {
			checkBodies(t, resp, xdstest.Cluster("a", applies), big)
			break
		}
	}
	t.Logf("the slow stream got %d responses for %d changes", got, applies+1)
	if got >= applies {
		t.Errorf("the slow stream got %d responses for %d changes: want them coalesced", got, applies+1)
	}
	// Nothing more: it has converged.
	rest := xdstest.NewSotW(t, slow, cancelSlow)
	rest.ExpectNone()
}

// sotwRequest is a first request for typ naming names (none: wildcard).
func sotwRequest(typ *resource.Type, n *corev3.Node, names ...string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: n, TypeUrl: typ.URL, ResourceNames: names}
}

// subscribeAll subscribes s to types in order (names[type], none:
// wildcard), ACKing each first response.
func subscribeAll(t *testing.T, s *xdstest.SotWStream, types []*resource.Type, names map[*resource.Type][]string) {
	t.Helper()
	for i, typ := range types {
		var n *corev3.Node
		if i == 0 {
			n = xdstest.Node("mbb", "")
		}
		s.Send(sotwRequest(typ, n, names[typ]...))
		resp := s.Expect()
		if resp.GetTypeUrl() != typ.URL {
			t.Fatalf("got a %s response, want %s", resp.GetTypeUrl(), typ)
		}
		s.Ack(resp, names[typ]...)
	}
}

// expectNoneOn fails the test if any of streams gets a response within
// the short timeout (waited once for all).
func expectNoneOn(t *testing.T, streams ...*xdstest.SotWStream) {
	t.Helper()
	time.Sleep(xdstest.ShortTimeout)
	for _, s := range streams {
		select {
		case r := <-s.Recv():
			if r.Err != nil {
				t.Fatalf("stream ended: %v", r.Err)
			}
			t.Fatalf("unexpected response: %s", xdstest.Summary(r.Resp))
		default:
		}
	}
}

// respSummary is what checkResp compares.
type respSummary struct {
	TypeURL string
	Version string
	Names   []string
}

// checkResp fails the test unless resp is of typ at version and holds
// exactly the resources named want, in that order.
func checkResp(t *testing.T, resp *discoveryv3.DiscoveryResponse, typ *resource.Type, version string, want ...string) {
	t.Helper()
	got := respSummary{resp.GetTypeUrl(), resp.GetVersionInfo(), xdstest.Names(t, resp)}
	if diff := cmp.Diff(respSummary{typ.URL, version, want}, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("response (nonce %q) differs (-want +got):\n%s", resp.GetNonce(), diff)
	}
}

// checkBodies fails the test unless the resources of resp are want, in
// order.
func checkBodies(t *testing.T, resp *discoveryv3.DiscoveryResponse, want ...proto.Message) {
	t.Helper()
	res := resp.GetResources()
	got := make([]proto.Message, 0, len(res))
	for _, a := range res {
		typ, ok := resource.ByURL(a.GetTypeUrl())
		if !ok {
			t.Fatalf("resource of unknown type %q", a.GetTypeUrl())
		}
		m, err := resource.Unmarshal(typ, a.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("resources differ (-want +got):\n%s", diff)
	}
}

// gatherValue returns the sum of the samples of metric name whose labels
// include the given name, value pairs; 0 if none.
func gatherValue(t *testing.T, e *env, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// streamStatus returns the status of the open stream of node id.
func streamStatus(t *testing.T, e *env, id string) sotw.StreamStatus {
	t.Helper()
	for _, st := range e.srv.Streams() {
		if st.NodeID == id {
			return st
		}
	}
	t.Fatalf("no open stream of node %q in Streams()", id)
	return sotw.StreamStatus{}
}

// waitFor polls cond until it holds, failing the test after the long
// timeout.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	xdstest.WaitFor(t, what, func() (bool, string) { return cond(), "" })
}

// advanceOutsidePrefix writes a key outside the prefix and makes the view
// publish a snapshot at its revision, which holds no change: every stream
// wakes up to nothing.
func advanceOutsidePrefix(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	pr, err := e.Client.Put(ctx, "/elsewhere/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.View.WaitRevision(ctx, pr.Header.Revision); err != nil {
		t.Fatal(err)
	}
}

// openStream opens a stream with open on a new connection.
func (e *env) openStream(tb testing.TB, open func(context.Context, *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error)) *xdstest.SotWStream {
	tb.Helper()
	return &xdstest.SotWStream{Stream: xdstest.Open(tb, e.conn(tb), open)}
}

func (e *env) cdsStream(tb testing.TB) *xdstest.SotWStream {
	return e.openStream(tb, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return cdsv3.NewClusterDiscoveryServiceClient(cc).StreamClusters(ctx)
	})
}

func (e *env) edsStream(tb testing.TB) *xdstest.SotWStream {
	return e.openStream(tb, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return edsv3.NewEndpointDiscoveryServiceClient(cc).StreamEndpoints(ctx)
	})
}

func (e *env) ldsStream(tb testing.TB) *xdstest.SotWStream {
	return e.openStream(tb, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return ldsv3.NewListenerDiscoveryServiceClient(cc).StreamListeners(ctx)
	})
}

func (e *env) rdsStream(tb testing.TB) *xdstest.SotWStream {
	return e.openStream(tb, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
		return rdsv3.NewRouteDiscoveryServiceClient(cc).StreamRoutes(ctx)
	})
}

// stalledADS opens an ADS stream that nothing reads unless the test calls
// Recv (xdstest.NewSotW can take it over later, with cancel), on a
// connection of its own with fixed 64 KiB flow-control windows (no BDP
// growth), so that a server writing to it blocks soon. cancel ends it.
func (e *env) stalledADS(t *testing.T) (s grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], cancel context.CancelFunc) {
	t.Helper()
	cc := xdstest.Dial(t, e.addr, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	// Bounds the test's Recv calls, which have no timeout of their own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.Timeout)
	t.Cleanup(cancel)
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, cancel
}

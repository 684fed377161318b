package delta_test

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// The wildcard rules of xds_protocol.rst on delta streams: its sections
// "How the client specifies what resources to return" (with the
// incremental example, step by step), "Unsubscribing from Resources"
// and the reconnect paragraph of "Incremental xDS"; one case per
// sentence or bullet, each quoting what it checks.
func TestDeltaWildcardRules(t *testing.T) {
	t.Parallel()
	node := &corev3.Node{Id: "n1", Cluster: "g1"}
	runScripts(t, []script{
		// "How the client specifies ...": "there is also a "wildcard"
		// subscription, which is triggered when subscribing to the
		// special name `*`."
		{name: "explicit * subscribes to every cluster", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaCDS),
			send(&dreq{Node: node, ResourceNamesSubscribe: []string{"*"}}),
			expect(resource.Cluster, "*", vers{"a": 1, "b": 1}), ack(),
			apply(cds("c", 1)),
			expect(resource.Cluster, "a new cluster under *", vers{"c": 2}), ack(),
			wantDeltaWildcard(resource.Cluster, true, 0),
		}},
		// "How the client specifies ...": the first request names
		// nothing, so it has "never sent a request on the stream for
		// that resource type with a non-empty resource_names_subscribe
		// field"; later empty requests (ACKs) keep the wildcard.
		{name: "legacy wildcard", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "legacy wildcard", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL}),
			none(),
			apply(cds("c", 1)),
			expect(resource.Cluster, "a new cluster under the legacy wildcard", vers{"c": 2}), ack(),
			wantDeltaWildcard(resource.Cluster, true, 0),
		}},
		// Reconnect paragraph: "the request must either specify `*` in
		// the resource_names_subscribe field or (legacy behavior) the
		// request must have no resources in both
		// resource_names_subscribe and resource_names_unsubscribe." A
		// first request that only unsubscribes is taken by this rule:
		// not a wildcard.
		{name: "a first request that only unsubscribes is no wildcard", steps: []step{
			apply(cds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a"}}),
			expect(resource.Cluster, "first answer, empty", nil), ack(),
			wantDeltaWildcard(resource.Cluster, false, 0),
			apply(cds("a", 2), cds("b", 2)),
			none(),
		}},
		// Reconnect paragraph, the `*` form: a first request with `*`
		// and initial_resource_versions resumes the wildcard; what the
		// client holds at its version is not sent again.
		{name: "reconnect with * resumes the wildcard", steps: []step{
			apply(cds("a", 1), cds("b", 1), cds("c", 1)),
			apply(cds("b", 2)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*"},
				InitialResourceVersions: map[string]string{"a": "@1", "b": "@1", "gone": "@1"}}),
			expect(resource.Cluster, "resumed *", vers{"b": 2, "c": 1}, "gone"), ack(),
			wantDeltaWildcard(resource.Cluster, true, 0),
			apply(cds("d", 3)),
			expect(resource.Cluster, "a new cluster under the resumed *", vers{"d": 3}), ack(),
		}},
		// Reconnect, `*` with explicit names presented: held names are
		// not forced (they say what the client holds), the rest is sent.
		{name: "reconnect with * and names", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaCDS),
			send(&dreq{Node: node, ResourceNamesSubscribe: []string{"*", "a", "x"},
				InitialResourceVersions: map[string]string{"a": "@1"}}),
			expect(resource.Cluster, "resumed * + a + x", vers{"b": 1}, "x"), ack(),
			wantDeltaWildcard(resource.Cluster, true, 2),
		}},
		// "Unsubscribing from Resources": "the server must send a
		// response that includes the specific resource ... in the
		// resources field (if it *is* included in the wildcard)."
		{name: "unsubscribing a name the wildcard covers resends it", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*", "a"}}),
			expect(resource.Cluster, "* + a", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a"}}),
			expect(resource.Cluster, "a under * after its unsubscription", vers{"a": 1}), ack(),
			wantDeltaWildcard(resource.Cluster, true, 0),
			apply(cds("a", 2)),
			expect(resource.Cluster, "a still under *", vers{"a": 2}), ack(),
		}},
		// The same, "... in either the removed_resources field (if it is
		// not included in the wildcard)": x exists only in another
		// group, so the node's wildcard does not include it.
		{name: "unsubscribing a name the wildcard lacks removes it", steps: []step{
			apply(cds("a", 1), cdsIn("g2", "x", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*", "x"}}),
			expect(resource.Cluster, "* + x", vers{"a": 1}, "x"), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"x"}}),
			expect(resource.Cluster, "x removed after its unsubscription", nil, "x"), ack(),
			apply(cdsIn("g2", "x", 2)),
			none(),
		}},
		// The same on the legacy wildcard, which a subscription to a
		// name does not end.
		{name: "unsubscribing a name under the legacy wildcard", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaCDS),
			send(&dreq{Node: node}),
			expect(resource.Cluster, "legacy wildcard", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{ResourceNamesSubscribe: []string{"b"}}),
			expect(resource.Cluster, "b subscribed, sent again", vers{"b": 1}), ack(),
			send(&dreq{ResourceNamesUnsubscribe: []string{"b"}}),
			expect(resource.Cluster, "b under the wildcard", vers{"b": 1}), ack(),
			wantDeltaWildcard(resource.Cluster, true, 0),
		}},
		// No wildcard stays: a request unsubscribing `*` and the name
		// together leaves the client subscribed to nothing; there is no
		// ambiguity to answer.
		{name: "unsubscribing * and a name together sends nothing", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*", "a"}}),
			expect(resource.Cluster, "* + a", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a", "*"}}),
			none(),
			wantDeltaWildcard(resource.Cluster, false, 0),
			apply(cds("a", 2), cds("b", 2)),
			none(),
		}},
		// "Unsubscribing from Resources": "the client cannot unsubscribe
		// from those resources individually; it can only unsubscribe
		// from the wildcard as a whole." Unsubscribing a name only the
		// wildcard covers changes nothing (a phantom unsubscription).
		{name: "a wildcard resource cannot be unsubscribed alone", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"*"}}),
			expect(resource.Cluster, "*", vers{"a": 1, "b": 1}), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesUnsubscribe: []string{"a"}}),
			none(),
			apply(cds("a", 2)),
			expect(resource.Cluster, "a still under *", vers{"a": 2}), ack(),
		}},
		incrementalExample("incremental example on CDS", (*env).deltaCDS, resource.Cluster,
			func(n string, i int) res { return cds(n, int64(i)) }),
		incrementalExample("incremental example on LDS", (*env).deltaADS, resource.Listener,
			func(n string, i int) res { return lds(store.DefaultScope, n, fmt.Sprint(n, i)) }),
	})
}

// incrementalExample is the incremental example of xds_protocol.rst's
// "How the client specifies what resources to return", step by step, on
// a stream opened with o for LDS/CDS-like type typ, whose resources mk
// makes (the name, a number that makes versions differ).
func incrementalExample(name string, o func(*env, testing.TB) *xdstest.DeltaStream, typ *resource.Type, mk func(string, int) res) script {
	req := func(sub, unsub []string) *dreq {
		return &dreq{TypeUrl: typ.URL, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
	}
	return script{name: name, steps: []step{
		apply(mk("A", 1), mk("B", 1)),
		open(o),
		// "Client sends a request with resource_names_subscribe unset.
		// Server interprets this as a subscription to `*`."
		send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: typ.URL}),
		expect(typ, "unset", vers{"A": 1, "B": 1}), ack(),
		wantDeltaWildcard(typ, true, 0),
		// "Client sends a request with resource_names_subscribe set to
		// `A`. Server interprets this as continuing the existing
		// subscription to `*` and adding a new subscription to `A`." A
		// is sent again, though held: "the server *must* still provide
		// those resources in the response."
		send(req([]string{"A"}, nil)),
		expect(typ, "A subscribed", vers{"A": 1}), ack(),
		wantDeltaWildcard(typ, true, 1),
		apply(mk("C", 2)),
		expect(typ, "C under *", vers{"C": 2}), ack(),
		// "Client sends a request with resource_names_unsubscribe set to
		// `*`. Server interprets this as unsubscribing to `*` and
		// continuing the existing subscription to `A`." The client drops
		// what only the wildcard gave it: nothing to send.
		send(req(nil, []string{"*"})),
		none(),
		wantDeltaWildcard(typ, false, 1),
		apply(mk("B", 3), mk("C", 3)),
		none(),
		apply(mk("A", 4)),
		expect(typ, "A still subscribed", vers{"A": 4}), ack(),
		// "Client sends a request with resource_names_unsubscribe set to
		// `A`. ... Although the set of subscribed resources is now empty,
		// just as it was after the initial request, it is not
		// interpreted as a wildcard subscription".
		send(req(nil, []string{"A"})),
		none(),
		wantDeltaWildcard(typ, false, 0),
		// An empty request afterwards (no nonce, nothing subscribed) does
		// not bring the wildcard back either.
		send(req(nil, nil)),
		none(),
		wantDeltaWildcard(typ, false, 0),
		apply(mk("A", 5), mk("D", 5)),
		none(),
	}}
}

// wantDeltaWildcard waits until the status of typ on the stream of node
// n1 says wildcard and subscribed (explicit names, "*" left out).
func wantDeltaWildcard(typ *resource.Type, wildcard bool, subscribed int) step {
	return func(r *scriptRun) {
		r.t.Helper()
		streamStatus(r.t, r.e, "n1", func(s delta.StreamStatus) bool {
			ts := typeStatus(s, typ)
			return ts.Wildcard == wildcard && ts.Subscribed == subscribed
		})
	}
}

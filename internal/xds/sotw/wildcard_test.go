package sotw_test

import (
	"fmt"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// The wildcard rules of xds_protocol.rst, section "How the client
// specifies what resources to return", on SotW streams: one case per
// sentence or bullet of its SotW example, each quoting what it checks.
// Full-state types (LDS, CDS) answer a change of names with the whole
// set the client then subscribes to, so every step of the example is
// answered and the response says what the client holds.
func TestSotWWildcardRules(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		// "For Listener and Cluster resource types, there is also a
		// "wildcard" subscription, which is triggered when subscribing
		// to the special name `*`."
		{name: "explicit * subscribes to every listener", steps: []step{
			apply(lds("l1", "r"), lds("l2", "r")),
			open((*env).ldsStream),
			send(sotwRequest(resource.Listener, xdstest.Node("n1", ""), "*")),
			expect(resource.Listener, at(1), "l1", "l2"), ack("*"),
			apply(lds("l3", "r")),
			expect(resource.Listener, at(2), "l1", "l2", "l3"), ack("*"),
			wantWildcard(resource.Listener, "n1", true, 0),
		}},
		// "if the client ... has never explicitly subscribed to any
		// resource names (i.e., in SotW, all requests on the stream for
		// that resource type have had an empty resource_names field
		// ...), the server should treat that identically to ... `*`."
		{name: "legacy wildcard while every request is empty", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""))),
			expect(resource.Cluster, at(1), "a", "b"), ack(),
			apply(cds("c", 1)),
			expect(resource.Cluster, at(2), "a", "b", "c"), ack(),
			// The same empty request again is still the wildcard.
			ack(),
			none(),
			apply(cds("a", 2)),
			expect(resource.Cluster, at(3), "a", "b", "c"), ack(),
			wantWildcard(resource.Cluster, "n1", true, 0),
		}},
		// "For Listener and Cluster resource types, there is also a
		// "wildcard" subscription": an empty first request of another
		// type subscribes to nothing.
		{name: "no legacy wildcard for endpoints", steps: []step{
			apply(eds("a", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, xdstest.Node("n1", ""))),
			expect(resource.Endpoint, at(1)), ack(),
			apply(eds("a", 2)),
			none(),
			wantWildcard(resource.Endpoint, "n1", false, 0),
		}},
		// "once the client does explicitly subscribe to a resource
		// name (whether it be `*` or any other name), then this legacy
		// semantic is no longer available; at that point, clearing the
		// list of subscribed resources is interpretted as an
		// unsubscription". Here after `*`.
		{name: "empty after * unsubscribes everything", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""), "*")),
			expect(resource.Cluster, at(1), "a", "b"), ack("*"),
			ack(),
			expect(resource.Cluster, at(1)), ack(), // the client holds nothing
			wantWildcard(resource.Cluster, "n1", false, 0),
			apply(cds("a", 2), cds("c", 1)),
			none(),
		}},
		// The same after a name other than `*`, on the type's first
		// request.
		{name: "empty after a name unsubscribes everything", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).cdsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""), "a")),
			expect(resource.Cluster, at(1), "a"), ack("a"),
			ack(),
			expect(resource.Cluster, at(1)), ack(),
			wantWildcard(resource.Cluster, "n1", false, 0),
			apply(cds("a", 2), cds("b", 2)),
			none(),
		}},
		// "once the client does explicitly subscribe to a resource name
		// ... this legacy semantic is no longer available": a legacy
		// wildcard that names a resource leaves the wildcard.
		{name: "legacy wildcard then a name", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""))),
			expect(resource.Cluster, at(1), "a", "b"), ack(),
			ack("a"),
			expect(resource.Cluster, at(1), "a"), ack("a"),
			wantWildcard(resource.Cluster, "n1", false, 1),
			apply(cds("b", 2)),
			none(),
		}},
		// Section "Unsubscribing from Resources": "the client cannot unsubscribe from those resources
		// individually; it can only unsubscribe from the wildcard as a
		// whole." Dropping the name a while `*` stays keeps a.
		{name: "a name dropped under * stays", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, xdstest.Node("n1", ""), "*", "a")),
			expect(resource.Cluster, at(1), "a", "b"), ack("*", "a"),
			ack("*"),
			expect(resource.Cluster, at(1), "a", "b"), ack("*"),
			apply(cds("a", 2)),
			expect(resource.Cluster, at(2), "a", "b"), ack("*"),
			wantWildcard(resource.Cluster, "n1", true, 0),
		}},
		sotwExample("SotW example on CDS", (*env).adsStream, resource.Cluster,
			func(n string, i int) res { return cds(n, int64(i)) }),
		sotwExample("SotW example on LDS", (*env).ldsStream, resource.Listener,
			func(n string, i int) res { return ldsStat(n, "r", fmt.Sprint(i)) }),
	})
}

// sotwExample is the SotW example of xds_protocol.rst's "How the client
// specifies what resources to return", step by step, on a stream opened
// with o for full-state type typ, whose resources mk makes (the name, a
// number that makes versions differ).
func sotwExample(name string, o func(*env, testing.TB) *xdstest.SotWStream, typ *resource.Type, mk func(string, int) res) script {
	return script{name: name, steps: []step{
		apply(mk("A", 1), mk("B", 1)),
		open(o),
		// "Client sends a request with resource_names unset. Server
		// interprets this as a subscription to `*`."
		send(sotwRequest(typ, xdstest.Node("n1", ""))),
		expect(typ, at(1), "A", "B"), ack(),
		wantWildcard(typ, "n1", true, 0),
		// "Client sends a request with resource_names set to `*` and
		// `A`. Server interprets this as continuing the existing
		// subscription to `*` and adding a new subscription to `A`."
		ack("*", "A"),
		expect(typ, at(1), "A", "B"), ack("*", "A"),
		wantWildcard(typ, "n1", true, 1),
		apply(mk("C", 2)),
		expect(typ, at(2), "A", "B", "C"), ack("*", "A"),
		// "Client sends a request with resource_names set to `A`. Server
		// interprets this as unsubscribing to `*` and continuing the
		// existing subscription to `A`." A full-state response replaces
		// what the client holds: it carries only A.
		ack("A"),
		expect(typ, at(2), "A"), ack("A"),
		wantWildcard(typ, "n1", false, 1),
		apply(mk("B", 3)),
		none(),
		apply(mk("A", 4)),
		expect(typ, at(4), "A"), ack("A"),
		// "Client sends a request with resource_names unset. Server
		// interprets this as unsubscribing to `A` (i.e., the client has
		// now unsubscribed to all resources). ... it is not interpreted
		// as a wildcard subscription". The empty response tells the
		// client it holds nothing.
		ack(),
		expect(typ, at(4)), ack(),
		wantWildcard(typ, "n1", false, 0),
		apply(mk("A", 5), mk("D", 5)),
		none(),
	}}
}

// wantWildcard waits until the status of typ on node id's stream says
// wildcard and subscribed (explicit names, "*" left out).
func wantWildcard(typ *resource.Type, id string, wildcard bool, subscribed int) step {
	return func(r *scriptRun) {
		r.t.Helper()
		xdstest.WaitFor(r.t, typ.Name+" status", func() (bool, string) {
			var got sotw.TypeStatus
			if ts := streamStatus(r.t, r.e, id).Types[typ.Name]; ts != nil {
				got = *ts
			}
			return got.Wildcard == wildcard && got.Subscribed == subscribed,
				fmt.Sprintf("wildcard %v, subscribed %d; want %v, %d", got.Wildcard, got.Subscribed, wildcard, subscribed)
		})
	}
}

package delta_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// On-demand CDS: Envoy's on_demand HTTP filter (odcds) asks for a cluster
// when a request needs it, over delta CDS with named subscriptions only.
// xds_protocol.rst ("Incremental xDS") names it: the protocol "Allows the
// Envoy to on-demand / lazily request additional resources. For example,
// requesting a cluster only when a request for that cluster arrives."
// The cases run on the per-type DeltaClusters service and on delta ADS.
func TestDeltaOnDemandCDS(t *testing.T) {
	t.Parallel()
	openers := []struct {
		name string
		open func(*env, testing.TB) *xdstest.DeltaStream
	}{
		{"DeltaClusters", (*env).deltaCDS},
		{"delta ADS", (*env).deltaADS},
	}
	var scripts []script
	for _, o := range openers {
		scripts = append(scripts, onDemandByName(o.name+": clusters by name only", o.open),
			onDemandResume(o.name+": reconnect presents the clusters held", o.open))
	}
	scripts = append(scripts, onDemandUnderWildcard("delta ADS: on-demand names beside a wildcard"))
	runScripts(t, scripts)
}

// cdsReq is a delta CDS request subscribing sub.
func cdsReq(sub ...string) *dreq {
	return &dreq{TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: sub}
}

// onDemandByName: a first request naming c1 is no wildcard; each later
// name is answered with itself only; a cluster that does not exist is
// removed, then sent when created; a cluster not subscribed is never
// sent.
func onDemandByName(name string, o func(*env, testing.TB) *xdstest.DeltaStream) script {
	return script{name: name, steps: []step{
		apply(cds("c1", 1), cds("c2", 1), cds("c3", 1), cds("other", 1)),
		open(o),
		send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"c1"}}),
		expect(resource.Cluster, "c1 on demand", vers{"c1": 1}), ack(),
		wantDeltaWildcard(resource.Cluster, false, 1),
		apply(cds("other", 2)),
		none(),
		send(cdsReq("c2")),
		expect(resource.Cluster, "c2 on demand", vers{"c2": 1}), ack(),
		send(cdsReq("c3")),
		expect(resource.Cluster, "c3 on demand", vers{"c3": 1}), ack(),
		// A cluster asked for before it exists: removed, then sent once
		// created.
		send(cdsReq("later")),
		expect(resource.Cluster, "later does not exist", nil, "later"), ack(),
		apply(cds("later", 3)),
		expect(resource.Cluster, "later created", vers{"later": 3}), ack(),
		// New and changed clusters not asked for are not sent; the
		// subscribed ones are.
		apply(cds("new", 4), cds("other", 4)),
		none(),
		apply(cds("c2", 5)),
		expect(resource.Cluster, "c2 changed", vers{"c2": 5}), ack(),
		// An empty request (no names) does not turn it into a wildcard.
		send(cdsReq()),
		none(),
		apply(cds("other", 6)),
		none(),
		wantDeltaWildcard(resource.Cluster, false, 4),
	}}
}

// onDemandResume: an Envoy reconnecting resubscribes the clusters it
// asked for, presenting their versions: only what changed is sent, no
// wildcard.
func onDemandResume(name string, o func(*env, testing.TB) *xdstest.DeltaStream) script {
	return script{name: name, steps: []step{
		apply(cds("c1", 1), cds("c2", 1), cds("other", 1)),
		apply(cds("c2", 2)),
		open(o),
		send(&dreq{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"c1", "c2"},
			InitialResourceVersions: map[string]string{"c1": "@1", "c2": "@1"}}),
		expect(resource.Cluster, "resumed on-demand clusters", vers{"c2": 2}), ack(),
		wantDeltaWildcard(resource.Cluster, false, 2),
		apply(cds("other", 3)),
		none(),
	}}
}

// onDemandUnderWildcard: an Envoy with a wildcard CDS subscription that
// also asks on demand (by the filter, or for a cluster it lost). A name
// the wildcard covers is sent again ("Incremental xDS": a subscribed
// name the client holds at the latest version "the server *must* still
// provide"); a name no cluster visible to the node has (here: another
// group's) is removed, and its group's changes are not sent.
func onDemandUnderWildcard(name string) script {
	return script{name: name, steps: []step{
		apply(cds("a", 1), cds("b", 1), cdsIn("g1", "mine", 1), cdsIn("g2", "theirs", 1)),
		open((*env).deltaADS),
		send(&dreq{Node: &corev3.Node{Id: "n1", Cluster: "g1"}, TypeUrl: resource.Cluster.URL}),
		expect(resource.Cluster, "wildcard", vers{"a": 1, "b": 1, "mine": 1}), ack(),
		send(cdsReq("b")),
		expect(resource.Cluster, "b on demand, though held", vers{"b": 1}), ack(),
		send(cdsReq("theirs")),
		expect(resource.Cluster, "another group's cluster", nil, "theirs"), ack(),
		apply(cdsIn("g2", "theirs", 2)),
		none(),
		wantDeltaWildcard(resource.Cluster, true, 2),
		apply(cds("c", 3)),
		expect(resource.Cluster, "a new cluster under the wildcard", vers{"c": 3}), ack(),
	}}
}

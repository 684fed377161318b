package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

const (
	cdsURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// TestDeltaAcrossReplicas: two xds-node processes on one etcd give
// identical per-resource versions (promise 2); a delta client that moves
// from one to the other with its initial_resource_versions gets only what
// changed (promise 4).
//
// Replicas r1 and r2 run as real processes of the xds-node binary
// (internal/tools/localcluster, without HAProxy), standalone: each serves the
// streams that land on it, as this test is about global versions across
// replicas, not node affinity. A raw delta ADS client on each subscribes to every cluster
// (legacy wildcard CDS) and to three named endpoint sets, and ACKs: both
// hold the same name -> version maps, each version the mod_revision of the
// resource's etcd key, and the same system_version_info. Then the client
// on r1 goes away, one cluster changes and another is deleted, and it
// reconnects to r2 presenting what it holds: its first response is the
// changed cluster and the deleted one's removal, nothing else, and it then
// holds exactly what r2's other client holds.
func TestDeltaAcrossReplicas(t *testing.T) {
	checkLeaks(t)
	etcd := storetest.Start(t, storetest.Options{})
	admin := &env{etcd: etcd} // for apply and xdsadmin only: no in-process node
	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.EtcdEndpoints = 0, []string{etcd.Endpoint}
	cfg.Replicas, cfg.HAProxy = 2, false
	cfg.XDSNodeFlags = []string{"--standalone", "--shutdown-timeout", "2s", "--drain-period", "1s"}
	c := localcluster.StartForTest(t, cfg)
	r1, r2 := c.Replicas()[0], c.Replicas()[1]

	// Two revisions, so versions differ per resource: c-b is at rev2, the
	// other clusters and every endpoint set at rev1.
	rev1 := admin.apply(t, strings.Join([]string{
		deltaClusterYAML("c-a", "1s"), deltaClusterYAML("c-b", "1s"), deltaClusterYAML("c-c", "1s"),
		deltaEndpointsYAML("c-a", 10001), deltaEndpointsYAML("c-b", 10002), deltaEndpointsYAML("c-c", 10003),
	}, "---\n"))
	rev2 := admin.apply(t, deltaClusterYAML("c-b", "2s"))
	c.WaitRevision(rev2)

	edsNames := []string{"c-a", "c-b", "c-c"}
	mover := dialDelta(t, r1.XDSAddr, "mover")
	mover.subscribe(t, edsNames)
	stayer := dialDelta(t, r2.XDSAddr, "stayer")
	stayer.subscribe(t, edsNames)

	v1, v2 := strconv.FormatInt(rev1, 10), strconv.FormatInt(rev2, 10)
	wantHeld := map[string]map[string]string{
		cdsURL: {"c-a": v1, "c-b": v2, "c-c": v1},
		edsURL: {"c-a": v1, "c-b": v1, "c-c": v1},
	}
	wantSystem := map[string]string{cdsURL: v2, edsURL: v2}
	for _, c := range []*deltaClient{mover, stayer} {
		if diff := cmp.Diff(wantHeld, c.held); diff != "" {
			t.Errorf("%s: name -> version held (-want +got; versions are the keys' mod_revisions):\n%s", c, diff)
		}
		checkSystem(t, c, wantSystem)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The mover leaves r1 (its load balancer will pick r2 next); while it
	// is away c-a changes and c-c goes.
	held := mover.held
	heldSystem := mover.system
	mover.Cancel()
	rev3 := admin.apply(t, deltaClusterYAML("c-a", "3s"))
	rev4 := admin.delete(t, "cluster", "c-c")
	c.WaitRevision(rev4)
	v3, v4 := strconv.FormatInt(rev3, 10), strconv.FormatInt(rev4, 10)

	notResentBefore := metricAt(t, r2.HTTPAddr, "legation_delta_resources_not_resent_total", "")
	moved := dialDelta(t, r2.XDSAddr, "mover")
	moved.held, moved.system = held, heldSystem
	start := time.Now()
	moved.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node:                    moved.node,
		TypeUrl:                 cdsURL,
		InitialResourceVersions: held[cdsURL],
	})
	moved.Send(&discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:                 edsURL,
		ResourceNamesSubscribe:  edsNames,
		InitialResourceVersions: held[edsURL],
	})
	first := moved.Expect()
	t.Logf("first response on r2 %s after the reconnect", time.Since(start).Round(time.Millisecond))
	if got, want := xdstest.Summary(first), fmt.Sprintf("%s system=%s resources=[c-a@%s] removed=[c-c]", cdsURL, first.GetSystemVersionInfo(), v3); got != want || !atLeast(first.GetSystemVersionInfo(), v4) {
		t.Fatalf("first response to the client moved to r2:\n got %s\nwant %s, at system version %s or later", got, want, v4)
	}
	moved.apply(first)
	moved.Ack(first)
	moved.ExpectNone()

	// r2's other client followed the same changes live: both now hold the
	// same.
	wantHeld[cdsURL] = map[string]string{"c-a": v3, "c-b": v2}
	wantSystem[cdsURL] = v4
	stayer.follow(t, func() bool { return cmp.Equal(stayer.held, wantHeld) })
	for _, c := range []*deltaClient{moved, stayer} {
		if diff := cmp.Diff(wantHeld, c.held); diff != "" {
			t.Errorf("%s: name -> version held after the changes (-want +got):\n%s", c, diff)
		}
		checkSystem(t, c, wantSystem)
	}

	// r2 counts what it did not resend (c-b and the three endpoint sets)
	// and shows the moved stream holding what it presented, ACKed.
	if got, want := metricAt(t, r2.HTTPAddr, "legation_delta_resources_not_resent_total", "")-notResentBefore, 4.0; got != want {
		t.Errorf("r2 legation_delta_resources_not_resent_total rose by %v for the moved client, want %v (c-b and 3 endpoint sets)", got, want)
	}
	wantStatus := map[string]map[string]xdstest.ResourceStatus{
		"cluster":  {"c-a": {VersionSent: v3, VersionAcked: v3}, "c-b": {VersionSent: v2, VersionAcked: v2}},
		"endpoint": {"c-a": {VersionSent: v1, VersionAcked: v1}, "c-b": {VersionSent: v1, VersionAcked: v1}, "c-c": {VersionSent: v1, VersionAcked: v1}},
	}
	waitFor(t, "r2 /debug/streams: the moved stream's resource versions ACKed", func() (bool, string) {
		st := deltaStreamAt(t, r2.HTTPAddr, "mover")
		if st == nil {
			return false, "no delta stream for node mover"
		}
		got := map[string]map[string]xdstest.ResourceStatus{}
		for typ, ts := range st.Types {
			got[typ] = ts.Resources
		}
		if diff := cmp.Diff(wantStatus, got); diff != "" {
			return false, "(-want +got):\n" + diff
		}
		if cds := st.Types["cluster"]; cds.SystemVersionAcked != v4 {
			return false, fmt.Sprintf("cluster system_version_acked %q, want %s", cds.SystemVersionAcked, v4)
		}
		return true, ""
	})
}

// deltaClusterYAML is an EDS cluster (over ADS) named name.
func deltaClusterYAML(name, connectTimeout string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: %[1]s
type: EDS
eds_cluster_config:
  eds_config:
    ads: {}
    resource_api_version: V3
  service_name: %[1]s
connect_timeout: %[2]s
`, name, connectTimeout)
}

// deltaEndpointsYAML is the endpoint set of cluster name: 127.0.0.1:port.
func deltaEndpointsYAML(name string, port int) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: %s
endpoints:
- lb_endpoints:
  - endpoint:
      address:
        socket_address:
          address: 127.0.0.1
          port_value: %d
`, name, port)
}

// delete runs `xdsadmin -o json delete TYPE NAME...` in-process, fails the
// test unless it succeeds, and returns the revision it made.
func (e *env) delete(t *testing.T, typ string, names ...string) int64 {
	t.Helper()
	out, errOut, code := e.xdsadmin("", append([]string{"-o", "json", "delete", typ}, names...)...)
	if code != 0 {
		t.Fatalf("xdsadmin delete %s %v: exit %d\nstdout:\n%s\nstderr:\n%s", typ, names, code, out, errOut)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Revision <= 0 {
		t.Fatalf("xdsadmin delete -o json: no revision (%v) in:\n%s", err, out)
	}
	return res.Revision
}

// deltaStreamAt returns the /debug/streams entry of the delta stream of
// node id on the replica whose HTTP server is on addr, or nil if there is
// none.
func deltaStreamAt(t *testing.T, addr, id string) *xdstest.DeltaStatus {
	t.Helper()
	code, body, err := httpGet(addr, "/debug/streams")
	if err != nil || code != http.StatusOK {
		t.Fatalf("replica %s GET /debug/streams: %d %v %s", addr, code, err, body)
	}
	var got xdstest.DebugStreams
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("replica %s /debug/streams: %v\n%s", addr, err, body)
	}
	for i := range got.DeltaStreams {
		if got.DeltaStreams[i].NodeID == id {
			return &got.DeltaStreams[i]
		}
	}
	return nil
}

// deltaClient is a raw delta ADS client, playing Envoy by hand: it sends
// the node on its first request only, keeps what it holds per type (name
// -> version) and the last system_version_info per type. Its stream waits
// the e2e timeouts.
type deltaClient struct {
	*xdstest.DeltaStream
	id   string
	addr string
	node *corev3.Node

	held   map[string]map[string]string // type URL -> name -> version
	system map[string]string            // type URL -> system_version_info
}

// dialDelta opens a DeltaAggregatedResources stream to addr for node id
// (group c1) on a connection of its own; it is closed when the test ends,
// if not before (Cancel).
func dialDelta(t *testing.T, addr, id string) *deltaClient {
	t.Helper()
	d := xdstest.OpenDelta(t, xdstest.Dial(t, addr))
	d.SetTimeouts(testTimeout, testShortTimeout)
	return &deltaClient{DeltaStream: d, id: id, addr: addr, node: &corev3.Node{Id: id, Cluster: "c1"},
		held: map[string]map[string]string{}, system: map[string]string{}}
}

func (c *deltaClient) String() string { return fmt.Sprintf("delta client %s on %s", c.id, c.addr) }

// subscribe is a first connection: legacy wildcard CDS, then the named
// endpoint sets, each response applied and ACKed.
func (c *deltaClient) subscribe(t *testing.T, edsNames []string) {
	t.Helper()
	c.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: cdsURL})
	r := c.recvType(t, cdsURL)
	c.apply(r)
	c.Ack(r)
	c.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: edsNames})
	r = c.recvType(t, edsURL)
	c.apply(r)
	c.Ack(r)
}

func (c *deltaClient) recvType(t *testing.T, typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	r := c.Expect()
	if r.GetTypeUrl() != typeURL {
		t.Fatalf("%s: got %s, want a response of type %s", c, xdstest.Summary(r), typeURL)
	}
	return r
}

// apply updates what the client holds with r, as Envoy does.
func (c *deltaClient) apply(r *discoveryv3.DeltaDiscoveryResponse) {
	m := c.held[r.GetTypeUrl()]
	if m == nil {
		m = map[string]string{}
		c.held[r.GetTypeUrl()] = m
	}
	for _, res := range r.GetResources() {
		m[res.GetName()] = res.GetVersion()
	}
	for _, n := range r.GetRemovedResources() {
		delete(m, n)
	}
	c.system[r.GetTypeUrl()] = r.GetSystemVersionInfo()
}

// follow applies and ACKs responses until done holds, failing the test
// after testTimeout.
func (c *deltaClient) follow(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.After(testTimeout)
	for !done() {
		select {
		case r := <-c.Recv():
			if r.Err != nil {
				t.Fatalf("%s: stream ended: %v", c, r.Err)
			}
			c.apply(r.Resp)
			c.Ack(r.Resp)
		case <-deadline:
			t.Fatalf("%s: not there after %s; holds %v", c, testTimeout, c.held)
		}
	}
}

// checkSystem checks that c's system_version_info per type is at least
// want's: the view's revision, which also moves when replicas write their
// registry and status records, so it may be later than the last apply.
func checkSystem(t *testing.T, c *deltaClient, want map[string]string) {
	t.Helper()
	for typ, w := range want {
		if got := c.system[typ]; !atLeast(got, w) {
			t.Errorf("%s: system_version_info of %s is %q, want %s or later (the view's revision)", c, typ, got, w)
		}
	}
	if len(c.system) != len(want) {
		t.Errorf("%s: system versions for %d types, want %d: %v", c, len(c.system), len(want), c.system)
	}
}

// atLeast reports whether version got is want or later.
func atLeast(got, want string) bool {
	g, err1 := strconv.ParseInt(got, 10, 64)
	w, err2 := strconv.ParseInt(want, 10, 64)
	return err1 == nil && err2 == nil && g >= w
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/delta"
	"github.com/legation-io/legation/internal/localcluster"
	"github.com/legation-io/legation/internal/store/storetest"
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
// (internal/localcluster, without HAProxy), standalone: each serves the
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
	cfg.XDSNodeFlags = []string{"--standalone", "--shutdown-timeout", "2s"}
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
	mover.close()
	rev3 := admin.apply(t, deltaClusterYAML("c-a", "3s"))
	rev4 := admin.delete(t, "cluster", "c-c")
	c.WaitRevision(rev4)
	v3, v4 := strconv.FormatInt(rev3, 10), strconv.FormatInt(rev4, 10)

	notResentBefore := metricAt(t, r2.HTTPAddr, "legation_delta_resources_not_resent_total", "")
	moved := dialDelta(t, r2.XDSAddr, "mover")
	moved.held, moved.system = held, heldSystem
	start := time.Now()
	moved.send(t, &discoveryv3.DeltaDiscoveryRequest{
		Node:                    moved.node,
		TypeUrl:                 cdsURL,
		InitialResourceVersions: held[cdsURL],
	})
	moved.send(t, &discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:                 edsURL,
		ResourceNamesSubscribe:  edsNames,
		InitialResourceVersions: held[edsURL],
	})
	first := moved.recv(t)
	t.Logf("first response on r2 %s after the reconnect", time.Since(start).Round(time.Millisecond))
	if got, want := summarize(first), fmt.Sprintf("%s system=%s resources=[c-a@%s] removed=[c-c]", cdsURL, first.GetSystemVersionInfo(), v3); got != want || !atLeast(first.GetSystemVersionInfo(), v4) {
		t.Fatalf("first response to the client moved to r2:\n got %s\nwant %s, at system version %s or later", got, want, v4)
	}
	moved.apply(first)
	moved.ack(t, first)
	moved.expectNothing(t)

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
	wantStatus := map[string]map[string]delta.ResourceStatus{
		"cluster":  {"c-a": {VersionSent: v3, VersionAcked: v3}, "c-b": {VersionSent: v2, VersionAcked: v2}},
		"endpoint": {"c-a": {VersionSent: v1, VersionAcked: v1}, "c-b": {VersionSent: v1, VersionAcked: v1}, "c-c": {VersionSent: v1, VersionAcked: v1}},
	}
	waitFor(t, "r2 /debug/streams: the moved stream's resource versions ACKed", func() (bool, string) {
		st := deltaStreamAt(t, r2.HTTPAddr, "mover")
		if st == nil {
			return false, "no delta stream for node mover"
		}
		got := map[string]map[string]delta.ResourceStatus{}
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
func deltaStreamAt(t *testing.T, addr, id string) *delta.StreamStatus {
	t.Helper()
	code, body, err := httpGet(addr, "/debug/streams")
	if err != nil || code != http.StatusOK {
		t.Fatalf("replica %s GET /debug/streams: %d %v %s", addr, code, err, body)
	}
	var got struct {
		DeltaStreams []delta.StreamStatus `json:"delta_streams"`
	}
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
// -> version) and the last system_version_info per type.
type deltaClient struct {
	id     string
	addr   string
	node   *corev3.Node
	cc     *grpc.ClientConn
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	cancel context.CancelFunc
	resps  chan *discoveryv3.DeltaDiscoveryResponse // closed when receiving ends
	err    error                                    // why receiving ended; read once resps is closed
	once   sync.Once

	held   map[string]map[string]string // type URL -> name -> version
	system map[string]string            // type URL -> system_version_info
}

// dialDelta opens a DeltaAggregatedResources stream to addr for node id
// (group c1); it is closed when the test ends, if not before.
func dialDelta(t *testing.T, addr, id string) *deltaClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		cc.Close()
		t.Fatalf("DeltaAggregatedResources on %s: %v", addr, err)
	}
	c := &deltaClient{id: id, addr: addr, node: &corev3.Node{Id: id, Cluster: "c1"}, cc: cc, stream: stream, cancel: cancel,
		resps: make(chan *discoveryv3.DeltaDiscoveryResponse), held: map[string]map[string]string{}, system: map[string]string{}}
	go func() {
		defer close(c.resps)
		for {
			r, err := stream.Recv()
			if err != nil {
				c.err = err
				return
			}
			select {
			case c.resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *deltaClient) String() string { return fmt.Sprintf("delta client %s on %s", c.id, c.addr) }

// close ends the stream and the connection, and waits for the receiving
// goroutine. It may be called more than once.
func (c *deltaClient) close() {
	c.once.Do(func() {
		c.cancel()
		c.cc.Close()
		for range c.resps {
		}
	})
}

// subscribe is a first connection: legacy wildcard CDS, then the named
// endpoint sets, each response applied and ACKed.
func (c *deltaClient) subscribe(t *testing.T, edsNames []string) {
	t.Helper()
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: cdsURL})
	r := c.recvType(t, cdsURL)
	c.apply(r)
	c.ack(t, r)
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: edsNames})
	r = c.recvType(t, edsURL)
	c.apply(r)
	c.ack(t, r)
}

func (c *deltaClient) send(t *testing.T, r *discoveryv3.DeltaDiscoveryRequest) {
	t.Helper()
	if err := c.stream.Send(r); err != nil {
		t.Fatalf("%s: send: %v", c, err)
	}
}

// recv returns the next response, failing the test if none comes within
// testTimeout or the stream ends.
func (c *deltaClient) recv(t *testing.T) *discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	select {
	case r, ok := <-c.resps:
		if !ok {
			t.Fatalf("%s: stream ended: %v", c, c.err)
		}
		return r
	case <-time.After(testTimeout):
		t.Fatalf("%s: no response within %s", c, testTimeout)
	}
	return nil
}

func (c *deltaClient) recvType(t *testing.T, typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	t.Helper()
	r := c.recv(t)
	if r.GetTypeUrl() != typeURL {
		t.Fatalf("%s: got %s, want a response of type %s", c, summarize(r), typeURL)
	}
	return r
}

// expectNothing fails the test if a response comes within testShortTimeout.
func (c *deltaClient) expectNothing(t *testing.T) {
	t.Helper()
	select {
	case r, ok := <-c.resps:
		if ok {
			t.Fatalf("%s: unexpected response %s", c, summarize(r))
		}
		t.Fatalf("%s: stream ended: %v", c, c.err)
	case <-time.After(testShortTimeout):
	}
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

func (c *deltaClient) ack(t *testing.T, r *discoveryv3.DeltaDiscoveryResponse) {
	t.Helper()
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

// follow applies and ACKs responses until done holds, failing the test
// after testTimeout.
func (c *deltaClient) follow(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.After(testTimeout)
	for !done() {
		select {
		case r, ok := <-c.resps:
			if !ok {
				t.Fatalf("%s: stream ended: %v", c, c.err)
			}
			c.apply(r)
			c.ack(t, r)
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

// summarize is a one-line account of a delta response: type, system
// version, resources with their versions, removed names.
func summarize(r *discoveryv3.DeltaDiscoveryResponse) string {
	var res []string
	for _, x := range r.GetResources() {
		res = append(res, x.GetName()+"@"+x.GetVersion())
	}
	return fmt.Sprintf("%s system=%s resources=[%s] removed=[%s]", r.GetTypeUrl(), r.GetSystemVersionInfo(),
		strings.Join(res, " "), strings.Join(r.GetRemovedResources(), " "))
}

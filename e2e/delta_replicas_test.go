package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/store/storetest"
	"github.com/legation-io/legation/internal/xdstest"
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
// Replicas r1 and r2 run as real processes of the xds-node binary, built
// by the test. A raw delta ADS client on each subscribes to every cluster
// (legacy wildcard CDS) and to three named endpoint sets, and ACKs: both
// hold the same name -> version maps, each version the mod_revision of the
// resource's etcd key, and the same system_version_info. Then the client
// on r1 goes away, one cluster changes and another is deleted, and it
// reconnects to r2 presenting what it holds: its first response is the
// changed cluster and the deleted one's removal, nothing else, and it then
// holds exactly what r2's other client holds.
func TestDeltaAcrossReplicas(t *testing.T) {
	checkLeaks(t)
	start := time.Now()
	bin := buildXDSNode(t)
	t.Logf("built xds-node (race detector: %t) in %s", raceEnabled(), time.Since(start).Round(time.Millisecond))

	etcd := storetest.Start(t, storetest.Options{})
	admin := &env{etcd: etcd} // for apply and xdsadmin only: no in-process node
	start = time.Now()
	r1 := startReplica(t, bin, "r1", etcd.Endpoint)
	r2 := startReplica(t, bin, "r2", etcd.Endpoint)
	t.Logf("replicas ready in %s", time.Since(start).Round(time.Millisecond))

	// Two revisions, so versions differ per resource: c-b is at rev2, the
	// other clusters and every endpoint set at rev1.
	rev1 := admin.apply(t, strings.Join([]string{
		deltaClusterYAML("c-a", "1s"), deltaClusterYAML("c-b", "1s"), deltaClusterYAML("c-c", "1s"),
		deltaEndpointsYAML("c-a", 10001), deltaEndpointsYAML("c-b", 10002), deltaEndpointsYAML("c-c", 10003),
	}, "---\n"))
	rev2 := admin.apply(t, deltaClusterYAML("c-b", "2s"))
	r1.waitRevision(t, rev2)
	r2.waitRevision(t, rev2)

	edsNames := []string{"c-a", "c-b", "c-c"}
	mover := dialDelta(t, r1.xdsAddr, "mover")
	mover.subscribe(t, edsNames)
	stayer := dialDelta(t, r2.xdsAddr, "stayer")
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
	r2.waitRevision(t, rev4)
	v3, v4 := strconv.FormatInt(rev3, 10), strconv.FormatInt(rev4, 10)

	notResentBefore := metricAt(t, r2.httpAddr, "legation_delta_resources_not_resent_total", "")
	moved := dialDelta(t, r2.xdsAddr, "mover")
	moved.held, moved.system = held, heldSystem
	start = time.Now()
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
	if got, want := metricAt(t, r2.httpAddr, "legation_delta_resources_not_resent_total", "")-notResentBefore, 4.0; got != want {
		t.Errorf("r2 legation_delta_resources_not_resent_total rose by %v for the moved client, want %v (c-b and 3 endpoint sets)", got, want)
	}
	wantStatus := map[string]map[string]xdstest.ResourceStatus{
		"cluster":  {"c-a": {VersionSent: v3, VersionAcked: v3}, "c-b": {VersionSent: v2, VersionAcked: v2}},
		"endpoint": {"c-a": {VersionSent: v1, VersionAcked: v1}, "c-b": {VersionSent: v1, VersionAcked: v1}, "c-c": {VersionSent: v1, VersionAcked: v1}},
	}
	waitFor(t, "r2 /debug/streams: the moved stream's resource versions ACKed", func() (bool, string) {
		st := r2.deltaStream(t, "mover")
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

// buildXDSNode builds ./cmd/xds-node of this module into a temporary
// directory and returns the binary's path. Under `go test -race` it builds
// with -race too: the packages are then those the test build already
// compiled (a cold non-race build of etcd, gRPC and the Envoy API takes a
// minute), and a data race in a replica fails the test (the race detector
// makes the process exit non-zero).
func buildXDSNode(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatalf("the go command, to build xds-node: %v", err)
	}
	gomod, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(t.TempDir(), "xds-node")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, "./cmd/xds-node")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/xds-node in %s: %v\n%s", root, err, out)
	}
	return bin
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// replica is an xds-node process.
type replica struct {
	name     string
	xdsAddr  string
	httpAddr string
	cmd      *exec.Cmd
	log      *syncBuffer // its stderr and stdout
	exited   chan struct{}
}

// startReplica starts the xds-node binary bin as replica name on etcd and
// waits until it is ready. When the test ends it sends SIGTERM and waits
// for a clean exit (status 0). Free ports are found by listening on port 0
// and closing: another process may take one in between, so a replica that
// cannot bind is started again on new ports.
func startReplica(t *testing.T, bin, name, etcdEndpoint string) *replica {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r, err := tryStartReplica(t, bin, name, etcdEndpoint)
		if err == nil {
			return r
		}
		if attempt == 3 || !strings.Contains(r.log.String(), "address already in use") {
			t.Fatalf("replica %s: %v\nits log:\n%s", name, err, r.log)
		}
		t.Logf("replica %s lost a port race, trying new ports: %v", name, err)
	}
}

func tryStartReplica(t *testing.T, bin, name, etcdEndpoint string) (*replica, error) {
	t.Helper()
	r := &replica{name: name, xdsAddr: freeAddr(t), httpAddr: freeAddr(t), log: &syncBuffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(bin,
		"--etcd-endpoints", etcdEndpoint,
		"--xds-addr", r.xdsAddr,
		"--http-addr", r.httpAddr,
		"--gossip-addr", freeAddr(t),
		// Each replica serves the streams that land on it: this test is
		// about global versions across replicas, not node affinity.
		"--standalone",
		"--name", name,
		"--shutdown-timeout", "2s",
	)
	// Only the flags configure it: no LEGATION_* from the environment.
	r.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LEGATION_") })
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		// A race-enabled binary otherwise sleeps 1s on exit.
		r.cmd.Env = append(r.cmd.Env, strings.TrimSpace("GORACE="+gorace+" atexit_sleep_ms=0"))
	}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	setDeathSignal(r.cmd)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		r.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(r.exited)
	}()
	t.Cleanup(func() { r.stop(t) })

	deadline := time.Now().Add(testTimeout)
	for {
		select {
		case <-r.exited:
			return r, fmt.Errorf("exited before ready: %v", r.cmd.ProcessState)
		default:
		}
		code, body, err := httpGet(r.httpAddr, "/readyz")
		if err == nil && code == http.StatusOK {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("/readyz not 200 after %s: %d %v %s", testTimeout, code, err, strings.TrimSpace(body))
		}
		time.Sleep(pollInterval)
	}
}

// stop sends SIGTERM and waits for the process to end, killing it if it
// does not within testTimeout. It fails the test unless the exit is clean.
func (r *replica) stop(t *testing.T) {
	select {
	case <-r.exited: // it died early; tryStartReplica reported it
		return
	default:
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("replica %s: SIGTERM: %v", r.name, err)
	}
	select {
	case <-r.exited:
		if !r.cmd.ProcessState.Success() {
			t.Errorf("replica %s: %v after SIGTERM, want a clean exit\nits log:\n%s", r.name, r.cmd.ProcessState, r.log)
		}
	case <-time.After(testTimeout):
		r.cmd.Process.Kill() //nolint:errcheck // it may just have ended
		<-r.exited
		t.Errorf("replica %s: still running %s after SIGTERM; killed\nits log:\n%s", r.name, testTimeout, r.log)
	}
	if t.Failed() {
		t.Logf("replica %s log:\n%s", r.name, r.log)
	}
}

// waitRevision waits until the replica's view is at rev or later.
func (r *replica) waitRevision(t *testing.T, rev int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("replica %s view at revision %d", r.name, rev), func() (bool, string) {
		code, body, err := httpGet(r.httpAddr, "/debug/view")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v %s", code, err, body)
		}
		var v struct {
			Revision int64 `json:"revision"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return false, err.Error()
		}
		return v.Revision >= rev, fmt.Sprintf("revision %d", v.Revision)
	})
}

// deltaStream returns the replica's /debug/streams entry of the delta
// stream of node id, or nil if there is none.
func (r *replica) deltaStream(t *testing.T, id string) *xdstest.DeltaStatus {
	t.Helper()
	code, body, err := httpGet(r.httpAddr, "/debug/streams")
	if err != nil || code != http.StatusOK {
		t.Fatalf("replica %s GET /debug/streams: %d %v %s", r.name, code, err, body)
	}
	var got xdstest.DebugStreams
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("replica %s /debug/streams: %v\n%s", r.name, err, body)
	}
	for i := range got.DeltaStreams {
		if got.DeltaStreams[i].NodeID == id {
			return &got.DeltaStreams[i]
		}
	}
	return nil
}

// freeAddr returns 127.0.0.1:PORT with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a process writes
// its output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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

package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// xdsEnv is the test kit's env (a real etcd, a store writing resources
// to it the way xdsadmin does, and a view) under prefix; replicas started
// with its config serve them.
type xdsEnv struct {
	*xdstest.Env
	prefix string
}

func newXDSEnv(tb testing.TB) *xdsEnv {
	tb.Helper()
	const prefix = "/xds-test/"
	return &xdsEnv{Env: xdstest.NewEnv(tb, xdstest.Options{Prefix: prefix}), prefix: prefix}
}

// config is a replica config in etcd mode on e.
func (e *xdsEnv) config(tb testing.TB) replica.Config {
	cfg := testConfig(tb)
	cfg.EtcdEndpoints = []string{e.Etcd.Endpoint}
	cfg.EtcdPrefix = e.prefix
	return cfg
}

// startXDS starts a replica with cfg and waits until its view is at rev
// or later.
func startXDS(t testing.TB, cfg replica.Config, rev int64) *running {
	t.Helper()
	r := start(t, cfg)
	waitReady(t, r)
	waitRevision(t, r, rev)
	return r
}

// waitRevision waits until /debug/view shows revision rev or later.
func waitRevision(t testing.TB, r *running, rev int64) {
	t.Helper()
	xdstest.WaitFor(t, fmt.Sprintf("the view at revision %d", rev), func() (bool, string) {
		code, v := getDebugView(t, r)
		return code == http.StatusOK && v.Revision >= rev, jsonString(v)
	})
}

// bodies returns the bodies of puts, in order.
func bodies(puts ...store.Put) []*anypb.Any {
	out := make([]*anypb.Any, 0, len(puts))
	for _, p := range puts {
		out = append(out, p.Body)
	}
	return out
}

// checkResponse compares a DiscoveryResponse with the version, type and
// resource bodies wanted, ignoring the nonce. The version is the view's
// revision, which also moves when replicas write their registry and
// status records: a response at a later revision than version passes.
func checkResponse(t *testing.T, what string, got *discoveryv3.DiscoveryResponse, version string, typ *resource.Type, want ...store.Put) {
	t.Helper()
	if g, err1 := strconv.ParseInt(got.GetVersionInfo(), 10, 64); err1 == nil {
		if w, err2 := strconv.ParseInt(version, 10, 64); err2 == nil && g > w {
			version = got.GetVersionInfo()
		}
	}
	w := &discoveryv3.DiscoveryResponse{VersionInfo: version, TypeUrl: typ.URL, Resources: bodies(want...)}
	// control_plane names the replica (TestXDSMetrics checks it).
	if diff := cmp.Diff(w, got, protocmp.Transform(), protocmp.IgnoreFields(&discoveryv3.DiscoveryResponse{}, "nonce", "control_plane")); diff != "" {
		t.Errorf("%s: response differs (-want +got):\n%s", what, diff)
	}
}

// post sends a REST-JSON request with method and returns the status, the
// body and the headers.
func post(t *testing.T, r *running, method, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// fetchREST posts a DiscoveryRequest to a REST-JSON endpoint and decodes
// the answer; the response is nil unless the status is 200.
func fetchREST(t *testing.T, r *running, path string, req *discoveryv3.DiscoveryRequest) (int, *discoveryv3.DiscoveryResponse, string) {
	t.Helper()
	in, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	code, body, h := post(t, r, http.MethodPost, path, string(in))
	if code != http.StatusOK {
		return code, nil, body
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST %s: Content-Type %q, want application/json", path, ct)
	}
	resp := new(discoveryv3.DiscoveryResponse)
	if err := protojson.Unmarshal([]byte(body), resp); err != nil {
		t.Fatalf("POST %s: the body is not a DiscoveryResponse: %v\n%s", path, err, body)
	}
	return code, resp, body
}

// TestRESTJSON polls the REST-JSON endpoints of a replica: full state,
// 304 at the current version, 200 at an older one, named resources,
// scopes, and every kind of bad request.
func TestRESTJSON(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	a, b := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100)), xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))
	ea, eb := xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8001)), xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 8002))
	rev1 := e.Apply(t, []store.Put{a, b, ea, eb})
	cfg := e.config(t)
	cfg.CatchupTimeout = 200 * time.Millisecond
	r := startXDS(t, cfg, rev1)

	const clusters, endpoints = "/v3/discovery:clusters", "/v3/discovery:endpoints"
	n1 := xdstest.Node("n1", "c1")

	// The literal body of docs/reference/http-api.md's curl example.
	code, body, h := post(t, r, http.MethodPost, clusters, `{"node":{"id":"n1","cluster":"c1"}}`)
	if code != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("POST %s = %d %q (%s), want 200 JSON", clusters, code, body, h.Get("Content-Type"))
	}
	resp := new(discoveryv3.DiscoveryResponse)
	if err := protojson.Unmarshal([]byte(body), resp); err != nil {
		t.Fatalf("not a DiscoveryResponse: %v\n%s", err, body)
	}
	checkResponse(t, "clusters, no version", resp, xdstest.Version(rev1), resource.Cluster, a, b)

	code, resp, body = fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: n1, ResourceNames: []string{}, TypeUrl: resource.Cluster.URL})
	if code != http.StatusOK {
		t.Fatalf("clusters with the type_url = %d %q, want 200", code, body)
	}
	checkResponse(t, "clusters with the type_url", resp, xdstest.Version(rev1), resource.Cluster, a, b)

	// As in docs/reference/http-api.md, with the proto field name.
	code, body, _ = post(t, r, http.MethodPost, clusters, `{"node":{"id":"n1","cluster":"c1"},"version_info":"`+xdstest.Version(rev1)+`"}`)
	if code != http.StatusNotModified || body != "" {
		t.Errorf("clusters at the current version = %d %q, want 304 with an empty body", code, body)
	}

	// A change to the clusters: the old version gets the new state.
	a2 := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 200))
	rev2 := e.Apply(t, []store.Put{a2})
	waitRevision(t, r, rev2)
	code, resp, body = fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: n1, VersionInfo: xdstest.Version(rev1)})
	if code != http.StatusOK {
		t.Fatalf("clusters at an older version = %d %q, want 200", code, body)
	}
	checkResponse(t, "clusters at an older version", resp, xdstest.Version(rev2), resource.Cluster, a2, b)

	// A change to the endpoints only: the clusters held at rev2 are
	// current, while the version is the view's revision.
	ea3 := xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 9001))
	rev3 := e.Apply(t, []store.Put{ea3})
	waitRevision(t, r, rev3)
	if code, _, body := fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: n1, VersionInfo: xdstest.Version(rev2)}); code != http.StatusNotModified {
		t.Errorf("clusters at %d after an endpoint change = %d %q, want 304", rev2, code, body)
	}
	code, resp, body = fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: n1, VersionInfo: "not-ours"})
	if code != http.StatusOK {
		t.Fatalf("clusters at a foreign version = %d %q, want 200", code, body)
	}
	checkResponse(t, "clusters at a foreign version", resp, xdstest.Version(rev3), resource.Cluster, a2, b)

	// Named resources: only those asked for (and existing); one that does
	// not exist is told in resource_errors.
	code, resp, body = fetchREST(t, r, endpoints, &discoveryv3.DiscoveryRequest{Node: n1, ResourceNames: []string{"a", "missing"}})
	if code != http.StatusOK {
		t.Fatalf("endpoints [a missing] = %d %q, want 200", code, body)
	}
	if got, want := xdstest.ResourceErrors(resp.GetResourceErrors()), []string{"NOT_FOUND:missing"}; !slices.Equal(got, want) {
		t.Errorf("endpoints [a missing]: resource_errors %q, want %q", got, want)
	}
	resp.ResourceErrors = nil
	checkResponse(t, "endpoints [a missing]", resp, xdstest.Version(rev3), resource.Endpoint, ea3)
	if code, _, body := fetchREST(t, r, endpoints, &discoveryv3.DiscoveryRequest{Node: n1, ResourceNames: []string{"b"}, VersionInfo: xdstest.Version(rev1)}); code != http.StatusNotModified {
		t.Errorf("endpoints [b] at %d, unchanged since = %d %q, want 304", rev1, code, body)
	}
	code, resp, body = fetchREST(t, r, endpoints, &discoveryv3.DiscoveryRequest{Node: n1, ResourceNames: []string{"a"}, VersionInfo: xdstest.Version(rev2)})
	if code != http.StatusOK {
		t.Fatalf("endpoints [a] at %d, changed since = %d %q, want 200", rev2, code, body)
	}
	checkResponse(t, "endpoints [a] at an older version", resp, xdstest.Version(rev3), resource.Endpoint, ea3)

	// Scopes: group c1 overrides cluster a; group c2 sees the default,
	// and a change in c1's scope is none of its business.
	aC1 := xdstest.Put(t, resource.Cluster, "c1", xdstest.Cluster("a", 300))
	rev4 := e.Apply(t, []store.Put{aC1})
	waitRevision(t, r, rev4)
	code, resp, body = fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: n1, VersionInfo: xdstest.Version(rev3)})
	if code != http.StatusOK {
		t.Fatalf("clusters of group c1 after its scope changed = %d %q, want 200", code, body)
	}
	checkResponse(t, "clusters of group c1", resp, xdstest.Version(rev4), resource.Cluster, aC1, b)
	if code, _, body := fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n2", "c2"), VersionInfo: xdstest.Version(rev3)}); code != http.StatusNotModified {
		t.Errorf("clusters of group c2 after c1's scope changed = %d %q, want 304", code, body)
	}
	code, resp, body = fetchREST(t, r, clusters, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n2", "c2")})
	if code != http.StatusOK {
		t.Fatalf("clusters of group c2 = %d %q, want 200", code, body)
	}
	checkResponse(t, "clusters of group c2", resp, xdstest.Version(rev4), resource.Cluster, a2, b)

	bad := []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string // substring
	}{
		{"bad JSON", http.MethodPost, clusters, `{"node":`, http.StatusBadRequest, "bad DiscoveryRequest"},
		{"not JSON", http.MethodPost, clusters, `node=n1`, http.StatusBadRequest, "bad DiscoveryRequest"},
		{"unknown field", http.MethodPost, clusters, `{"nope":1}`, http.StatusBadRequest, "nope"},
		{"type_url of another endpoint", http.MethodPost, clusters, `{"type_url":"` + resource.Listener.URL + `"}`, http.StatusBadRequest, "type_url"},
		{"GET", http.MethodGet, clusters, "", http.StatusMethodNotAllowed, "POST"},
		{"PUT", http.MethodPut, endpoints, `{}`, http.StatusMethodNotAllowed, "POST"},
		{"unknown path", http.MethodPost, "/v3/discovery:nope", `{}`, http.StatusNotFound, "/v3/discovery:nope"},
		{"body over 1 MiB", http.MethodPost, clusters, `{"node":{"id":"` + strings.Repeat("n", 1<<20) + `"}}`, http.StatusRequestEntityTooLarge, "1 MiB"},
		{"version ahead of the view", http.MethodPost, clusters, `{"version_info":"` + xdstest.Version(rev4+1000) + `"}`, http.StatusServiceUnavailable, "retry elsewhere"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			code, body, h := post(t, r, tt.method, tt.path, tt.body)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s %.100q = %d %q, want %d with %q", tt.method, tt.path, tt.body, code, body, tt.wantCode, tt.wantBody)
			}
			if code == http.StatusMethodNotAllowed && h.Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q, want POST", h.Get("Allow"))
			}
		})
	}
}

// dial returns a connection to the replica's --xds-addr, closed when the
// test ends.
func dial(tb testing.TB, r *running, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	return xdstest.Dial(tb, r.XDSAddr(), opts...)
}

// TestADS: a replica serves ADS on --xds-addr: CDS and EDS get what etcd
// holds at the view's revision, an ACK gets nothing more, and a change is
// pushed.
func TestADS(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	a, b := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100)), xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))
	ea, eb := xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8001)), xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 8002))
	rev1 := e.Apply(t, []store.Put{a, b, ea, eb})
	r := startXDS(t, e.config(t), rev1)

	s := xdstest.OpenSotW(t, dial(t, r))
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	cds := s.Expect()
	checkResponse(t, "CDS", cds, xdstest.Version(rev1), resource.Cluster, a, b)
	s.Ack(cds)
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"a"}})
	eds := s.Expect()
	checkResponse(t, "EDS [a]", eds, xdstest.Version(rev1), resource.Endpoint, ea)
	s.Ack(eds, "a")
	s.ExpectNone()

	a2 := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 200))
	rev2 := e.Apply(t, []store.Put{a2})
	cds = s.Expect()
	checkResponse(t, "CDS after a change", cds, xdstest.Version(rev2), resource.Cluster, a2, b)
	s.Ack(cds)
	s.ExpectNone()
}

// TestPerTypeServices: the per-type SotW services on --xds-addr, streaming
// and unary.
func TestPerTypeServices(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	a := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))
	rev := e.Apply(t, []store.Put{a})
	r := startXDS(t, e.config(t), rev)
	cc := dial(t, r)
	client := clusterservice.NewClusterDiscoveryServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := client.StreamClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := xdstest.NewSotW(t, st, cancel)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1")})
	checkResponse(t, "StreamClusters", s.Expect(), xdstest.Version(rev), resource.Cluster, a)

	resp, err := client.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1")})
	if err != nil {
		t.Fatalf("FetchClusters: %v", err)
	}
	checkResponse(t, "FetchClusters", resp, xdstest.Version(rev), resource.Cluster, a)
	_, err = client.FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), VersionInfo: xdstest.Version(rev)})
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("FetchClusters at the current version = %v, want UNAVAILABLE (not modified)", err)
	}
}

func getStreams(t testing.TB, r *running) xdstest.DebugStreams {
	t.Helper()
	code, body := get(t, r, "/debug/streams")
	if code != http.StatusOK {
		t.Fatalf("/debug/streams = %d %q", code, body)
	}
	var d xdstest.DebugStreams
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("/debug/streams: %v in %q", err, body)
	}
	if d.Streams == nil {
		t.Fatalf("/debug/streams has no streams list: %q", body)
	}
	return d
}

// TestDebugStreams: /debug/streams lists open streams with their node,
// protocol and per-type versions sent, ACKed and NACKed.
func TestDebugStreams(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100)),
	})
	r := startXDS(t, e.config(t), rev)
	if d := getStreams(t, r); len(d.Streams) != 0 {
		t.Fatalf("/debug/streams before any stream = %s, want none", jsonString(d))
	}

	cc := dial(t, r)
	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	cds := s.Expect()
	var d xdstest.DebugStreams
	xdstest.WaitFor(t, "the ADS stream in /debug/streams", func() (bool, string) {
		d = getStreams(t, r)
		return len(d.Streams) == 1 && d.Streams[0].Types["cluster"] != nil && d.Streams[0].Types["cluster"].VersionSent == cds.GetVersionInfo(), jsonString(d)
	})
	st := d.Streams[0]
	if st.NodeID != "n1" || st.Group != "c1" || st.Protocol != "sotw-ads" || st.ConnectedAt.IsZero() {
		t.Errorf("stream = %s, want node n1, group c1, protocol sotw-ads, a connection time", jsonString(st))
	}
	if ts := st.Types["cluster"]; ts == nil || ts.Nonce != cds.GetNonce() || !ts.Wildcard || ts.Resources != 2 || ts.VersionAcked != "" {
		t.Errorf("cluster state = %s, want nonce %q, wildcard, 2 resources, nothing ACKed", jsonString(ts), cds.GetNonce())
	}

	s.Ack(cds)
	xdstest.WaitFor(t, "the ACK in /debug/streams", func() (bool, string) {
		d = getStreams(t, r)
		return len(d.Streams) == 1 && d.Streams[0].Types["cluster"] != nil && d.Streams[0].Types["cluster"].VersionAcked == cds.GetVersionInfo(), jsonString(d)
	})

	// A NACK of the next version shows with its message.
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 200))})
	cds2 := s.Expect()
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Cluster.URL, VersionInfo: cds.GetVersionInfo(), ResponseNonce: cds2.GetNonce(),
		ErrorDetail: grpcstatus.New(codes.InvalidArgument, "cluster a: bad").Proto()})
	xdstest.WaitFor(t, "the NACK in /debug/streams", func() (bool, string) {
		d = getStreams(t, r)
		if len(d.Streams) != 1 {
			return false, jsonString(d)
		}
		ts := d.Streams[0].Types["cluster"]
		return ts != nil && ts.NackVersion == cds2.GetVersionInfo() && ts.LastNack == "cluster a: bad" && ts.VersionAcked == cds.GetVersionInfo() && ts.VersionSent == cds2.GetVersionInfo(), jsonString(d)
	})

	// A per-type stream shows its own protocol.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := clusterservice.NewClusterDiscoveryServiceClient(cc).StreamClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := xdstest.NewSotW(t, cs, cancel)
	s2.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n2", "c2")})
	s2.Expect()
	xdstest.WaitFor(t, "both streams in /debug/streams", func() (bool, string) {
		d = getStreams(t, r)
		return len(d.Streams) == 2 && d.Streams[1].NodeID == "n2" && d.Streams[1].Protocol == "sotw-cluster", jsonString(d)
	})

	s.Cancel()
	cancel()
	xdstest.WaitFor(t, "no stream in /debug/streams", func() (bool, string) {
		d = getStreams(t, r)
		return len(d.Streams) == 0, jsonString(d)
	})
}

// TestDebugLoopbackOnly calls the HTTP handler of plaintext replicas (not
// running, so no etcd) with requests from a loopback and a non-loopback
// address: /debug/ answers no one unless --insecure-loopback-debug, then
// loopback clients only; /debug/pprof/ is off (404) unless --pprof, and
// then answers as /debug/ does; the rest answers anyone.
func TestDebugLoopbackOnly(t *testing.T) {
	checkLeaks(t)
	newNode := func(debug, pprof bool) *replica.Node {
		cfg := testConfig(t)
		cfg.InsecureLoopbackDebug, cfg.Pprof = debug, pprof
		n, err := replica.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	off, loop, loopPprof, pprofOnly := newNode(false, false), newNode(true, false), newNode(true, true), newNode(false, true)

	const (
		local  = "127.0.0.1:5555"
		remote = "10.1.2.3:5555"
	)
	tests := []struct {
		name       string
		n          *replica.Node
		method     string
		path       string
		remoteAddr string
		want       int
		wantBody   string // in the body of a refusal
	}{
		{"streams from loopback, debug off", off, http.MethodGet, "/debug/streams", local, http.StatusForbidden, "--insecure-loopback-debug"},
		{"view from loopback, debug off", off, http.MethodGet, "/debug/view", local, http.StatusForbidden, "--insecure-loopback-debug"},
		{"pprof from loopback, all off", off, http.MethodGet, "/debug/pprof/goroutine?debug=1", local, http.StatusNotFound, "--pprof"},
		{"pprof from loopback, pprof on, debug off", pprofOnly, http.MethodGet, "/debug/pprof/goroutine?debug=1", local, http.StatusForbidden, "--insecure-loopback-debug"},
		{"streams from loopback", loop, http.MethodGet, "/debug/streams", local, http.StatusOK, ""},
		{"streams from IPv6 loopback", loop, http.MethodGet, "/debug/streams", "[::1]:5555", http.StatusOK, ""},
		{"streams from afar", loop, http.MethodGet, "/debug/streams", remote, http.StatusForbidden, "loopback clients only"},
		{"view from afar", loop, http.MethodGet, "/debug/view", remote, http.StatusForbidden, "loopback clients only"},
		{"streams from no address", loop, http.MethodGet, "/debug/streams", "@", http.StatusForbidden, "loopback clients only"},
		{"pprof from loopback, pprof off", loop, http.MethodGet, "/debug/pprof/goroutine?debug=1", local, http.StatusNotFound, "--pprof"},
		{"pprof from loopback", loopPprof, http.MethodGet, "/debug/pprof/goroutine?debug=1", local, http.StatusOK, ""},
		{"pprof from afar", loopPprof, http.MethodGet, "/debug/pprof/goroutine?debug=1", remote, http.StatusForbidden, "loopback clients only"},
		{"CPU profile from afar", loopPprof, http.MethodGet, "/debug/pprof/profile?seconds=1", remote, http.StatusForbidden, "loopback clients only"},
		{"healthz from afar", off, http.MethodGet, "/healthz", remote, http.StatusOK, ""},
		{"REST-JSON from afar, not loaded", off, http.MethodPost, "/v3/discovery:clusters", remote, http.StatusServiceUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{}`))
			req.RemoteAddr = tt.remoteAddr
			w := httptest.NewRecorder()
			tt.n.HTTPHandlerForTest().ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("%s %s from %s = %d %q, want %d", tt.method, tt.path, tt.remoteAddr, w.Code, w.Body.String(), tt.want)
			}
			if !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Errorf("body %q does not say %q", w.Body.String(), tt.wantBody)
			}
		})
	}
}

// TestSotwOptions checks that the xDS flags reach the server: named
// resources on a new stream presenting the current version are resent
// unless SotwTrustVersion, GroupBy derives the group, a version ahead of
// the view ends the stream with UNAVAILABLE after CatchupTimeout, and a
// request larger than MaxRecvMsgSize ends it with RESOURCE_EXHAUSTED.
func TestSotwOptions(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	a := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))
	ea := xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8001))
	rev := e.Apply(t, []store.Put{a, ea})

	// Two replicas of different options on one etcd: standalone, so that
	// each serves its own streams instead of relaying to the node's home.
	pcfg := e.config(t)
	pcfg.Standalone = true
	plain := startXDS(t, pcfg, rev)
	cfg := e.config(t)
	cfg.Standalone = true
	cfg.SotwTrustVersion = true
	cfg.CatchupTimeout = 200 * time.Millisecond
	cfg.MaxRecvMsgSize = 4096
	cfg.GroupBy = "id"
	tuned := startXDS(t, cfg, rev)

	reconnect := func(r *running, typ *resource.Type, names ...string) *xdstest.SotWStream {
		s := xdstest.OpenSotW(t, dial(t, r))
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: typ.URL, VersionInfo: xdstest.Version(rev), ResourceNames: names})
		return s
	}
	// Wildcard CDS at the current version: nothing to send, either way.
	reconnect(plain, resource.Cluster).ExpectNone()
	reconnect(tuned, resource.Cluster).ExpectNone()
	// Named EDS at the current version: resent unless trusted.
	checkResponse(t, "EDS on a new stream", reconnect(plain, resource.Endpoint, "a").Expect(), xdstest.Version(rev), resource.Endpoint, ea)
	reconnect(tuned, resource.Endpoint, "a").ExpectNone()
	xdstest.WaitFor(t, "the streams of node n1 in group n1 (--group-by id)", func() (bool, string) {
		d := getStreams(t, tuned)
		for _, st := range d.Streams {
			if st.Group != "n1" {
				return false, jsonString(d)
			}
		}
		return len(d.Streams) == 2, jsonString(d)
	})

	began := time.Now()
	s := reconnect(tuned, resource.Cluster)
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Listener.URL, VersionInfo: xdstest.Version(rev + 1000)})
	if st := grpcstatus.Convert(s.ExpectErr()); st.Code() != codes.Unavailable {
		t.Errorf("a version ahead of the view ended the stream with %v, want UNAVAILABLE", st)
	}
	if d, dflt := time.Since(began), replica.DefaultConfig().CatchupTimeout; d < cfg.CatchupTimeout || d >= dflt {
		t.Errorf("the stream ended after %s, want the %s catch-up timeout set, not the default %s", d, cfg.CatchupTimeout, dflt)
	}

	// Over 8 KiB of names, each within --max-name-length.
	var big []string
	for i := range 8 {
		big = append(big, fmt.Sprintf("%d-%s", i, strings.Repeat("x", 1000)))
	}
	s = xdstest.OpenSotW(t, dial(t, tuned))
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: big})
	if st := grpcstatus.Convert(s.ExpectErr()); st.Code() != codes.ResourceExhausted {
		t.Errorf("a request above --max-recv-msg-size ended the stream with %v, want RESOURCE_EXHAUSTED", st)
	}
	// The plain replica takes the same request.
	s = xdstest.OpenSotW(t, dial(t, plain))
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: big})
	if resp := s.Expect(); len(resp.GetResources()) != 0 {
		t.Errorf("EDS for a missing name = %d resources, want none", len(resp.GetResources()))
	}
}

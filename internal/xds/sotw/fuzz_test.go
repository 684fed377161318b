package sotw_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// fuzzCatchup is the fuzz servers' CatchupTimeout: an input presenting a
// version from the future costs this much, not the default 5s.
const fuzzCatchup = 50 * time.Millisecond

// fuzzEnv is one env per fuzz process (each fuzz worker runs the target's
// body once, then the inputs), holding a small real state: two clusters
// with their endpoints, a listener and its route. It returns the revision
// of that state.
func fuzzEnv(f *testing.F) (*env, int64) {
	f.Helper()
	e := newEnv(f, func(c *sotw.Config) { c.CatchupTimeout = fuzzCatchup })
	rev := e.Apply(f, []store.Put{
		xdstest.Put(f, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1)),
		xdstest.Put(f, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1)),
		xdstest.Put(f, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8080, 8081)),
		xdstest.Put(f, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("b", 9090)),
		xdstest.Put(f, resource.Listener, store.DefaultScope, xdstest.APIListener(f, "l1", "r1", true)),
		xdstest.Put(f, resource.Route, store.DefaultScope, xdstest.Route("r1", "l1", "a")),
	})
	return e, rev
}

// fuzzRESTPaths are RESTHandler's endpoints, in the order a fuzz input's
// path byte picks them.
var fuzzRESTPaths = []struct {
	path string
	typ  *resource.Type
}{
	{"/v3/discovery:clusters", resource.Cluster},
	{"/v3/discovery:endpoints", resource.Endpoint},
	{"/v3/discovery:listeners", resource.Listener},
	{"/v3/discovery:routes", resource.Route},
	{"/v3/discovery:scoped-routes", resource.ScopedRoute},
	{"/v3/discovery:secrets", resource.Secret},
	{"/v3/discovery:runtime", resource.Runtime},
	{"/v3/discovery:extension_configs", resource.ExtensionConfig},
}

// FuzzRESTRequest posts arbitrary bodies to the REST-JSON endpoints of a
// server on a small real view (promise 10: a malformed request never
// crashes the server). The answer is 200 with a DiscoveryResponse of the
// endpoint's type at a decimal version, 304 with no body, 400, or 503 (a
// version from the future the view does not reach); 413 only for a body
// over sotw.MaxRESTBody.
func FuzzRESTRequest(f *testing.F) {
	e, rev := fuzzEnv(f)
	h := e.srv.RESTHandler()
	v := strconv.FormatInt(rev, 10)
	for _, s := range []struct {
		path uint8
		body string
	}{
		{0, `{"node":{"id":"n1","cluster":"c1"},"typeUrl":"` + resource.Cluster.URL + `"}`},
		{0, `{"versionInfo":"` + v + `","node":{"id":"n1"}}`},
		{0, `{"versionInfo":"1000000"}`},
		{0, `{"versionInfo":"not-a-version"}`},
		{1, `{"resourceNames":["a","missing"],"typeUrl":"` + resource.Endpoint.URL + `"}`},
		{1, `{"resourceNames":["*"]}`},
		{2, `{}`},
		{3, `{"resourceNames":["r1"],"responseNonce":"7","errorDetail":{"code":3,"message":"bad"}}`},
		{4, `{"typeUrl":"type.googleapis.com/nope"}`},
		{5, `{"typeUrl":"` + resource.Cluster.URL + `"}`},
		{6, `{"unknownField":1}`},
		{7, `{`},
		{0, ``},
		{1, `null`},
		{2, `{"node":{"metadata":{"fields":{"k":{"listValue":{}}}}}}`},
	} {
		f.Add(s.path, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		ep := fuzzRESTPaths[int(path)%len(fuzzRESTPaths)]
		req := httptest.NewRequest(http.MethodPost, ep.path, bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
			resp := new(discoveryv3.DiscoveryResponse)
			if err := protojson.Unmarshal(w.Body.Bytes(), resp); err != nil {
				t.Fatalf("200 with a body that is not a DiscoveryResponse: %v\n%s", err, w.Body.Bytes())
			}
			if resp.GetTypeUrl() != ep.typ.URL {
				t.Errorf("%s answered type_url %q, want %q", ep.path, resp.GetTypeUrl(), ep.typ.URL)
			}
			if n, err := strconv.ParseInt(resp.GetVersionInfo(), 10, 64); err != nil || n < rev {
				t.Errorf("version_info %q, want the decimal revision (>= %d)", resp.GetVersionInfo(), rev)
			}
		case http.StatusNotModified:
			if w.Body.Len() != 0 {
				t.Errorf("304 with a body: %q", w.Body.Bytes())
			}
		case http.StatusBadRequest, http.StatusServiceUnavailable:
		case http.StatusRequestEntityTooLarge:
			if len(body) <= sotw.MaxRESTBody {
				t.Errorf("413 for a body of %d bytes", len(body))
			}
		default:
			t.Errorf("status %d for body %q: %s", w.Code, body, w.Body.Bytes())
		}
	})
}

// FuzzStreamRequests sends a short sequence of arbitrary DiscoveryRequests
// (each input is up to three encoded requests; what does not decode is
// dropped) on a new ADS stream of a shared real server (promise 10: a
// malformed request gets a gRPC status error, never a panic; a panic in a
// server goroutine ends this process, which the fuzzer reports). Then a
// probe, a request for a type the sequence did not use, which the server
// must answer unless it has ended the stream: so each input runs at the
// server's pace, without waiting out a timeout. Every response must be
// well formed and of a type asked for; an ended stream must carry a real
// status (not Unknown, which is a non-status error, nor Internal). Then a
// fresh stream must still be served.
func FuzzStreamRequests(f *testing.F) {
	e, rev := fuzzEnv(f)
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)

	v := strconv.FormatInt(rev, 10)
	n1 := &corev3.Node{Id: "fuzz", Cluster: "c1"}
	cds := func(m *discoveryv3.DiscoveryRequest) *discoveryv3.DiscoveryRequest {
		m.TypeUrl = resource.Cluster.URL
		return m
	}
	for _, seq := range [][]*discoveryv3.DiscoveryRequest{
		// CDS wildcard, then its ACK.
		{cds(&discoveryv3.DiscoveryRequest{Node: n1}), cds(&discoveryv3.DiscoveryRequest{VersionInfo: v, ResponseNonce: "1"})},
		// EDS by name, ACKed with more names, then a wildcard "*".
		{
			{Node: n1, TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"a"}},
			{TypeUrl: resource.Endpoint.URL, VersionInfo: v, ResponseNonce: "1", ResourceNames: []string{"a", "b", "missing"}},
			{TypeUrl: resource.Endpoint.URL, VersionInfo: v, ResponseNonce: "2", ResourceNames: []string{"*"}},
		},
		// A type_url nobody serves.
		{{Node: n1, TypeUrl: "type.googleapis.com/nope"}},
		// No type_url on ADS.
		{{Node: n1}},
		// A NACK, then a request with a stale nonce.
		{
			cds(&discoveryv3.DiscoveryRequest{Node: n1}),
			cds(&discoveryv3.DiscoveryRequest{VersionInfo: v, ResponseNonce: "1", ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: "rejected"}}),
			cds(&discoveryv3.DiscoveryRequest{VersionInfo: v, ResponseNonce: "99"}),
		},
		// Presenting the current version (nothing to resend), then one
		// from the future (the view never reaches it: UNAVAILABLE).
		{cds(&discoveryv3.DiscoveryRequest{Node: n1, VersionInfo: v})},
		{{Node: n1, TypeUrl: resource.Listener.URL, VersionInfo: "1000000"}},
		// LDS, RDS and CDS together, as an Envoy starts.
		{
			{Node: n1, TypeUrl: resource.Listener.URL},
			{TypeUrl: resource.Route.URL, ResourceNames: []string{"r1"}},
			cds(&discoveryv3.DiscoveryRequest{}),
		},
		// A version that is not ours, and a nonce for a type not asked.
		{{Node: n1, TypeUrl: resource.Secret.URL, VersionInfo: "abc", ResponseNonce: "5", ResourceNames: []string{"s"}}},
	} {
		xdstest.AddSeqSeeds(f, seq)
	}

	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		seq := xdstest.DecodeSeq(func() *discoveryv3.DiscoveryRequest { return new(discoveryv3.DiscoveryRequest) }, a, b, c)
		if len(seq) == 0 {
			return // nothing decodes as a request: nothing to send
		}
		fuzzSequence(t, client, seq)
		fuzzFreshStream(t, client, rev)
	})
}

// fuzzSequence sends seq and a probe on a new stream and checks what comes
// back until the probe's answer or the end of the stream.
func fuzzSequence(t *testing.T, client discoveryv3.AggregatedDiscoveryServiceClient, seq []*discoveryv3.DiscoveryRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	probe, asked := xdstest.ProbeType(seq)
	for _, m := range append(seq, &discoveryv3.DiscoveryRequest{TypeUrl: probe.URL}) {
		if err := st.Send(m); err != nil {
			break // the server ended the stream: Recv says how
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("after %s, neither an answer to the probe (%s) nor the end of the stream", xdstest.Timeout, probe.Name)
			}
			s, ok := grpcstatus.FromError(err)
			t.Logf("the stream ended: %v", err)
			if !ok || errors.Is(err, io.EOF) || s.Code() == codes.OK || s.Code() == codes.Unknown || s.Code() == codes.Internal {
				t.Fatalf("stream ended with %v (code %v), want a gRPC status error", err, s.Code())
			}
			return
		}
		if err := fuzzCheckResponse(resp, asked); err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() == probe.URL {
			return
		}
	}
}

// fuzzCheckResponse checks that resp is well formed and of a type asked.
func fuzzCheckResponse(resp *discoveryv3.DiscoveryResponse, asked map[string]bool) error {
	typ, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok || !asked[typ.URL] {
		return fmt.Errorf("a response of type %q, which was not asked for", resp.GetTypeUrl())
	}
	if resp.GetNonce() == "" || resp.GetVersionInfo() == "" {
		return fmt.Errorf("a %s response with version %q and nonce %q", typ.Name, resp.GetVersionInfo(), resp.GetNonce())
	}
	for _, r := range resp.GetResources() {
		if u := r.GetTypeUrl(); u != typ.URL && u != "type.googleapis.com/envoy.service.discovery.v3.Resource" {
			return fmt.Errorf("a %s response holding a %q", typ.Name, u)
		}
	}
	return nil
}

// fuzzFreshStream checks that a new stream is still served: a CDS wildcard
// request gets both clusters at rev or later.
func fuzzFreshStream(t *testing.T, client discoveryv3.AggregatedDiscoveryServiceClient, rev int64) {
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open a fresh stream: %v", err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "fresh"}, TypeUrl: resource.Cluster.URL}); err != nil {
		t.Fatalf("fresh stream: send: %v", err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("fresh stream: %v", err)
	}
	if n, err := strconv.ParseInt(resp.GetVersionInfo(), 10, 64); err != nil || n < rev || len(resp.GetResources()) != 2 {
		t.Fatalf("fresh stream: %d clusters at version %q, want 2 at %d or later", len(resp.GetResources()), resp.GetVersionInfo(), rev)
	}
}

package sotw_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// denyNodes is an Authorizer that denies the nodes of the ids it holds:
// a decision the tests choose per poll.
type denyNodes map[string]bool

func (d denyNodes) Authorize(_ context.Context, n *corev3.Node, _ string) (<-chan struct{}, error) {
	if d[n.GetId()] {
		return nil, status.Errorf(codes.PermissionDenied, "node %q denied", n.GetId())
	}
	return nil, nil
}

func (denyNodes) Secrets(context.Context, string) error { return nil }

// restPoll POSTs a poll of clusters to h and returns the status and body.
func restPoll(tb testing.TB, h http.Handler, id, cluster, ver string, names ...string) (int, string) {
	tb.Helper()
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: cluster}, VersionInfo: ver, ResourceNames: names}
	body, err := protojson.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v3/discovery:clusters", strings.NewReader(string(body))))
	out, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(out)
}

// restEncodes reads legation_sotw_rest_encodes_total.
func (e *env) restEncodes(tb testing.TB) float64 {
	tb.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "legation_sotw_rest_encodes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	tb.Fatal("no legation_sotw_rest_encodes_total")
	return 0
}

// TestRESTCache: a poll at an unchanged revision is answered with the
// bytes encoded for the first poll of the same type, group and names
// (in any order); another name set, another group or a new revision is
// encoded anew; 304 stays 304.
func TestRESTCache(t *testing.T) {
	e := newEnv(t)
	r1 := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c1", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c2", 1000)),
		xdstest.Put(t, resource.Cluster, "team", xdstest.Cluster("c2", 2000)),
	})
	h := e.srv.RESTHandler()
	steps := []struct {
		name     string
		cluster  string
		names    []string
		encodes  float64 // so far
		sameAs   int     // index of an earlier step with the same body; -1 none
		apply    bool    // write first: a new revision
		version  string  // presented; "" none
		wantCode int
	}{
		{"wildcard", "", nil, 1, -1, false, "", 200},
		{"wildcard again", "", nil, 1, 0, false, "", 200},
		{"explicit wildcard", "", []string{"*"}, 1, 0, false, "", 200},
		{"names", "", []string{"c2", "absent"}, 2, -1, false, "", 200},
		{"same names, another order, repeated", "", []string{"absent", "c2", "absent"}, 2, 3, false, "", 200},
		{"another name set", "", []string{"c1"}, 3, -1, false, "", 200},
		{"another group", "team", nil, 4, -1, false, "", 200},
		{"that group again", "team", nil, 4, 6, false, "", 200},
		{"current version", "", nil, 4, -1, false, fmt.Sprint(r1), 304},
		{"new revision", "", nil, 5, -1, true, "", 200},
		{"new revision again", "", nil, 5, 9, false, "", 200},
	}
	var bodies []string
	for i, st := range steps {
		if st.apply {
			e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("c3", 1000))})
		}
		code, body := restPoll(t, h, "n", st.cluster, st.version, st.names...)
		bodies = append(bodies, body)
		if code != st.wantCode {
			t.Fatalf("%s: status %d, want %d: %s", st.name, code, st.wantCode, body)
		}
		if got := e.restEncodes(t); got != st.encodes {
			t.Errorf("%s: %v bodies encoded so far, want %v", st.name, got, st.encodes)
		}
		if st.sameAs >= 0 && body != bodies[st.sameAs] {
			t.Errorf("%s: body differs from step %q's:\n%s\n%s", st.name, steps[st.sameAs].name, body, bodies[st.sameAs])
		}
		for j := range i {
			if st.sameAs < 0 && st.wantCode == 200 && body == bodies[j] {
				t.Errorf("%s: body equals step %q's", st.name, steps[j].name)
			}
		}
	}
	// The body of the new revision names it and holds c3.
	var resp discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal([]byte(bodies[len(bodies)-1]), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 3 || resp.GetVersionInfo() == fmt.Sprint(r1) {
		t.Errorf("after a write: version %s with %d clusters, want a newer one with 3", resp.GetVersionInfo(), len(resp.GetResources()))
	}
}

// TestRESTCacheAuthorizesEveryPoll: a client the Authorizer denies gets
// 403 and no body even when the body it asks for is cached, and its poll
// does not disturb the cache.
func TestRESTCacheAuthorizesEveryPoll(t *testing.T) {
	deny := denyNodes{"bad": true}
	e := newEnv(t, func(c *sotw.Config) { c.Authorizer = deny })
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("secret-ish", 1000))})
	h := e.srv.RESTHandler()
	code, good := restPoll(t, h, "good", "", "")
	if code != 200 {
		t.Fatalf("allowed client: status %d: %s", code, good)
	}
	for _, names := range [][]string{nil, {"secret-ish"}} {
		code, body := restPoll(t, h, "bad", "", "", names...)
		if code != http.StatusForbidden || strings.Contains(body, "secret-ish") {
			t.Errorf("denied client asking for %v: status %d, body %q; want 403 and no resource", names, code, body)
		}
	}
	// Denied once allowed: the cached body is not served either.
	deny["good"] = true
	if code, body := restPoll(t, h, "good", "", ""); code != http.StatusForbidden || strings.Contains(body, "secret-ish") {
		t.Errorf("client denied after a cached poll: status %d, body %q", code, body)
	}
	delete(deny, "good")
	if code, body := restPoll(t, h, "good", "", ""); code != 200 || body != good {
		t.Errorf("allowed again: status %d, body differs: %v", code, body != good)
	}
	if got := e.restEncodes(t); got != 1 {
		t.Errorf("%v bodies encoded, want 1", got)
	}
}

// BenchmarkRESTPoll measures a REST-JSON poll of 200 clusters at an
// unchanged revision (no version presented: a 200 with every cluster),
// the handler called directly.
func BenchmarkRESTPoll(b *testing.B) {
	e := newEnv(b)
	var puts []store.Put
	for i := range 200 {
		puts = append(puts, xdstest.Put(b, resource.Cluster, store.DefaultScope, xdstest.Cluster(fmt.Sprintf("cluster-%d", i), 1000)))
	}
	e.Apply(b, puts)
	body, err := protojson.Marshal(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}})
	if err != nil {
		b.Fatal(err)
	}
	h := e.srv.RESTHandler()
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v3/discovery:clusters", strings.NewReader(string(body))))
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

package replica_test

import (
	"net/http"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestEtcdLoss: a replica that loses etcd keeps serving its last view
// (streams stay open, new ones are answered at that revision, never
// older) but reports not ready; when etcd returns it catches up, with no
// restart, and is ready again.
func TestEtcdLoss(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	a := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))
	rev := e.Apply(t, []store.Put{a})
	proxy := storetest.NewProxy(t, e.Etcd.Endpoint)
	cfg := e.config(t)
	cfg.EtcdEndpoints = []string{proxy.Addr}
	cfg.Standalone = true
	r := startXDS(t, cfg, rev)

	s := xdstest.OpenSotW(t, dial(t, r))
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Cluster.URL})
	first := s.Expect()
	s.Ack(first)

	proxy.Cut()
	xdstest.WaitFor(t, "/readyz 503 naming etcd", func() (bool, string) {
		code, body := get(t, r, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "etcd unreachable"), body
	})
	// Still served: a new stream gets the last view, at its revision.
	s2 := xdstest.OpenSotW(t, dial(t, r))
	s2.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n2", "c1"), TypeUrl: resource.Cluster.URL})
	got := s2.Expect()
	if got.GetVersionInfo() != first.GetVersionInfo() || len(got.GetResources()) != 1 {
		t.Errorf("while etcd is away: version %s with %d clusters, want the last view's %s with 1", got.GetVersionInfo(), len(got.GetResources()), first.GetVersionInfo())
	}
	s2.Ack(got)
	// A change made meanwhile reaches the clients once etcd is back.
	b := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 100))
	rev2 := e.Apply(t, []store.Put{b})
	s.ExpectNone()

	proxy.Restore()
	waitReady(t, r)
	for _, c := range []*xdstest.SotWStream{s, s2} {
		resp := c.Expect()
		checkResponse(t, "after etcd returned", resp, xdstest.Version(rev2), resource.Cluster, a, b)
	}
}

package replica_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestAuthzStale: a replica cut off from etcd for longer than
// --authz-stale-after no longer trusts its rules: its live streams end
// UNAVAILABLE, new ones are refused UNAVAILABLE naming the flag, and
// /readyz says why. A revocation written to etcd meanwhile holds once
// etcd answers again: the revoked identity is refused, the others are
// served.
func TestAuthzStale(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	k := newMTLSKit(t)
	k.grant(t, e)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	proxy := storetest.NewProxy(t, e.Etcd.Endpoint)
	cfg := e.config(t)
	cfg.EtcdEndpoints = []string{proxy.Addr}
	cfg.Standalone = true
	cfg.AuthzStaleAfter = 2 * time.Second
	cfg.EtcdStaleAfter = time.Minute // /readyz's 503 must be the rules'
	k.configure(&cfg)
	r := start(t, cfg)
	k.waitReady(t, r)

	open := func(id, node string) *xdstest.SotWStream {
		s := xdstest.OpenSotW(t, xdstest.DialTLS(t, r.XDSAddr(), k.tls(t, id)))
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(node, "c1"), TypeUrl: resource.Cluster.URL})
		return s
	}
	live := open(mtlsEdgeID, "edge-1")
	if got := live.Expect(); got.GetVersionInfo() != xdstest.Version(rev) {
		t.Fatalf("edge-1 got version %s, want %s", got.GetVersionInfo(), xdstest.Version(rev))
	}

	proxy.Cut()
	cut := time.Now()
	err := live.ExpectErr()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--authz-stale-after") {
		t.Fatalf("the live stream ended with %v, want UNAVAILABLE naming --authz-stale-after", err)
	}
	// The rules were last confirmed up to a second (the watch's progress
	// interval) before the cut.
	if took := time.Since(cut); took < cfg.AuthzStaleAfter-time.Second {
		t.Errorf("the live stream ended %s after the cut, long before --authz-stale-after (%s)", took, cfg.AuthzStaleAfter)
	}
	err = open(mtlsOtherID, "other-1").ExpectErr()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--authz-stale-after") {
		t.Fatalf("a new stream while cut off ended with %v, want UNAVAILABLE naming --authz-stale-after", err)
	}
	code, body := k.get(t, r, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "--authz-stale-after") {
		t.Errorf("/readyz while cut off: %d %q, want 503 naming --authz-stale-after", code, body)
	}

	// Revoked behind the replica's back, on etcd itself.
	if _, err := authz.Revoke(context.Background(), e.Etcd.Client(t), e.prefix, mtlsEdgeID); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	k.waitReady(t, r)
	err = open(mtlsEdgeID, "edge-1").ExpectErr()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the revoked identity's stream after etcd returned ended with %v, want PERMISSION_DENIED", err)
	}
	if got := open(mtlsOtherID, "other-1").Expect(); got.GetVersionInfo() == "" {
		t.Errorf("other-1 after etcd returned: %s", xdstest.Summary(got))
	}
}

package replica_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestCSDSAdminRevoked: a CSDS stream re-checks its client whenever the
// rules change: once the admin's rule is revoked, the stream ends with
// PERMISSION_DENIED within 10 s.
func TestCSDSAdminRevoked(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	k := newMTLSKit(t)
	k.grant(t, e)
	cfg := e.config(t)
	cfg.Standalone = true
	k.configure(&cfg)
	r := start(t, cfg)
	k.waitReady(t, r)

	cc := xdstest.DialTLS(t, r.XDSAddr(), k.tls(t, mtlsAdminID))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).StreamClientStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&statusv3.ClientStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the admin's first CSDS answer: %v", err)
	}
	if _, err := authz.Revoke(context.Background(), e.Etcd.Client(t), e.prefix, mtlsAdminID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("the revoked admin's CSDS stream ended with %v, want PERMISSION_DENIED", err)
		}
		t.Logf("ended %s after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked admin's CSDS stream is still open 10 s after the revocation")
	}
}

// TestCSDSMaxMatchers: a CSDS request with 200,000 node matchers is
// refused with INVALID_ARGUMENT naming --max-csds-matchers, and counted.
func TestCSDSMaxMatchers(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	cfg := e.config(t)
	cfg.Standalone = true
	reg := cfg.Registerer
	r := startXDS(t, cfg, 0)
	ms := make([]*matcherv3.NodeMatcher, 200_000)
	for i := range ms {
		ms[i] = &matcherv3.NodeMatcher{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: fmt.Sprintf("n-%d", i)}}}
	}
	_, err := statusv3.NewClientStatusDiscoveryServiceClient(dial(t, r)).FetchClientStatus(context.Background(),
		&statusv3.ClientStatusRequest{NodeMatchers: ms})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--max-csds-matchers") {
		t.Fatalf("200,000 matchers: %v, want INVALID_ARGUMENT naming --max-csds-matchers", err)
	}
	if got := metricValue(t, reg, "legation_csds_matchers_refused_total"); got != 1 {
		t.Errorf("legation_csds_matchers_refused_total = %v, want 1", got)
	}
}

// etcdRanges is the range requests the embedded etcds of this test
// process have served (etcd's own counter, on the default registry).
func etcdRanges(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_range_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no etcd_mvcc_range_total: is the test's etcd embedded?")
	return 0
}

// TestCSDSWildcardCostsNoReads: 100 wildcard CSDS calls a second are
// answered from the replica's cache of the status records: etcd serves
// no more range requests meanwhile than the replica's background work
// does, far fewer than one per call.
func TestCSDSWildcardCostsNoReads(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Standalone = true
	r := startXDS(t, cfg, rev)
	cc := dial(t, r)
	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("envoy-1", "c1"), TypeUrl: resource.Cluster.URL})
	s.Ack(s.Expect())
	csds := statusv3.NewClientStatusDiscoveryServiceClient(cc)
	xdstest.WaitFor(t, "envoy-1 in CSDS", func() (bool, string) {
		resp, err := csds.FetchClientStatus(context.Background(), &statusv3.ClientStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		return len(resp.GetConfig()) == 1, fmt.Sprint(resp)
	})

	before := etcdRanges(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range 100 {
		<-tick.C
		resp, err := csds.FetchClientStatus(context.Background(), &statusv3.ClientStatusRequest{})
		if err != nil || len(resp.GetConfig()) != 1 {
			t.Fatalf("wildcard CSDS: %v, %v", resp, err)
		}
	}
	ranges := etcdRanges(t) - before
	t.Logf("100 wildcard calls: %v etcd range requests in the process meanwhile", ranges)
	if ranges >= 50 {
		t.Errorf("100 wildcard CSDS calls came with %v etcd range requests, want far fewer than one a call", ranges)
	}
}

// TestUnaryAdmission: unary calls (Fetch* discovery, CSDS's Fetch) are
// admitted at --stream-rate like streams: a burst beyond it is refused
// with RESOURCE_EXHAUSTED naming the flag.
func TestUnaryAdmission(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Standalone = true
	cfg.StreamRate, cfg.StreamBurst = 1, 1
	r := startXDS(t, cfg, rev)
	cds := clusterv3.NewClusterDiscoveryServiceClient(dial(t, r))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused []error
	)
	for i := range 6 {
		wg.Go(func() {
			_, err := cds.FetchClusters(context.Background(), &discoveryv3.DiscoveryRequest{
				Node: xdstest.Node(fmt.Sprintf("poller-%d", i), "c1"), TypeUrl: resource.Cluster.URL})
			if err != nil {
				mu.Lock()
				refused = append(refused, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(refused) == 0 {
		t.Fatal("6 FetchClusters at once at --stream-rate 1 were all served")
	}
	for _, err := range refused {
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--stream-rate") {
			t.Errorf("a refused FetchClusters: %v, want RESOURCE_EXHAUSTED naming --stream-rate", err)
		}
	}
}

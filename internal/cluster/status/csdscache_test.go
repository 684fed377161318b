package status_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/tools/faultnet"
)

// rangeCounter counts the range requests (Get) an etcd client sends.
type rangeCounter struct{ n atomic.Int64 }

func (r *rangeCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == "/etcdserverpb.KV/Range" {
		r.n.Add(1)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// countingClient replaces the server's etcd client with one to the same
// endpoints whose range requests are counted.
func countingClient(t *testing.T, cfg *status.CSDSConfig) *rangeCounter {
	t.Helper()
	rc := &rangeCounter{}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Client.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rc.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfg.Client = c
	return rc
}

// TestCSDSReadsFromCache: CSDS answers from its cache: after the first
// call loaded it, 100 wildcard calls a second, and exact lookups, cost
// etcd no read at all, while a record written meanwhile is seen (the
// watch) and a deleted one is gone.
func TestCSDSReadsFromCache(t *testing.T) {
	var rc *rangeCounter
	env := startCSDSWith(t, func(cfg *status.CSDSConfig) { rc = countingClient(t, cfg) })
	ctx := testbase.Context(t)
	all := func() []string {
		t.Helper()
		resp, err := env.client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
		if err != nil {
			t.Fatalf("FetchClientStatus: %v", err)
		}
		return ids(resp)
	}
	if got := all(); len(got) != 4 {
		t.Fatalf("first call: %v, want the 4 records", got)
	}
	loaded := rc.n.Load()

	tick := time.NewTicker(10 * time.Millisecond) // 100 calls a second
	defer tick.Stop()
	for range 100 {
		<-tick.C
		all()
		if _, err := env.client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{exact("envoy-2")}}); err != nil {
			t.Fatalf("exact FetchClientStatus: %v", err)
		}
	}
	if got := rc.n.Load() - loaded; got != 0 {
		t.Errorf("200 calls after the first made %d etcd range requests, want 0 (the first made %d)", got, loaded)
	}

	if _, err := env.etcd.Put(ctx, status.Key(env.prefix, "late"), `{"home":"a","types":{}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.etcd.Delete(ctx, status.Key(env.prefix, "envoy-1")); err != nil {
		t.Fatal(err)
	}
	want := "envoy-2,envoy-nacked,grpc/client-1,late"
	deadline := time.Now().Add(10 * time.Second)
	for got := strings.Join(all(), ","); got != want; got = strings.Join(all(), ",") {
		if time.Now().After(deadline) {
			t.Fatalf("after a put and a delete: %s, want %s", got, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the watch's effect
	}
}

// TestCSDSMaxMatchers: a request with more node matchers than
// MaxMatchers is refused with INVALID_ARGUMENT naming the flag, and
// counted; one at the bound is answered.
func TestCSDSMaxMatchers(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := startCSDSWith(t, func(cfg *status.CSDSConfig) { cfg.MaxMatchers, cfg.Registerer = 1000, reg })
	matchers := func(n int) []*matcherv3.NodeMatcher {
		out := make([]*matcherv3.NodeMatcher, n)
		for i := range out {
			out[i] = exact(fmt.Sprintf("node-%06d", i))
		}
		return out
	}
	ctx := testbase.Context(t)
	if _, err := env.client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: matchers(1000)}); err != nil {
		t.Fatalf("1000 matchers: %v", err)
	}
	// internal/replica's TestCSDSMaxMatchers sends 200,000.
	_, err := env.client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{NodeMatchers: matchers(1001)})
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--max-csds-matchers") {
		t.Fatalf("1001 matchers: %v, want INVALID_ARGUMENT naming --max-csds-matchers", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		if mf.GetName() == "legation_csds_matchers_refused_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != 1 {
		t.Errorf("legation_csds_matchers_refused_total = %v, want 1", got)
	}
}

// TestCSDSStreamRechecks: a CSDS stream asks Authorize again each time
// the channel it returned closes, and ends with its error.
func TestCSDSStreamRechecks(t *testing.T) {
	var (
		mu      sync.Mutex
		allowed = true
		changed = make(chan struct{})
	)
	env := startCSDSWith(t, func(cfg *status.CSDSConfig) {
		cfg.Authorize = func(context.Context) (<-chan struct{}, error) {
			mu.Lock()
			defer mu.Unlock()
			if !allowed {
				return nil, grpcstatus.Error(codes.PermissionDenied, "revoked")
			}
			return changed, nil
		}
	})
	ctx, cancel := context.WithCancel(testbase.Context(t))
	defer cancel()
	st, err := env.client.StreamClientStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&statusv3.ClientStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first answer: %v", err)
	}
	// A change that keeps the client allowed leaves the stream open.
	mu.Lock()
	close(changed)
	changed = make(chan struct{})
	mu.Unlock()
	if err := st.Send(&statusv3.ClientStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("answer after a change that kept the client allowed: %v", err)
	}
	mu.Lock()
	allowed = false
	close(changed)
	mu.Unlock()
	if _, err := st.Recv(); grpcstatus.Code(err) != codes.PermissionDenied {
		t.Fatalf("after the revocation the stream got %v, want PERMISSION_DENIED", err)
	}
}

// TestCSDSCacheStalledWatch: a watch that hears nothing from etcd, not
// even the progress notification it asks for (etcd frozen behind a
// blackhole), is given up and the records read again, so that the copy
// does not age unseen; once etcd answers, what was written meanwhile is
// served.
func TestCSDSCacheStalledWatch(t *testing.T) {
	var (
		direct *clientv3.Client
		proxy  *storetest.Proxy
	)
	reg := prometheus.NewRegistry()
	env := startCSDSWith(t, func(cfg *status.CSDSConfig) {
		direct = cfg.Client
		proxy = storetest.NewProxy(t, strings.TrimPrefix(direct.Endpoints()[0], "http://"))
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Client, cfg.Registerer = c, reg
	}, func(c *status.CSDS) {
		c.SetWatchTimingForTest(50*time.Millisecond, 300*time.Millisecond, 50*time.Millisecond)
	})
	ctx := testbase.Context(t)
	if _, err := env.client.FetchClientStatus(ctx, &statusv3.ClientStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	reloads := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "legation_csds_cache_reloads_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	first := reloads()
	proxy.Fault.Set(faultnet.Fault{Mode: faultnet.Blackhole})
	for deadline := time.Now().Add(10 * time.Second); reloads() <= first; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the silent watch was not given up within 10 s")
		}
	}
	if _, err := direct.Put(ctx, status.Key(env.prefix, "meanwhile"), `{"home":"a","types":{}}`); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	matcher := &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{exact("meanwhile")}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := env.client.FetchClientStatus(ctx, matcher)
		if err == nil && len(resp.GetConfig()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record written while etcd was silent is not served: %v, %v", resp, err)
		}
	}
}

package replica_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestAdmissionFairUnderFlood: a certificate from the CA with no rule
// opens streams as fast as it can (each refused PERMISSION_DENIED), at
// many times --stream-rate; honest Envoys connecting meanwhile are all
// admitted and served. Their turns do not wait behind the flood's (each
// identity takes turns of its own), and the flood's refused streams give
// their tokens back. The rate is scaled to what this process's flood
// reaches many times over.
func TestAdmissionFairUnderFlood(t *testing.T) {
	const rogueID = "spiffe://legation.test/ns/rogue/sa/flood"
	e := newXDSEnv(t)
	k := newMTLSKit(t)
	k.grant(t, e)
	var err error
	if k.clients[rogueID], err = k.ca.Issue(t.TempDir(), "rogue", testcerts.Options{URIs: []string{rogueID}}); err != nil {
		t.Fatal(err)
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.StreamRate, cfg.StreamBurst = 100, 100
	k.configure(&cfg)
	r := start(t, cfg)
	k.waitReady(t, r)

	// The flood opens streams without waiting for earlier ones to end,
	// as an attacker would: up to 100 at once on each of 16 connections.
	ctx, stop := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	var attempts, denied atomic.Int64
	for range 16 {
		cc := xdstest.DialTLS(t, r.XDSAddr(), k.tls(t, rogueID))
		inFlight := make(chan struct{}, 100)
		flood.Go(func() {
			for ctx.Err() == nil {
				inFlight <- struct{}{}
				attempts.Add(1)
				flood.Go(func() {
					defer func() { <-inFlight }()
					s := xdstest.OpenSotW(t, cc)
					defer s.Cancel()
					s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
					if grpcstatus.Code(s.ExpectErr()) == codes.PermissionDenied {
						denied.Add(1)
					}
				})
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // the flood at full speed
	began, beganAt := attempts.Load(), time.Now()
	var honest sync.WaitGroup
	for i := range 10 {
		honest.Go(func() {
			s := xdstest.OpenSotW(t, xdstest.DialTLS(t, r.XDSAddr(), k.tls(t, mtlsEdgeID)))
			s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-honest-"+string(rune('a'+i)), "c1"), TypeUrl: resource.Cluster.URL})
			select {
			case res := <-s.Recv():
				if res.Err != nil {
					t.Errorf("honest Envoy %d refused during the flood: %v", i, res.Err)
				} else if len(res.Resp.GetResources()) != 1 {
					t.Errorf("honest Envoy %d got %d clusters, want 1", i, len(res.Resp.GetResources()))
				}
			case <-time.After(xdstest.Timeout):
				t.Errorf("honest Envoy %d got nothing during the flood", i)
			}
		})
	}
	honest.Wait()
	rate := float64(attempts.Load()-began) / time.Since(beganAt).Seconds()
	stop()
	flood.Wait()
	if rate < 3*cfg.StreamRate {
		t.Errorf("the flood opened %.0f streams a second, want at least 3 times --stream-rate (%g) for the test to mean anything", rate, cfg.StreamRate)
	}
	t.Logf("flood: %d streams, %.0f a second while honest Envoys connected; %d refused by authorization, the others over the rate", attempts.Load(), rate, denied.Load())
}

// TestSubscriptionBudgetPerConn: the subscriptions of all the streams of
// one client connection are bounded together
// (--max-subscribed-bytes-per-conn): a second delta stream taking the
// connection over it ends with RESOURCE_EXHAUSTED naming the flag; once
// the first ends, what it held is the connection's again.
func TestSubscriptionBudgetPerConn(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.MaxSubscribedBytesPerConn = 300 << 10 })
	cc := dial(t, r)
	names := func(prefix string) []string {
		out := make([]string, 1000) // 1,000 x (100 + 64) bytes: 164,000
		for i := range out {
			out[i] = fmt.Sprintf("%s-%04d-", prefix, i) + strings.Repeat("x", 100-len(prefix)-6)
		}
		return out
	}
	open := func(id string) (*xdstest.DeltaStream, error) {
		s := xdstest.OpenDelta(t, cc)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: names(id)})
		res := <-s.Recv()
		return s, res.Err
	}
	first, err := open("one")
	if err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	if _, err := open("two"); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-subscribed-bytes-per-conn") {
		t.Fatalf("the second stream on the connection: %v, want RESOURCE_EXHAUSTED naming --max-subscribed-bytes-per-conn", err)
	}
	if got := metricValue(t, reg, "legation_delta_limit_hits_total", "limit", "subscribed_bytes_conn"); got != 1 {
		t.Errorf(`legation_delta_limit_hits_total{limit="subscribed_bytes_conn"} = %v, want 1`, got)
	}
	first.Cancel()
	xdstest.WaitFor(t, "the first stream's subscriptions given back", func() (bool, string) {
		s, err := open("three")
		if err == nil {
			s.Cancel()
		}
		return err == nil, fmt.Sprint(err)
	})
	// Another connection has its own account.
	other := xdstest.OpenDelta(t, dial(t, r))
	other.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("four", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: names("four")})
	if res := <-other.Recv(); res.Err != nil {
		t.Errorf("a stream on another connection: %v", res.Err)
	}
}

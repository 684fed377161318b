//go:build unix

package sotw_test

import (
	"fmt"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkCanaryPush measures the push of a canary rollout of one
// changed assignment to 10% of 10,000 SotW ADS streams, the fan-out
// scenario of BenchmarkFanout (200 assignments of 20 endpoints, by name,
// raw clients): from the moment the view publishes the rollout's overlay
// until the last canary stream has its response. The rollout's set of
// running rollouts reaches every stream (each makes its scope chain
// again) and only the canary streams are sent anything. Each iteration
// then aborts the rollout and waits for the canary streams to be sent the
// current assignment again, outside the measurement.
//
// The metrics are BenchmarkFanout's, per canary stream
// (ms-until-all-sent, cpu-us/stream/push, ...), and canary-streams. The
// benchmark fails if a stream outside the canary receives anything.
func BenchmarkCanaryPush(b *testing.B) {
	e := canaryEnv(b)
	f := &fanout{e: e, n: 10000, names: fanoutSeed(b, e)}
	f.open(b)
	defer f.close(b)
	var canary []*fanoutClient
	for i, c := range f.cls {
		if rollout.Bucket(fmt.Sprintf("fanout-%d", i)) < 1000 {
			canary = append(canary, c)
		}
	}
	rs := e.RolloutStore()
	ctx := testbase.Context(b)
	received := f.received.Load()
	f.metrics = xdstest.PushMetrics{}
	b.ResetTimer()
	for range b.N {
		f.wantRes.Store(1)
		f.round.Start(len(canary))
		published := xdstest.MarkNextChange(f.ctx, e.View.Snapshot())
		c := int(fanoutChanges.Add(1))
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "10%", Promote: rollout.PromoteManual,
			Puts: []store.Put{xdstest.Put(b, resource.Endpoint, store.DefaultScope, fanoutCLA(c%fanoutCLAs, uint32(1024+(c*fanoutEndpoints)%60000)))}})
		if err != nil {
			b.Fatal(err)
		}
		f.wait(b, "the canary")
		end := xdstest.MarkNow()
		b.StopTimer()
		f.metrics.Add(xdstest.WaitMark(b, published, fanoutTimeout), end, f.round.Bytes())
		ackCanary(b, f, canary)
		f.round.Start(len(canary))
		if _, err := rs.Abort(ctx, r.ID, "benchmark"); err != nil {
			b.Fatal(err)
		}
		f.wait(b, "the abort")
		ackCanary(b, f, canary)
		b.StartTimer()
	}
	b.StopTimer()
	if got, want := f.received.Load()-received, int64(2*b.N*len(canary)); got != want {
		b.Fatalf("%d responses received, want %d: 2 per canary stream per iteration, none to the others", got, want)
	}
	f.metrics.Report(b, len(canary))
	b.ReportMetric(float64(len(canary)), "canary-streams")
}

// ackCanary has the canary clients ACK their last response and waits
// until the server has taken every ACK.
func ackCanary(b *testing.B, f *fanout, canary []*fanoutClient) {
	b.Helper()
	var ver string
	for _, c := range canary {
		c.mu.Lock()
		req := &discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, VersionInfo: string(c.ver), ResponseNonce: string(c.nonce), ResourceNames: f.names}
		c.mu.Unlock()
		ver = req.VersionInfo
		if err := c.st.Send(req); err != nil {
			b.Fatalf("ack: %v", err)
		}
	}
	xdstest.WaitAcked(b, fanoutTimeout, len(canary), ver, func(ver string) int {
		acked := 0
		for _, s := range f.e.srv.Streams() {
			if ts := s.Types[resource.Endpoint.Name]; ts != nil && ts.VersionAcked == ver {
				acked++
			}
		}
		return acked
	})
}

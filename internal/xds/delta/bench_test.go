package delta_test

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkDeltaPush measures one changed cluster pushed to wildcard CDS
// delta ADS streams holding 1000, 10,000 or 100,000 clusters (the
// performance target "delta, 100,000 clusters, one cluster changed: one
// resource per stream; cost flat from 1k to 100k clusters"): the scenario
// and metrics of xdstest.BenchmarkPush, which internal/xds/sotw's
// BenchmarkSotWPushSameChange runs over SotW. Every push must give every
// stream exactly one response, holding exactly the changed cluster at the
// write's revision and removing nothing.
func BenchmarkDeltaPush(b *testing.B) {
	e := newEnvWith(b, xdstest.PushOptions())
	xdstest.BenchmarkPush(b, xdstest.PushServer{
		Env:   e.Env,
		Addr:  e.addr,
		Delta: true,
		Acked: func(ver string) int {
			acked := 0
			for _, s := range e.srv.Streams() {
				if ts := s.Types[resource.Cluster.Name]; ts != nil && strings.HasPrefix(s.NodeID, "push-") &&
					ts.SystemVersionAcked == ver && ts.Outstanding == "" {
					acked++
				}
			}
			return acked
		},
		Open: func() int { return len(e.srv.Streams()) },
	})
}

package delta_test

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkIdleStreamMemory reports the memory each idle delta ADS stream
// costs holding 400 resources (200 clusters by wildcard CDS, their 200
// endpoint sets by name): the scenario and metrics of
// xdstest.BenchmarkStreamMemory, which internal/xds/sotw's
// BenchmarkIdleStreamMemory runs over SotW.
func BenchmarkIdleStreamMemory(b *testing.B) {
	e := newEnvWith(b, xdstest.MemoryOptions())
	xdstest.BenchmarkStreamMemory(b, xdstest.MemoryServer{
		Env:   e.Env,
		Addr:  e.addr,
		Delta: true,
		Settled: func() int {
			settled := 0
			for _, s := range e.srv.Streams() {
				c, ep := s.Types[resource.Cluster.Name], s.Types[resource.Endpoint.Name]
				if strings.HasPrefix(s.NodeID, "mem-") && c != nil && ep != nil &&
					c.Outstanding == "" && ep.Outstanding == "" && c.SystemVersionAcked != "" && ep.SystemVersionAcked != "" &&
					c.Held == 200 && ep.Held == 200 {
					settled++
				}
			}
			return settled
		},
		Open: func() int { return len(e.srv.Streams()) },
	})
}

package sotw_test

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkSotWPushSameChange is internal/xds/delta's BenchmarkDeltaPush
// scenario over SotW (xdstest.BenchmarkPush, which documents the
// scenario and the metrics): the same clusters, streams and change, with
// wildcard CDS SotW ADS streams. SotW CDS is full-state, so each push
// sends every cluster to every stream: bytes and cost grow with the
// cluster count, which is the comparison. Every push must give every
// stream exactly one response holding every cluster at the write's
// revision.
func BenchmarkSotWPushSameChange(b *testing.B) {
	e := newEnvWith(b, xdstest.PushOptions())
	xdstest.BenchmarkPush(b, xdstest.PushServer{
		Env:  e.Env,
		Addr: e.addr,
		Acked: func(ver string) int {
			acked := 0
			for _, s := range e.srv.Streams() {
				if ts := s.Types[resource.Cluster.Name]; ts != nil && strings.HasPrefix(s.NodeID, "push-") && ts.VersionAcked == ver {
					acked++
				}
			}
			return acked
		},
		Open: func() int { return len(e.srv.Streams()) },
	})
}

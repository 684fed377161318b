package delta_test

import (
	"fmt"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/tools/procstat"
)

// BenchmarkSubscribeOneName: a delta EDS stream holding `held` names
// subscribes one more name and is answered (the name is absent: listed
// removed), then unsubscribes it, over real gRPC in this process. A
// request costs what it names, not what the stream holds: cpu-µs/request
// (the process's CPU, client and server together) is the same with 10
// names held as with 9,999 (one short of --max-names), where it was proportional to the names held
// (the set was copied and interned again on each change).
func BenchmarkSubscribeOneName(b *testing.B) {
	for _, held := range []int{10, 9_999} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			e := newEnv(b)
			s := e.deltaEDS(b)
			names := make([]string, held)
			for i := range names {
				names[i] = fmt.Sprintf("cluster-%05d.some-namespace.svc.cluster.local", i)
			}
			s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: names})
			s.Ack(s.Expect())
			one := []string{"one-more.some-namespace.svc.cluster.local"}
			cpu := procstat.CPU()
			b.ResetTimer()
			for b.Loop() {
				s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: one})
				resp := s.Expect()
				if len(resp.GetRemovedResources()) != 1 {
					b.Fatalf("a subscribe of an absent name answered %d removed, want 1", len(resp.GetRemovedResources()))
				}
				s.Ack(resp)
				s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: one})
			}
			b.ReportMetric(float64((procstat.CPU()-cpu).Microseconds())/float64(3*b.N), "cpu-µs/request")
		})
	}
}

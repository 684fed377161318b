package relay_test

import (
	"context"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkRelayOverhead measures what relaying adds to a stream: one op
// opens a SotW ADS stream on an open connection, sends a wildcard CDS
// request for a node homed on B, receives the initial response of 100
// clusters, and ends the stream. "direct" goes to B; "relayed" goes to A,
// which relays it to B (its connection to B pooled). Both replicas and
// the client run in this process, so allocs count all three.
func BenchmarkRelayOverhead(b *testing.B) {
	c := newCluster(b)
	ra := c.addReplica(b, "a")
	rb := c.addReplica(b, "b")
	c.apply(b, clusters(100)...)
	ra.setHomes(map[string]string{"nb": "b"})
	req := cdsRequest("nb")
	for _, bc := range []struct {
		name string
		addr string
	}{
		{"direct", rb.addr},
		{"relayed", ra.addr},
	} {
		b.Run(bc.name, func(b *testing.B) {
			client := discoveryv3.NewAggregatedDiscoveryServiceClient(xdstest.Dial(b, bc.addr))
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				s, err := client.StreamAggregatedResources(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Send(req); err != nil {
					b.Fatal(err)
				}
				resp, err := s.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.GetResources()) != 100 {
					b.Fatalf("%d resources, want 100", len(resp.GetResources()))
				}
				cancel()
			}
		})
	}
}

package relay

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/proto"
)

// FuzzNodeOf feeds the decoder of a stream's first request, the one
// input this package reads from clients, with anything: it must never
// panic, and must find the node id a valid request names.
func FuzzNodeOf(f *testing.F) {
	for _, m := range []proto.Message{
		&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: "t"},
		&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, InitialResourceVersions: map[string]string{"a": "1"}},
		&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "n1"}, ClusterStats: []*endpointv3.ClusterStats{{ClusterName: "c"}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff})
	f.Add([]byte{0x12, 0x05, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, k := range []kind{sotw, delta, load} {
			id, err := nodeOf(b, k)
			if err != nil {
				continue
			}
			var want string
			switch k {
			case sotw:
				var r discoveryv3.DiscoveryRequest
				proto.Unmarshal(b, &r) //nolint:errcheck // nodeOf decoded it
				want = r.GetNode().GetId()
			case delta:
				var r discoveryv3.DeltaDiscoveryRequest
				proto.Unmarshal(b, &r) //nolint:errcheck // nodeOf decoded it
				want = r.GetNode().GetId()
			case load:
				var r loadv3.LoadStatsRequest
				proto.Unmarshal(b, &r) //nolint:errcheck // nodeOf decoded it
				want = r.GetNode().GetId()
			}
			if id != want {
				t.Errorf("nodeOf(%x, %d) = %q, want %q", b, k, id, want)
			}
		}
	})
}

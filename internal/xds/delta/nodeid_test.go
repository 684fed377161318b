package delta_test

import (
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestNodeIDPrintable: a delta stream whose node id carries a control
// character (a terminal escape, a carriage return that would rewrite an
// operator's table) ends with INVALID_ARGUMENT naming it, counted.
func TestNodeIDPrintable(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"evil\x1b]0;pwned\x07", "ok\rforged"} {
		s := e.deltaADS(t)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Cluster.URL})
		if err := s.ExpectErr(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "must be printable text") {
			t.Errorf("node id %q: %v, want INVALID_ARGUMENT naming the rule", id, err)
		}
	}
	if got := xdstest.CounterSum(t, e.reg, "legation_delta_limit_hits_total", "limit", "node_id_text"); got != 2 {
		t.Errorf(`legation_delta_limit_hits_total{limit="node_id_text"} = %v, want 2`, got)
	}
}

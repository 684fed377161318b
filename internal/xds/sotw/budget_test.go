package sotw_test

import (
	"fmt"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestSubscriptionBudget: a SotW stream's subscriptions are bounded over
// all its types together: 1,400 names of 700 bytes (some 1 MiB, under
// --max-names, --max-name-length and the test server's request size)
// are taken on each of three types; the same on a fourth ends the stream
// with RESOURCE_EXHAUSTED naming --max-subscribed-bytes-per-stream
// (4 MiB), counted.
func TestSubscriptionBudget(t *testing.T) {
	e := newEnv(t)
	s := e.adsStream(t)
	names := func(typ *resource.Type) []string {
		out := make([]string, 1400)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%05d-", typ.Name, i) + strings.Repeat("x", 680)
		}
		return out
	}
	for i, typ := range []*resource.Type{resource.Endpoint, resource.Route, resource.Cluster, resource.Listener} {
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("prober", "c1"), TypeUrl: typ.URL, ResourceNames: names(typ)})
		if i < 3 {
			if res := s.Expect(); res.GetTypeUrl() != typ.URL {
				t.Fatalf("answered %s, want %s", res.GetTypeUrl(), typ.URL)
			}
		}
	}
	for {
		res := <-s.Recv()
		if res.Err == nil {
			continue
		}
		if status.Code(res.Err) != codes.ResourceExhausted || !strings.Contains(res.Err.Error(), "--max-subscribed-bytes-per-stream") {
			t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming --max-subscribed-bytes-per-stream", res.Err)
		}
		break
	}
	if got := limitHits(t, e.reg, "subscribed_bytes"); got != 1 {
		t.Errorf(`legation_sotw_limit_hits_total{limit="subscribed_bytes"} = %v, want 1`, got)
	}
}

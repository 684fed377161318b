package sotw_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// TestPollBounds: REST-JSON polls and unary Fetches are bounded as
// streams are, by --max-names, --max-name-length and --max-node-id-length
// (and node ids must be printable text),
// with the streams' status codes (HTTP 429 for RESOURCE_EXHAUSTED, 400 for
// INVALID_ARGUMENT) and messages naming the flag; each hit is counted.
func TestPollBounds(t *testing.T) {
	e := newEnv(t, func(c *sotw.Config) {
		c.MaxNames, c.MaxNameLength, c.MaxNodeIDLength = limits.Max(3), limits.Max(16), limits.Max(32)
	})
	h := e.srv.RESTHandler()
	client := clusterservice.NewClusterDiscoveryServiceClient(e.conn(t))
	long := strings.Repeat("x", 17)
	for _, tc := range []struct {
		name  string
		id    string
		names []string
		code  codes.Code
		http  int
		flag  string
		limit string
	}{
		{"too many names", "n", []string{"a", "b", "c", "d"}, codes.ResourceExhausted, http.StatusTooManyRequests, "--max-names", "names"},
		{"name too long", "n", []string{"a", long}, codes.InvalidArgument, http.StatusBadRequest, "--max-name-length", "name_length"},
		{"node id too long", strings.Repeat("n", 33), nil, codes.InvalidArgument, http.StatusBadRequest, "--max-node-id-length", "node_id_length"},
		{"node id with a terminal escape", "evil\x1b[31m", nil, codes.InvalidArgument, http.StatusBadRequest, "U+001B at byte 4: a node id must be printable text", "node_id_text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := limitHits(t, e.reg, tc.limit)
			code, body := restPoll(t, h, tc.id, "", "", tc.names...)
			if code != tc.http || !strings.Contains(body, tc.flag) {
				t.Errorf("REST: status %d, %q; want %d naming %s", code, body, tc.http, tc.flag)
			}
			_, err := client.FetchClusters(context.Background(), &discoveryv3.DiscoveryRequest{Node: xdstest.Node(tc.id, ""), ResourceNames: tc.names})
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("Fetch: %v; want %s naming %s", err, tc.code, tc.flag)
			}
			if got := limitHits(t, e.reg, tc.limit) - before; got != 2 {
				t.Errorf("limit_hits_total{limit=%q} rose by %v, want 2", tc.limit, got)
			}
		})
	}
	t.Run("stream, node id too long", func(t *testing.T) {
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(strings.Repeat("n", 33), "c1"), TypeUrl: resource.Cluster.URL})
		if err := s.ExpectErr(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--max-node-id-length") {
			t.Fatalf("got %v, want InvalidArgument naming --max-node-id-length", err)
		}
	})
	t.Run("stream, node id with a carriage return", func(t *testing.T) {
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("ok\rforged", "c1"), TypeUrl: resource.Cluster.URL})
		if err := s.ExpectErr(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "U+000D at byte 2") {
			t.Fatalf("got %v, want InvalidArgument naming the control character", err)
		}
	})
	t.Run("at the bounds", func(t *testing.T) {
		code, body := restPoll(t, h, strings.Repeat("n", 32), "", "", "a", "b", strings.Repeat("c", 16))
		if code != http.StatusOK {
			t.Errorf("REST at the bounds: status %d: %s", code, body)
		}
	})
}

package sotw_test

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestSotWXDSTPNormalized: xRFC TP1, "Two xdstp:// URNs are considered
// equivalent if they match component-wise modulo context parameter
// ordering": a client asking for a resource by another spelling of its
// xdstp name (context parameters in another order, another
// percent-encoding) is sent it, under the normalized name the resource
// is stored under; a malformed xdstp name names no resource (NOT_FOUND).
func TestSotWXDSTPNormalized(t *testing.T) {
	const eds = "xdstp://fed-a/envoy.config.endpoint.v3.ClusterLoadAssignment/svc"
	e := newEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints(eds+"?env=prod&zone=b", 80))})
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n", ""), TypeUrl: resource.Endpoint.URL,
		ResourceNames: []string{eds + "?zone=%62&env=prod", eds + "?zone"}})
	resp := s.ExpectType(resource.Endpoint)
	if got := xdstest.Names(t, resp); !slices.Equal(got, []string{eds + "?env=prod&zone=b"}) {
		t.Errorf("sent %q, want the resource under its normalized name", got)
	}
	if got, want := xdstest.ResourceErrors(resp.GetResourceErrors()), []string{"NOT_FOUND:" + eds + "?zone"}; !slices.Equal(got, want) {
		t.Errorf("resource_errors %q, want %q", got, want)
	}
}

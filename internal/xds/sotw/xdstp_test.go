package sotw_test

import (
	"slices"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
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

// TestSotWAuthorities: a server serves the resources of its authorities
// (--authority), of the empty one and with old-style names; another
// authority's resource, though stored, is in no wildcard answer, and a
// client asking for it by name is told which authorities the server
// serves, in a resource error rather than silence.
func TestSotWAuthorities(t *testing.T) {
	const (
		cds = "/envoy.config.cluster.v3.Cluster/svc"
		eds = "/envoy.config.endpoint.v3.ClusterLoadAssignment/svc"
	)
	auth, err := xdstp.NewAuthorities([]string{"fed-a"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, xdstest.Options{Serves: auth.Serves}, func(c *sotw.Config) { c.Authorities = auth })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("plain", 100)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("xdstp://fed-a"+cds, 100)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("xdstp://"+cds, 100)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("xdstp://fed-b"+cds, 100)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("xdstp://fed-b"+eds, 80)),
	})
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n", ""), TypeUrl: resource.Cluster.URL})
	if got, want := xdstest.Names(t, s.ExpectType(resource.Cluster)), []string{"plain", "xdstp://" + cds, "xdstp://fed-a" + cds}; !slices.Equal(got, want) {
		t.Errorf("wildcard CDS: %q, want %q", got, want)
	}
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"xdstp://fed-b" + eds}})
	resp := s.ExpectType(resource.Endpoint)
	re := resp.GetResourceErrors()
	if len(resp.GetResources()) != 0 || len(re) != 1 || re[0].GetResourceName().GetName() != "xdstp://fed-b"+eds ||
		!strings.Contains(re[0].GetErrorDetail().GetMessage(), `authority "fed-b" is not one this server serves (fed-a)`) {
		t.Errorf("EDS of another authority: %s, errors %v", xdstest.Summary(resp), re)
	}
}

// TestSotWRefusesLbEndpoint: an LbEndpoint has no name of its own, so a
// SotW response of bare LbEndpoints could not say which is which; LEDS
// is served over delta only, and a SotW request for the type ends the
// stream with INVALID_ARGUMENT naming why.
func TestSotWRefusesLbEndpoint(t *testing.T) {
	e := newEnv(t)
	s := e.adsStream(t)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n", ""), TypeUrl: resource.LbEndpoint.URL,
		ResourceNames: []string{"xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*"}})
	err := s.ExpectErr()
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "served over delta xDS only") {
		t.Fatalf("stream ended with %v, want INVALID_ARGUMENT saying LbEndpoint is served over delta only", err)
	}
}

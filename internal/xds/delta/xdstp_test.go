package delta_test

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// deltaNames is the names of resp's resources.
func deltaNames(resp *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, r := range resp.GetResources() {
		out = append(out, r.GetName())
	}
	return out
}

// TestDeltaXDSTPNormalized: xRFC TP1, "Two xdstp:// URNs are considered
// equivalent if they match component-wise modulo context parameter
// ordering", on delta: a subscription, an unsubscription and an
// initial_resource_versions key in another spelling of a resource's
// xdstp name all mean the resource, which is sent under its normalized
// name.
func TestDeltaXDSTPNormalized(t *testing.T) {
	const eds = "xdstp://fed-a/envoy.config.endpoint.v3.ClusterLoadAssignment/svc"
	const norm = eds + "?env=prod&zone=b"
	e := newEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints(norm, 80))})
	s := e.deltaADS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n", ""), TypeUrl: resource.Endpoint.URL,
		ResourceNamesSubscribe: []string{eds + "?zone=b&env=prod"}})
	resp := s.ExpectType(resource.Endpoint)
	if got := deltaNames(resp); !slices.Equal(got, []string{norm}) {
		t.Fatalf("sent %q, want the resource under its normalized name", got)
	}
	s.Ack(resp)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{eds + "?zone=%62&env=prod"}})
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints(norm, 81))})
	s.ExpectNone() // unsubscribed by another spelling

	// A reconnecting client presenting the version it holds under
	// another spelling is not sent it again.
	re := e.deltaADS(t)
	cur := xdstest.Version(rev)
	re.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n", ""), TypeUrl: resource.Endpoint.URL,
		ResourceNamesSubscribe:  []string{eds + "?env=prod&zone=b"},
		InitialResourceVersions: map[string]string{eds + "?zone=b&env=prod": cur}})
	re.ExpectNone()
}

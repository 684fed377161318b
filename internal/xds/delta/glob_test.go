package delta_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3svc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

const ledsPrefix = "xdstp://leds/envoy.config.endpoint.v3.LbEndpoint/"

// deltaLEDS opens a raw stream of the LEDS service
// (LocalityEndpointDiscoveryService.DeltaLocalityEndpoints).
func (e *env) deltaLEDS(tb testing.TB) *xdstest.DeltaStream {
	tb.Helper()
	return &xdstest.DeltaStream{Stream: xdstest.Open(tb, e.dial(tb), func(ctx context.Context, cc *grpc.ClientConn) (deltaClient, error) {
		return endpointv3svc.NewLocalityEndpointDiscoveryServiceClient(cc).DeltaLocalityEndpoints(ctx)
	})}
}

// memberPut is the put of LbEndpoint name on 127.0.0.1:port.
func memberPut(tb testing.TB, name string, port uint32) store.Put {
	return xdstest.PutNamed(tb, resource.LbEndpoint, store.DefaultScope, name,
		fixture.LbEndpoint(fixture.Endpoint{Address: "127.0.0.1", Port: port}))
}

// applyBatches applies puts a hundred at a time (etcd's default
// --max-txn-ops is 128) and returns the last revision.
func applyBatches(t *testing.T, e *env, puts []store.Put) int64 {
	var rev int64
	for i := 0; i < len(puts); i += 100 {
		rev = e.Apply(t, puts[i:min(i+100, len(puts))])
	}
	return rev
}

func sortedNames(resp *discoveryv3.DeltaDiscoveryResponse) []string {
	names := deltaNames(resp)
	slices.Sort(names)
	return names
}

// TestDeltaGlobCollection: xRFC TP1 "Glob" on a raw LEDS stream. A
// subscription to xdstp://leds/envoy.config.endpoint.v3.LbEndpoint/c1/*
// gets the collection's 1,000 members and nothing else (not a deeper
// path, not another collection, not a member with other context
// parameters); then, as "Glob collections will send the single
// additional resource (due to the operation of delta xDS)", one member
// added, changed or deleted sends that member alone, a deletion in
// removed_resources. "If no resources are present in the glob
// collection, the server should reply with a DeltaDiscoveryResponse in
// which the glob collection URL is specified in removed_resources." An
// unsubscribed collection sends nothing more; a reconnecting client that
// presents the members it holds is not sent them again.
func TestDeltaGlobCollection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 1000
	var puts []store.Put
	var want []string
	for i := range n {
		name := fmt.Sprintf("%sc1/e%04d", ledsPrefix, i)
		puts = append(puts, memberPut(t, name, uint32(10000+i)))
		want = append(want, name)
	}
	puts = append(puts,
		memberPut(t, ledsPrefix+"c1/sub/deeper", 1),   // not a direct child
		memberPut(t, ledsPrefix+"c2/other", 2),        // another collection
		memberPut(t, ledsPrefix+"c1/e0001?zone=a", 3)) // other context parameters
	applyBatches(t, e, puts)

	glob := ledsPrefix + "c1/*"
	s := e.deltaLEDS(t)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n1"}, ResourceNamesSubscribe: []string{glob}})
	resp := s.ExpectType(resource.LbEndpoint)
	if got := sortedNames(resp); !slices.Equal(got, want) {
		t.Fatalf("subscribing %s sent %d resources, want the %d members (first sent %q)", glob, len(got), n, got[:min(3, len(got))])
	}
	if len(resp.GetRemovedResources()) > 0 {
		t.Fatalf("removed_resources %q in the first answer", resp.GetRemovedResources())
	}
	s.Ack(resp)

	added := ledsPrefix + "c1/e1000"
	rev := e.Apply(t, []store.Put{memberPut(t, added, 11000)})
	resp = s.ExpectType(resource.LbEndpoint)
	checkResp(t, "a member added", resp, map[string]string{added: v(rev)})
	s.Ack(resp)

	changed := ledsPrefix + "c1/e0010"
	rev = e.Apply(t, []store.Put{memberPut(t, changed, 12010)})
	resp = s.ExpectType(resource.LbEndpoint)
	checkResp(t, "a member changed", resp, map[string]string{changed: v(rev)})
	s.Ack(resp)

	gone := ledsPrefix + "c1/e0005"
	e.Apply(t, nil, xdstest.Key(resource.LbEndpoint, gone))
	resp = s.ExpectType(resource.LbEndpoint)
	checkResp(t, "a member deleted", resp, nil, gone)
	s.Ack(resp)

	e.Apply(t, []store.Put{memberPut(t, ledsPrefix+"c2/more", 4), memberPut(t, ledsPrefix+"c1/sub/more", 5)})
	s.ExpectNone() // outside the collection

	empty := ledsPrefix + "c3/*"
	s.Send(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{empty}})
	resp = s.ExpectType(resource.LbEndpoint)
	checkResp(t, "an empty collection subscribed", resp, nil, empty)
	s.Ack(resp)
	rev = e.Apply(t, []store.Put{memberPut(t, ledsPrefix+"c3/first", 6)})
	resp = s.ExpectType(resource.LbEndpoint)
	checkResp(t, "the empty collection's first member", resp, map[string]string{ledsPrefix + "c3/first": v(rev)})
	s.Ack(resp)

	s.Send(&discoveryv3.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{glob}})
	e.Apply(t, []store.Put{memberPut(t, ledsPrefix+"c1/e0011", 12011)})
	s.ExpectNone() // unsubscribed

	// A reconnect presenting every member at its version gets nothing.
	held := map[string]string{}
	snap := e.View.Snapshot()
	snap.Walk(resource.LbEndpoint, store.DefaultScope, func(en *view.Entry) bool {
		if strings.HasPrefix(en.Name, ledsPrefix+"c1/e") && !strings.Contains(en.Name, "?") {
			held[en.Name] = v(en.ModRevision)
		}
		return true
	})
	re := e.deltaLEDS(t)
	re.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n2"}, ResourceNamesSubscribe: []string{glob}, InitialResourceVersions: held})
	re.ExpectNone()
}

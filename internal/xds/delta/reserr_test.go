package delta_test

// Per-resource errors (xRFC TP3, resource_errors; docs/concepts/design.md,
// "Per-resource errors"). The sentences of TP3 the scripts check:
//
//   - DeltaDiscoveryResponse.resource_errors: "A resource in this field
//     with a status of NOT_FOUND should be treated the same as a resource
//     listed in the removed_resources or removed_resource_names fields."
//   - "As the clients don't look at this field right now, the xDS
//     management server must assume the responses remain valid for older
//     clients": removed_resources still lists every name it listed.
//   - "The xDS Management server is only expected to return the error
//     message once rather than throughout for future responses."
//   - Wildcard: "The control could just not use this mechanism for
//     wildcard subscriptions".

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// errs checks the resource_errors of the last response: want, in order,
// as "CODE:name" (xdstest.ResourceErrors).
func errs(want ...string) step {
	return func(r *scriptRun) {
		r.t.Helper()
		if got := xdstest.ResourceErrors(r.last.GetResourceErrors()); !slices.Equal(got, want) {
			r.t.Fatalf("resource_errors of %s: got %q, want %q", xdstest.Summary(r.last), got, want)
		}
	}
}

func TestDeltaResourceErrors(t *testing.T) {
	t.Parallel()
	node := &corev3.Node{Id: "n1"}
	runScripts(t, []script{
		{name: "a missing name: removed and NOT_FOUND once, sent when it appears, both when deleted", steps: []step{
			apply(eds("a", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", "b"}}),
			expect(resource.Endpoint, "a, b", vers{"a": 1}, "b"), errs("NOT_FOUND:b"), ack(),
			apply(eds("a", 2)),
			expect(resource.Endpoint, "a changed", vers{"a": 2}), errs(), ack(),
			apply(eds("b", 1)),
			expect(resource.Endpoint, "b created", vers{"b": 3}), errs(), ack(),
			applyDel(nil, xdstest.Key(resource.Endpoint, "b")),
			expect(resource.Endpoint, "b deleted", nil, "b"), errs("NOT_FOUND:b"), ack(),
			none(),
		}},
		{name: "subscribed again: told again", steps: []step{
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"b"}}),
			expect(resource.Endpoint, "b", nil, "b"), errs("NOT_FOUND:b"), ack(),
			send(&dreq{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"b"}}),
			expect(resource.Endpoint, "b again", nil, "b"), errs("NOT_FOUND:b"), ack(),
			none(),
		}},
		{name: "wildcard: removals without errors, explicit names with", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).deltaADS),
			send(&dreq{Node: node, TypeUrl: resource.Cluster.URL}),
			expect(resource.Cluster, "legacy wildcard", vers{"a": 1, "b": 1}), errs(), ack(),
			applyDel(nil, xdstest.Key(resource.Cluster, "b")),
			expect(resource.Cluster, "b deleted", nil, "b"), errs(), ack(),
			send(&dreq{TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"x"}}),
			expect(resource.Cluster, "x under the wildcard, by name", nil, "x"), errs("NOT_FOUND:x"), ack(),
			none(),
		}},
	})
}

// TestDeltaResourceErrorsShared: streams in the same state share one
// body, errors included; a stream told other errors (or none) is never
// sent another stream's body.
func TestDeltaResourceErrorsShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1))})
	encodes := xdstest.CounterSum(t, e.reg, "legation_delta_response_encodes_total")
	for i, c := range []struct {
		names   []string
		removed []string
		want    []string
	}{
		{[]string{"a", "b"}, []string{"b"}, []string{"NOT_FOUND:b"}},
		{[]string{"a", "b"}, []string{"b"}, []string{"NOT_FOUND:b"}}, // the same body
		{[]string{"a"}, nil, nil},
		{[]string{"a", "c"}, []string{"c"}, []string{"NOT_FOUND:c"}},
	} {
		s := e.deltaADS(t)
		s.Send(&dreq{Node: xdstest.Node("n"+string(rune('0'+i)), ""), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: c.names})
		resp := s.ExpectType(resource.Endpoint)
		if got := slices.Sorted(maps.Keys(xdstest.Versions(resp))); !slices.Equal(got, []string{"a"}) || !slices.Equal(resp.GetRemovedResources(), c.removed) {
			t.Errorf("stream %d asking %v: got %v, removed %v; want [a], removed %v", i, c.names, got, resp.GetRemovedResources(), c.removed)
		}
		if got := xdstest.ResourceErrors(resp.GetResourceErrors()); !slices.Equal(got, c.want) {
			t.Errorf("stream %d asking %v: resource_errors %q, want %q", i, c.names, got, c.want)
		}
	}
	if got := xdstest.CounterSum(t, e.reg, "legation_delta_response_encodes_total") - encodes; got != 3 {
		t.Errorf("legation_delta_response_encodes_total grew by %v for 4 streams in 3 states, want 3", got)
	}

	// The same removal, to a wildcard stream (no error) and to one that
	// subscribes the name (NOT_FOUND): two bodies.
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("b", 1))})
	wildcard, named := e.deltaADS(t), e.deltaADS(t)
	wildcard.Send(&dreq{Node: xdstest.Node("w", ""), TypeUrl: resource.Cluster.URL})
	named.Send(&dreq{Node: xdstest.Node("n", ""), TypeUrl: resource.Cluster.URL, ResourceNamesSubscribe: []string{"b"}})
	for _, s := range []*xdstest.DeltaStream{wildcard, named} {
		s.Ack(s.ExpectType(resource.Cluster))
	}
	e.Apply(t, nil, xdstest.Key(resource.Cluster, "b"))
	for _, c := range []struct {
		s    *xdstest.DeltaStream
		want []string
	}{{wildcard, nil}, {named, []string{"NOT_FOUND:b"}}} {
		resp := c.s.ExpectType(resource.Cluster)
		if got := xdstest.ResourceErrors(resp.GetResourceErrors()); !slices.Equal(resp.GetRemovedResources(), []string{"b"}) || !slices.Equal(got, c.want) {
			t.Errorf("b deleted: removed %v, resource_errors %q; want [b], %q", resp.GetRemovedResources(), got, c.want)
		}
	}
}

// TestDeltaResourceErrorsPermission: a cluster withheld for its inline
// private key is removed with PERMISSION_DENIED for a client subscribing
// it by name and not allowed secrets; a client allowed them is sent it.
func TestDeltaResourceErrorsPermission(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.Authorizer = denySecrets{} })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "keyed")),
	})
	for _, c := range []struct {
		client         string
		names, removed []string
		wantErrs       []string
		withoutSecrets bool
	}{
		{"allowed", []string{"a", "keyed"}, []string{"nope"}, []string{"NOT_FOUND:nope"}, false},
		{"denied", []string{"a"}, []string{"keyed", "nope"}, []string{"PERMISSION_DENIED:keyed", "NOT_FOUND:nope"}, true},
	} {
		var opts []grpc.DialOption
		if c.withoutSecrets {
			opts = append(opts, grpc.WithStreamInterceptor(noSecrets))
		}
		s := xdstest.OpenDelta(t, xdstest.Dial(t, e.addr, opts...))
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n-"+c.client, "g"), TypeUrl: resource.Cluster.URL,
			ResourceNamesSubscribe: []string{"a", "keyed", "nope"}})
		resp := s.ExpectType(resource.Cluster)
		if got := slices.Sorted(maps.Keys(xdstest.Versions(resp))); !slices.Equal(got, c.names) || !slices.Equal(resp.GetRemovedResources(), c.removed) {
			t.Errorf("%s: got %v, removed %v; want %v, removed %v", c.client, got, resp.GetRemovedResources(), c.names, c.removed)
		}
		if got := xdstest.ResourceErrors(resp.GetResourceErrors()); !slices.Equal(got, c.wantErrs) {
			t.Errorf("%s: resource_errors %q, want %q", c.client, got, c.wantErrs)
		}
	}
	// Counted once the response is sent, which the client may see
	// first.
	xdstest.WaitFor(t, "legation_delta_resource_errors_total{type=cluster,code=PERMISSION_DENIED} = 1", func() (bool, string) {
		got := xdstest.CounterSum(t, e.reg, "legation_delta_resource_errors_total", "type", "cluster", "code", "PERMISSION_DENIED")
		return got == 1, fmt.Sprintf("it is %v", got)
	})
}

package sotw_test

// Per-resource errors (xRFC TP3, resource_errors; docs/concepts/design.md,
// "Per-resource errors"). The sentences of TP3 each script checks:
//
//   - "This proposal introduces a mechanism for the xDS control plane to
//     communicate errors to clients in cases where the control plane is
//     unable to send a resource that the client has subscribed to (e.g.,
//     because the resource does not exist or because the client lacks
//     permission for the resource)".
//   - "Note that an error with status code NOT_FOUND will be interpreted to
//     mean that the resource does not exist."
//   - "The xDS Management server is only expected to return the error
//     message once rather than throughout for future responses. The client
//     is expected to remember the error message until either a new error
//     message is returned or the resource is returned. This includes LDS
//     and CDS".
//   - "in the SotW variant, LDS and CDS are required to send all
//     subscribed resources in every response, which means that if a
//     control plane wants to send an update for one of these resource
//     types that indicates an error with a particular resource, it must
//     still include all of the subscribed resources that it can return in
//     that response."
//   - Wildcard: "The control could just not use this mechanism for
//     wildcard subscriptions, because if the client doesn't have
//     permission to access a resource, then it probably shouldn't be
//     considered to match the wildcard subscription to begin with."

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
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

func TestSotWResourceErrors(t *testing.T) {
	t.Parallel()
	node := xdstest.Node("n1", "")
	runScripts(t, []script{
		{name: "named type: a missing name is told once, sent when it appears, told when deleted", steps: []step{
			apply(eds("a", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, node, "a", "b")),
			expect(resource.Endpoint, at(1), "a"), errs("NOT_FOUND:b"),
			ack("a", "b"),
			apply(eds("a", 2)),
			expect(resource.Endpoint, at(2), "a"), errs(), // told once
			ack("a", "b"),
			apply(eds("b", 1)),
			expect(resource.Endpoint, at(3), "b"), errs(), // sent normally
			ack("a", "b"),
			// A deleted named resource could not be told in SotW before
			// TP3; now it is, with no resource.
			applyDel(nil, xdstest.Key(resource.Endpoint, "b")),
			expect(resource.Endpoint, at(4)), errs("NOT_FOUND:b"),
			ack("a", "b"),
			none(),
		}},
		{name: "full-state type asked by name: every resource that exists, the missing told once", steps: []step{
			apply(lds("l1", "r")),
			open((*env).adsStream),
			send(sotwRequest(resource.Listener, node, "l1", "l2")),
			expect(resource.Listener, at(1), "l1"), errs("NOT_FOUND:l2"),
			ack("l1", "l2"),
			apply(ldsStat("l1", "r", "changed")),
			expect(resource.Listener, at(2), "l1"), errs(),
			ack("l1", "l2"),
			apply(lds("l2", "r")),
			expect(resource.Listener, at(3), "l1", "l2"), errs(),
			ack("l1", "l2"),
			applyDel(nil, xdstest.Key(resource.Listener, "l2")),
			expect(resource.Listener, at(4), "l1"), errs("NOT_FOUND:l2"),
			ack("l1", "l2"),
			none(),
		}},
		{name: "a name asked again after it was dropped is told again", steps: []step{
			apply(eds("a", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, node, "a", "b")),
			expect(resource.Endpoint, at(1), "a"), errs("NOT_FOUND:b"), save("first"),
			ack("a"),
			none(),
			ackOf("first", "a", "b"),
			expect(resource.Endpoint, at(1)), errs("NOT_FOUND:b"),
			ack("a", "b"),
			none(),
		}},
		{name: "a name added in a NACK is told with the next response", steps: []step{
			apply(eds("a", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Endpoint, node, "a")),
			expect(resource.Endpoint, at(1), "a"), errs(),
			nack(0, "rejected", "a", "b"),
			expect(resource.Endpoint, at(1)), errs("NOT_FOUND:b"),
			ack("a", "b"),
			none(),
		}},
		{name: "wildcard: no errors, removals as before", steps: []step{
			apply(cds("a", 1), cds("b", 1)),
			open((*env).adsStream),
			send(sotwRequest(resource.Cluster, node)),
			expect(resource.Cluster, at(1), "a", "b"), errs(),
			ack(),
			applyDel(nil, xdstest.Key(resource.Cluster, "b")),
			expect(resource.Cluster, at(2), "a"), errs(),
			ack(),
			none(),
		}},
	})
}

// TestSotWResourceErrorsShared: streams in the same state share one body,
// errors included; a stream told other errors (or none) is never sent
// another stream's body.
func TestSotWResourceErrorsShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("a", 1))})
	encodes := gatherValue(t, e, "legation_sotw_response_encodes_total")
	for i, c := range []struct {
		names []string
		want  []string
	}{
		{[]string{"a", "b"}, []string{"NOT_FOUND:b"}},
		{[]string{"a", "b"}, []string{"NOT_FOUND:b"}}, // the same body
		{[]string{"a"}, nil},
		{[]string{"a", "c"}, []string{"NOT_FOUND:c"}},
	} {
		s := e.adsStream(t)
		s.Send(sotwRequest(resource.Endpoint, xdstest.Node("n"+string(rune('0'+i)), ""), c.names...))
		resp := s.Expect()
		checkResp(t, resp, resource.Endpoint, xdstest.Version(rev), "a")
		if got := xdstest.ResourceErrors(resp.GetResourceErrors()); !slices.Equal(got, c.want) {
			t.Errorf("stream %d asking %v: resource_errors %q, want %q", i, c.names, got, c.want)
		}
	}
	if got := gatherValue(t, e, "legation_sotw_response_encodes_total") - encodes; got != 3 {
		t.Errorf("legation_sotw_response_encodes_total grew by %v for 4 streams in 3 states, want 3", got)
	}
	// Counted once the response is sent, which the client may see
	// first.
	xdstest.WaitFor(t, "legation_sotw_resource_errors_total{type=endpoint,code=NOT_FOUND} = 3", func() (bool, string) {
		got := xdstest.CounterSum(t, e.reg, "legation_sotw_resource_errors_total", "type", "endpoint", "code", "NOT_FOUND")
		return got == 3, fmt.Sprintf("it is %v", got)
	})
}

// TestSotWResourceErrorsPermission: a resource withheld for its inline
// private key is PERMISSION_DENIED to a client asking for it by name, on
// a stream, in a REST-JSON poll (every poll: a poll has no memory) and in
// a unary Fetch; a client allowed secrets is sent it.
func TestSotWResourceErrorsPermission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *sotw.Config) { c.Authorizer = denySecrets{} })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "keyed")),
	})
	names := []string{"a", "keyed", "nope"}
	for _, c := range []struct {
		client    string
		resources []string
		errs      []string
	}{
		{"allowed", []string{"a", "keyed"}, []string{"NOT_FOUND:nope"}},
		{"denied", []string{"a"}, []string{"PERMISSION_DENIED:keyed", "NOT_FOUND:nope"}},
	} {
		opts := []grpc.DialOption{}
		if c.client == "denied" {
			opts = append(opts, grpc.WithStreamInterceptor(noSecrets), grpc.WithUnaryInterceptor(noSecretsUnary))
		}
		conn := xdstest.Dial(t, e.addr, opts...)
		s := xdstest.OpenSotW(t, conn)
		s.Send(sotwRequest(resource.Cluster, xdstest.Node("n-"+c.client, ""), names...))
		resp := s.ExpectType(resource.Cluster)
		if got := xdstest.Names(t, resp); !slices.Equal(got, c.resources) {
			t.Errorf("SotW %s: resources %v, want %v", c.client, got, c.resources)
		}
		// Sorted by name: keyed before nope.
		if got := xdstest.ResourceErrors(resp.GetResourceErrors()); !slices.Equal(got, c.errs) {
			t.Errorf("SotW %s: resource_errors %q, want %q", c.client, got, c.errs)
		}
		fetched, err := clusterservice.NewClusterDiscoveryServiceClient(conn).FetchClusters(context.Background(),
			&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n-"+c.client, ""), ResourceNames: names})
		if err != nil {
			t.Fatal(err)
		}
		if got := xdstest.ResourceErrors(fetched.GetResourceErrors()); !slices.Equal(got, c.errs) {
			t.Errorf("Fetch %s: resource_errors %q, want %q", c.client, got, c.errs)
		}
	}
	h := e.srv.RESTHandler()
	for range 2 { // the second from the cache
		code, body := restPoll(t, h, "n", "", "", "nope", "a")
		if code != 200 {
			t.Fatalf("REST: status %d: %s", code, body)
		}
		var resp struct {
			ResourceErrors []struct {
				ResourceName struct{ Name string } `json:"resourceName"`
				ErrorDetail  struct {
					Code    int
					Message string
				} `json:"errorDetail"`
			} `json:"resourceErrors"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.ResourceErrors) != 1 || resp.ResourceErrors[0].ResourceName.Name != "nope" ||
			resp.ResourceErrors[0].ErrorDetail.Code != 5 || resp.ResourceErrors[0].ErrorDetail.Message == "" {
			t.Errorf("REST: resourceErrors %+v, want NOT_FOUND (5) for nope, with a message", resp.ResourceErrors)
		}
	}
}

// noSecretsUnary sends a call's client's metadata noSecretsKey.
func noSecretsUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(metadata.AppendToOutgoingContext(ctx, noSecretsKey, "1"), method, req, reply, cc, opts...)
}

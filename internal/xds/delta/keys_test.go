package delta_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
)

// noSecretsKey, sent by a client, makes denySecrets refuse it secrets.
const noSecretsKey = "x-test-no-secrets"

// denySecrets is an Authorizer allowing every claim, and secrets to every
// client but those sending noSecretsKey: the decision access.Guard makes
// for a client with no certificate, far from the replica.
type denySecrets struct{}

func (denySecrets) Authorize(context.Context, *corev3.Node, string) (<-chan struct{}, error) {
	return nil, nil
}

func (denySecrets) Secrets(ctx context.Context, _ string) error {
	if len(metadata.ValueFromIncomingContext(ctx, noSecretsKey)) > 0 {
		return status.Error(codes.PermissionDenied, "no secrets")
	}
	return nil
}

func noSecrets(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, noSecretsKey, "1"), desc, cc, method, opts...)
}

// TestInlineKeysWithheld: on delta streams of one group, a cluster
// carrying an inline private key goes to the client allowed secrets and
// not to the other, though the first response of a wildcard subscription
// is shared by the group's streams; once it no longer carries a key it
// goes to both, and when it carries one again it is removed from the
// client not allowed it.
func TestInlineKeysWithheld(t *testing.T) {
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.Authorizer = denySecrets{} })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "keyed")),
	})
	allowed := e.deltaADS(t)
	denied := xdstest.OpenDelta(t, xdstest.Dial(t, e.addr, grpc.WithStreamInterceptor(noSecrets)))
	expect := func(what string, st *xdstest.DeltaStream, names, removed []string) {
		t.Helper()
		resp := st.ExpectType(resource.Cluster)
		got := slices.Sorted(maps.Keys(xdstest.Versions(resp)))
		if !slices.Equal(got, names) || !slices.Equal(resp.GetRemovedResources(), removed) {
			t.Errorf("%s: got %v, removed %v; want %v, removed %v", what, got, resp.GetRemovedResources(), names, removed)
		}
		st.Ack(resp)
	}
	for _, st := range []*xdstest.DeltaStream{allowed, denied} { // allowed first: its body is the shared one
		st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n", "g"), TypeUrl: resource.Cluster.URL})
	}
	expect("allowed, first", allowed, []string{"a", "keyed"}, nil)
	expect("denied, first", denied, []string{"a"}, nil)

	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("keyed", 1000))})
	expect("allowed, key taken out", allowed, []string{"keyed"}, nil)
	expect("denied, key taken out", denied, []string{"keyed"}, nil)

	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "keyed"))})
	expect("allowed, key put back", allowed, []string{"keyed"}, nil)
	expect("denied, key put back", denied, nil, []string{"keyed"})
	if got := xdstest.CounterSum(t, e.reg, "legation_delta_inline_keys_withheld_total", "type", "cluster"); got < 2 {
		t.Errorf("legation_delta_inline_keys_withheld_total = %v, want at least 2", got)
	}
}

package sotw_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// denySecrets is an Authorizer allowing every claim, and the secrets of
// every group but those it holds to every client but those sending the
// metadata noSecretsKey: the decision access.Guard makes for a client
// with no certificate, far from the replica.
type denySecrets map[string]bool

const noSecretsKey = "x-test-no-secrets"

func (denySecrets) Authorize(context.Context, *corev3.Node, string) (<-chan struct{}, error) {
	return nil, nil
}

func (d denySecrets) Secrets(ctx context.Context, group string) error {
	if d[group] || len(metadata.ValueFromIncomingContext(ctx, noSecretsKey)) > 0 {
		return status.Errorf(codes.PermissionDenied, "no secrets for group %q", group)
	}
	return nil
}

// TestInlineKeysWithheld: a cluster carrying an inline private key goes
// to a client allowed secrets, and to no other: not on a SotW stream
// (first response or push, though the allowed stream of the same
// revision encoded a shared body first), not in a REST-JSON poll, not in
// a unary Fetch.
func TestInlineKeysWithheld(t *testing.T) {
	e := newEnv(t, func(c *sotw.Config) { c.Authorizer = denySecrets{"plain": true} })
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "keyed")),
	})
	all, withheld := []string{"a", "keyed"}, []string{"a"}
	streams := map[string]*xdstest.SotWStream{}
	// allowed first: its body is the one shared with the streams of the
	// group that are sent the same; "denied" is a client of that group not
	// allowed secrets.
	for _, group := range []string{"allowed", "denied", "plain"} {
		st := e.adsStream(t)
		if group == "denied" {
			st = xdstest.OpenSotW(t, xdstest.Dial(t, e.addr, grpc.WithStreamInterceptor(noSecrets)))
		}
		st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n-"+group, groupOf(group)), TypeUrl: resource.Cluster.URL})
		resp := st.ExpectType(resource.Cluster)
		want := all
		if group != "allowed" {
			want = withheld
		}
		if got := xdstest.Names(t, resp); !slices.Equal(got, want) {
			t.Errorf("SotW, group %s: got %v, want %v", group, got, want)
		}
		st.Ack(resp)
		streams[group] = st
	}
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 2000))})
	for group, want := range map[string][]string{"allowed": all, "denied": withheld, "plain": withheld} {
		resp := streams[group].ExpectType(resource.Cluster)
		if got := xdstest.Names(t, resp); resp.GetVersionInfo() != xdstest.Version(rev) || !slices.Equal(got, want) {
			t.Errorf("SotW push, group %s: version %s, %v; want %d, %v", group, resp.GetVersionInfo(), got, rev, want)
		}
	}

	h := e.srv.RESTHandler()
	client := clusterservice.NewClusterDiscoveryServiceClient(e.conn(t))
	for group, want := range map[string][]string{"allowed": all, "plain": withheld, "plain-again": withheld} {
		g := group
		if g == "plain-again" {
			g = "plain" // a cached body must not leak either
		}
		code, body := restPoll(t, h, "n", g, "")
		if code != 200 {
			t.Fatalf("REST, group %s: status %d: %s", g, code, body)
		}
		if got := restNames(t, body); !slices.Equal(got, want) {
			t.Errorf("REST, group %s: got %v, want %v", g, got, want)
		}
		resp, err := client.FetchClusters(context.Background(), &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n", g)})
		if err != nil {
			t.Fatal(err)
		}
		if got := xdstest.Names(t, resp); !slices.Equal(got, want) {
			t.Errorf("Fetch, group %s: got %v, want %v", g, got, want)
		}
	}
	if got := xdstest.CounterSum(t, e.reg, "legation_sotw_inline_keys_withheld_total", "type", "cluster"); got < 5 {
		t.Errorf("legation_sotw_inline_keys_withheld_total = %v, want at least 5 (two responses, a REST body, two Fetches)", got)
	}
}

// groupOf is the node group of a client of TestInlineKeysWithheld.
func groupOf(client string) string {
	if client == "denied" {
		return "allowed"
	}
	return client
}

// noSecrets sends a stream's client's metadata noSecretsKey.
func noSecrets(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, noSecretsKey, "1"), desc, cc, method, opts...)
}

// restNames is the names of the clusters of a REST-JSON response body.
func restNames(tb testing.TB, body string) []string {
	tb.Helper()
	var resp struct {
		Resources []struct {
			Name string `json:"name"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, r := range resp.Resources {
		out = append(out, r.Name)
	}
	return out
}

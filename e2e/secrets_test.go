package e2e

// Secrets (docs/concepts/design.md, "Security"): SDS secrets go to clients whose
// identity may see their scope, and, without mTLS, to no one, or with
// --insecure-loopback-secrets to loopback clients only; a client that is
// not on loopback (in a network namespace the test makes) is refused
// them, and the log says why once.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/netnstest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// secretYAML is an SDS secret named name holding a key pair.
func secretYAML(name string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
name: %s
tls_certificate:
  certificate_chain:
    inline_string: "chain of %s"
  private_key:
    inline_string: "private key of %s"
`, name, name, name)
}

// TestSecretsByIdentity: over mTLS, edge (group c1) is sent the secret of
// scope c1 and the default scope's, never group c2's.
func TestSecretsByIdentity(t *testing.T) {
	p := newPKI(t)
	e := newMTLSEnv(t, p)
	for _, s := range []struct{ name, scope string }{{"edge-cert", "c1"}, {"other-cert", "c2"}, {"shared-cert", "default"}} {
		if _, errOut, code := e.xdsadmin(secretYAML(s.name), "apply", "-f", "-", "--scope", s.scope); code != 0 {
			t.Fatalf("apply %s: %s", s.name, errOut)
		}
	}
	e.applyAndWait(t, allYAML(e.a.port))
	edge := xdstest.OpenSotW(t, xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.edge, p.ca)))
	edge.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Secret.URL,
		ResourceNames: []string{"edge-cert", "other-cert", "shared-cert"}})
	got := xdstest.Names(t, edge.ExpectType(resource.Secret))
	slices.Sort(got)
	if want := []string{"edge-cert", "shared-cert"}; !slices.Equal(got, want) {
		t.Errorf("edge-1 of c1 got secrets %v, want %v", got, want)
	}
}

// TestSecretsPlaintextLoopbackOnly: a replica serving plaintext on every
// interface, with --insecure-loopback-secrets, sends secrets to a
// loopback client, and refuses them, with PERMISSION_DENIED and nothing
// else, to a client in another network namespace, over gRPC and REST;
// that client still gets what is not a secret. The refusal is logged
// once.
func TestSecretsPlaintextLoopbackOnly(t *testing.T) {
	ns := netnstest.New(t)
	logs := new(testbase.LockedBuffer)
	e := newEnvWith(t, envOptions{configure: func(c *replica.Config) {
		c.XDSAddr, c.HTTPAddr = "0.0.0.0:0", "0.0.0.0:0"
		c.InsecureLoopbackSecrets = true
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}})
	if _, errOut, code := e.xdsadmin(secretYAML("edge-cert"), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", errOut)
	}
	e.applyAndWait(t, allYAML(e.a.port))
	xdsPort, httpPort := port(t, e.node.XDSAddr()), port(t, e.node.HTTPAddr())
	secretReq := &discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Secret.URL, ResourceNames: []string{"edge-cert"}}

	local := xdstest.OpenSotW(t, xdstest.Dial(t, net.JoinHostPort("127.0.0.1", xdsPort)))
	local.Send(secretReq)
	if got := xdstest.Names(t, local.ExpectType(resource.Secret)); !slices.Equal(got, []string{"edge-cert"}) {
		t.Errorf("loopback client got secrets %v, want [edge-cert]", got)
	}

	remoteAddr := net.JoinHostPort(ns.HostIP().String(), xdsPort)
	cc, err := grpc.NewClient("passthrough:///"+remoteAddr, grpc.WithContextDialer(ns.GRPCDialer()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	for range 2 {
		remote := xdstest.OpenSotW(t, cc)
		remote.Send(secretReq)
		firstResult(t, "remote plaintext client asking for a secret", remote.Recv(), codes.PermissionDenied)
	}
	remote := xdstest.OpenSotW(t, cc)
	remote.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
	if got := xdstest.Names(t, remote.ExpectType(resource.Cluster)); !slices.Equal(got, []string{clusterName}) {
		t.Errorf("remote client got clusters %v, want [%s]", got, clusterName)
	}

	body := `{"node": {"id": "edge-1", "cluster": "c1"}, "resource_names": ["edge-cert"]}`
	url := "http://" + net.JoinHostPort(ns.HostIP().String(), httpPort) + "/v3/discovery:secrets"
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ns.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("REST from the namespace: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("REST secrets from the namespace: %d, want 403", resp.StatusCode)
	}
	if n := strings.Count(logs.String(), "refused secrets"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
}

// port is the port of a host:port.
func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.Atoi(p); err != nil {
		t.Fatal(err)
	}
	return p
}

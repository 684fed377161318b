package e2e

// Security end to end (docs/concepts/design.md, "Security"): a replica serving xDS
// and HTTP over mTLS, identities bound to nodes by rules written with
// xdsadmin, grpc-go's xDS client with TLS channel credentials, refusals at
// the handshake, PermissionDenied on every transport, revocation, and
// certificate rotation without a restart.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// The identities of the tests' certificates.
const (
	replicaID = "spiffe://legation.test/replica"
	edgeID    = "spiffe://legation.test/ns/edge/sa/envoy"
	otherID   = "spiffe://legation.test/ns/other/sa/envoy"
	adminID   = "spiffe://legation.test/admin"
)

// pki is the certificates of a test: one CA for replicas and clients, the
// replica's certificate, clients' (edge, other, admin), and a client
// certificate from a CA the replica does not trust.
type pki struct {
	dir                string
	ca                 *testcerts.CA
	server             *testcerts.Cert
	edge, other, admin *testcerts.Cert
	rogue              *testcerts.Cert
	serverCert, caFile string // the files the replica reads
	serverKey          string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p.ca, err = testcerts.NewCA(dir, "legation")
	must(err)
	p.server, err = p.ca.Issue(dir, "replica", testcerts.Loopback(testcerts.Options{URIs: []string{replicaID}}))
	must(err)
	p.edge, err = p.ca.Issue(dir, "edge", testcerts.Options{URIs: []string{edgeID}})
	must(err)
	p.other, err = p.ca.Issue(dir, "other", testcerts.Options{URIs: []string{otherID}})
	must(err)
	p.admin, err = p.ca.Issue(dir, "admin", testcerts.Options{URIs: []string{adminID}})
	must(err)
	rogueCA, err := testcerts.NewCA(dir, "rogue")
	must(err)
	p.rogue, err = rogueCA.Issue(dir, "rogue-edge", testcerts.Options{URIs: []string{edgeID}})
	must(err)
	// The replica's files are copies, so a test can rotate them.
	p.serverCert, p.serverKey, p.caFile = dir+"/served.pem", dir+"/served-key.pem", dir+"/client-ca.pem"
	must(os.WriteFile(p.serverCert, p.server.CertPEM, 0o600))
	must(os.WriteFile(p.serverKey, p.server.KeyPEM, 0o600))
	must(os.WriteFile(p.caFile, p.ca.CertPEM, 0o600))
	return p
}

// clientTLS is the TLS config of a client presenting c (none if nil) and
// trusting ca.
func clientTLS(t *testing.T, c *testcerts.Cert, ca *testcerts.CA) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if c != nil {
		pair, err := c.TLS()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// newMTLSEnv is an env whose replica serves xDS and HTTP over mTLS with
// p's files, and whose rules let edge claim nodes edge-* in group c1,
// other nodes other-* in group c2, and admin be an admin.
func newMTLSEnv(t *testing.T, p *pki, leakOK ...goleak.Option) *env {
	t.Helper()
	return newEnvWith(t, envOptions{
		leakOK: leakOK,
		configure: func(c *replica.Config) {
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = p.serverCert, p.serverKey, p.caFile
		},
		httpsClient: clientTLS(t, p.admin, p.ca),
		beforeReady: func(e *env) {
			e.xdsadminOK(t, "authz", "grant", edgeID, "--nodes", "edge-*", "--groups", "c1")
			e.xdsadminOK(t, "authz", "grant", otherID, "--nodes", "other-*", "--groups", "c2")
			e.xdsadminOK(t, "authz", "grant", adminID, "--admin")
		},
	})
}

// xdsadminOK runs xdsadmin and fails the test unless it succeeds.
func (e *env) xdsadminOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := e.xdsadmin("", args...)
	if code != 0 {
		t.Fatalf("xdsadmin %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// tlsBootstrap is grpc-go's xDS bootstrap for node id of cluster c1 over
// mTLS with cert, trusting ca.
func tlsBootstrap(xdsAddr, id string, cert *testcerts.Cert, ca *testcerts.CA) []byte {
	return bootstrapWith(xdsAddr, id, map[string]any{"type": "tls", "config": map[string]any{
		"ca_certificate_file": ca.CertFile,
		"certificate_file":    cert.CertFile,
		"private_key_file":    cert.KeyFile,
		"refresh_interval":    "1s",
	}})
}

// TestMTLSGRPCXDSClientRoutes: grpc-go's xDS client, with TLS channel
// credentials and file-watched certificates in its bootstrap, connects
// over mTLS as edge, claims node edge-1 of c1 and routes.
func TestMTLSGRPCXDSClientRoutes(t *testing.T) {
	p := newPKI(t)
	// grpc-go's "tls" channel credentials start a file watcher that its
	// xDS client does not stop when closed (grpc-go v1.85.0).
	e := newMTLSEnv(t, p, pemfileWatcher)
	e.applyAndWait(t, allYAML(e.a.port))
	r, err := xds.NewXDSResolverWithConfigForTesting(tlsBootstrap(e.node.XDSAddr(), "edge-1", p.edge, p.ca))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	waitReaches(t, cc, e.a.port)
}

// firstResult waits for the first thing a stream gets and fails the test
// unless it is the end of the stream with code: not one response first.
func firstResult[Resp any](t *testing.T, what string, recv <-chan xdstest.Result[Resp], code codes.Code) {
	t.Helper()
	select {
	case r := <-recv:
		if r.Err == nil {
			t.Fatalf("%s: got a response, want the stream to end with %s and nothing else: %s", what, code, xdstest.Summary(r.Resp))
		}
		if got := status.Code(r.Err); got != code {
			t.Fatalf("%s: stream ended with %v, want %s", what, r.Err, code)
		}
	case <-time.After(testTimeout):
		t.Fatalf("%s: the stream did not end", what)
	}
}

// TestMTLSHandshakeRefusals: a plaintext client, a TLS client without a
// certificate and one with a certificate from another CA are refused at
// the handshake: their streams end UNAVAILABLE before any request is
// read.
func TestMTLSHandshakeRefusals(t *testing.T) {
	p := newPKI(t)
	e := newMTLSEnv(t, p)
	e.applyAndWait(t, allYAML(e.a.port))
	for name, cc := range map[string]*grpc.ClientConn{
		"plaintext":      xdstest.Dial(t, e.node.XDSAddr()),
		"no certificate": xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, nil, p.ca)),
		"another CA":     xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.rogue, p.ca)),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err == nil {
			err = st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
			if err == nil {
				_, err = st.Recv()
			}
		}
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: got %v, want UNAVAILABLE (refused at the handshake)", name, err)
		}
	}
	// Health stays reachable over TLS without a client certificate.
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: clientTLS(t, nil, p.ca)}, Timeout: 10 * time.Second}
	if code, body, err := get(plain, "https://"+e.node.HTTPAddr()+"/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz without a client certificate: %d %q %v, want 200", code, body, err)
	}
	if code, _, err := get(plain, "https://"+e.node.HTTPAddr()+"/debug/streams"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("/debug/streams without a client certificate: %d %v, want 401", code, err)
	}
}

// TestMTLSNodeClaims: edge may claim nodes edge-* of group c1 only. A
// claim of another node or group ends the stream with PERMISSION_DENIED
// and nothing else, on SotW ADS, delta ADS, a per-type service, the unary
// Fetch and REST-JSON; so does naming another node mid-stream. CSDS and
// /debug/ answer the admin only.
func TestMTLSNodeClaims(t *testing.T) {
	p := newPKI(t)
	e := newMTLSEnv(t, p)
	e.applyAndWait(t, allYAML(e.a.port))
	edge := xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.edge, p.ca))

	bad := map[string]struct{ id, cluster string }{
		"another node":  {"other-1", "c1"},
		"another group": {"edge-1", "c2"},
	}
	for what, n := range bad {
		sotw := xdstest.OpenSotW(t, edge)
		sotw.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(n.id, n.cluster), TypeUrl: resource.Cluster.URL})
		firstResult(t, "SotW ADS, "+what, sotw.Recv(), codes.PermissionDenied)

		d := xdstest.OpenDelta(t, edge)
		d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node(n.id, n.cluster), TypeUrl: resource.Cluster.URL})
		firstResult(t, "delta ADS, "+what, d.Recv(), codes.PermissionDenied)

		cds := xdstest.Open(t, edge, func(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
			return clusterv3.NewClusterDiscoveryServiceClient(cc).StreamClusters(ctx)
		})
		cds.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(n.id, n.cluster)})
		firstResult(t, "CDS, "+what, cds.Recv(), codes.PermissionDenied)

		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := clusterv3.NewClusterDiscoveryServiceClient(edge).FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: xdstest.Node(n.id, n.cluster)})
		cancel()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("FetchClusters, %s: %v, want PERMISSION_DENIED", what, err)
		}

		code, body := restPost(t, e, clientTLS(t, p.edge, p.ca), "clusters", n.id, n.cluster)
		if code != http.StatusForbidden || strings.Contains(body, clusterName) {
			t.Errorf("REST, %s: %d %q, want 403 and none of the resources", what, code, body)
		}
	}

	// Allowed: its own node gets its clusters, on each transport.
	if code, body := restPost(t, e, clientTLS(t, p.edge, p.ca), "clusters", "edge-1", "c1"); code != http.StatusOK || !strings.Contains(body, clusterName) {
		t.Errorf("REST as edge-1: %d %q, want 200 with %s", code, body, clusterName)
	}
	sotw := xdstest.OpenSotW(t, edge)
	sotw.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
	resp := sotw.ExpectType(resource.Cluster)
	// Mid-stream, naming another node: refused, nothing more sent.
	sotw.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("other-1", "c1"), TypeUrl: resource.Cluster.URL,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	firstResult(t, "SotW ADS, another node mid-stream", sotw.Recv(), codes.PermissionDenied)

	// CSDS: the admin only.
	admin := xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.admin, p.ca))
	for who, cc := range map[string]*grpc.ClientConn{"edge": edge, "admin": admin} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
		cancel()
		want := codes.PermissionDenied
		if who == "admin" {
			want = codes.OK
		}
		if status.Code(err) != want {
			t.Errorf("CSDS as %s: %v, want %s", who, err, want)
		}
	}
	if code, _, err := e.httpGet("/debug/streams"); err != nil || code != http.StatusOK {
		t.Errorf("/debug/streams as admin: %d %v, want 200", code, err)
	}
	edgeHTTP := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: clientTLS(t, p.edge, p.ca)}, Timeout: 10 * time.Second}
	if code, _, err := get(edgeHTTP, "https://"+e.node.HTTPAddr()+"/debug/streams"); err != nil || code != http.StatusForbidden {
		t.Errorf("/debug/streams as edge: %d %v, want 403", code, err)
	}
}

// restPost polls /v3/discovery:TYPE over HTTPS with cfg as node id of
// cluster and returns the status and body.
func restPost(t *testing.T, e *env, cfg *tls.Config, typ, id, cluster string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	body := fmt.Sprintf(`{"node": {"id": %q, "cluster": %q}}`, id, cluster)
	resp, err := c.Post("https://"+e.node.HTTPAddr()+"/v3/discovery:"+typ, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("REST %s: %v", typ, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMTLSRevokeEndsStreams: revoking edge's rule ends its SotW and delta
// streams with PERMISSION_DENIED within 10s (docs/concepts/design.md, "Security").
func TestMTLSRevokeEndsStreams(t *testing.T) {
	p := newPKI(t)
	e := newMTLSEnv(t, p)
	e.applyAndWait(t, allYAML(e.a.port))
	edge := xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.edge, p.ca))
	sotw := xdstest.OpenSotW(t, edge)
	sotw.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
	sotw.ExpectType(resource.Cluster)
	d := xdstest.OpenDelta(t, edge)
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("edge-2", "c1"), TypeUrl: resource.Cluster.URL})
	d.ExpectType(resource.Cluster)

	start := time.Now()
	e.xdsadminOK(t, "authz", "revoke", edgeID)
	sotw.SetTimeouts(10*time.Second, testShortTimeout)
	d.SetTimeouts(10*time.Second, testShortTimeout)
	if err := sotw.ExpectErr(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("SotW stream after the revoke: %v, want PERMISSION_DENIED", err)
	}
	if err := d.ExpectErr(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("delta stream after the revoke: %v, want PERMISSION_DENIED", err)
	}
	t.Logf("streams ended %s after the revoke", time.Since(start).Round(time.Millisecond))
}

// TestMTLSRotation: the replica's certificate and its client CA file are
// replaced while it runs. New handshakes use the new ones (the new
// certificate is presented; a client of the old CA is refused, one of the
// new accepted), and a stream opened before keeps being served.
func TestMTLSRotation(t *testing.T) {
	p := newPKI(t)
	e := newMTLSEnv(t, p)
	e.applyAndWait(t, allYAML(e.a.port))
	live := xdstest.OpenSotW(t, xdstest.DialTLS(t, e.node.XDSAddr(), clientTLS(t, p.edge, p.ca)))
	live.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL})
	live.Ack(live.ExpectType(resource.Cluster))

	// The server's certificate.
	rotated, err := p.ca.Issue(p.dir, "replica-rotated", testcerts.Loopback(testcerts.Options{URIs: []string{replicaID}}))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.serverKey, rotated.KeyPEM)
	writeFile(t, p.serverCert, rotated.CertPEM)
	waitFor(t, "new handshakes present the rotated certificate", func() (bool, string) {
		c, err := tls.Dial("tcp", e.node.XDSAddr(), withALPN(clientTLS(t, p.edge, p.ca)))
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		got := c.ConnectionState().PeerCertificates[0].SerialNumber
		return got.Cmp(rotated.Cert.SerialNumber) == 0, fmt.Sprintf("serial %v", got)
	})

	// The client CA: a new CA only.
	ca2, err := testcerts.NewCA(p.dir, "legation-2")
	if err != nil {
		t.Fatal(err)
	}
	edge2, err := ca2.Issue(p.dir, "edge-ca2", testcerts.Options{URIs: []string{edgeID}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.caFile, ca2.CertPEM)
	waitFor(t, "the old CA's client refused, the new CA's accepted", func() (bool, string) {
		oldOK, newOK := accepted(e.node.XDSAddr(), clientTLS(t, p.edge, p.ca)), accepted(e.node.XDSAddr(), clientTLS(t, edge2, p.ca))
		return !oldOK && newOK, fmt.Sprintf("old CA accepted %v, new CA accepted %v", oldOK, newOK)
	})

	// The stream opened before both rotations is still served.
	e.apply(t, strings.ReplaceAll(clusterYAML, "name: svc-cluster", "name: svc-cluster-2"))
	resp := live.ExpectType(resource.Cluster)
	if names := xdstest.Names(t, resp); len(names) != 2 {
		t.Errorf("live stream after the rotations got clusters %v, want svc-cluster and svc-cluster-2", names)
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// withALPN is cfg speaking HTTP/2, as gRPC clients do.
func withALPN(cfg *tls.Config) *tls.Config {
	cfg.NextProtos = []string{"h2"}
	return cfg
}

// accepted reports whether the server at addr accepts a TLS client with
// cfg: with TLS 1.3 a refused client certificate shows as an alert on the
// first read after the handshake; an accepted one reads nothing (the
// server waits for the HTTP/2 preface) until the deadline.
func accepted(addr string, cfg *tls.Config) bool {
	c, err := tls.Dial("tcp", addr, withALPN(cfg))
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) //nolint:errcheck // a fresh conn
	_, err = c.Read(make([]byte, 1))
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// The server's SETTINGS frame: accepted too.
	return err == nil
}

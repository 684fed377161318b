package replica_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// The identities of the mTLS tests' certificates.
const (
	replicaSPIFFE = "spiffe://legation.test/replica"
	edgeSPIFFE    = "spiffe://legation.test/ns/edge/sa/envoy"
	adminSPIFFE   = "spiffe://legation.test/admin"
	// strangerSPIFFE has no rule.
	strangerSPIFFE = "spiffe://legation.test/ns/new/sa/envoy"
)

// impostorKit is a CA and the certificates of the mTLS tests: the replica's
// (a SPIFFE URI SAN), an edge client's and an admin's, and two made to
// pass for the replica: one whose CommonName, and one whose DNS SAN,
// reads as the replica's SPIFFE ID, with no URI SAN. The CA signs them
// all, as a CA that signs any name a service asks for would.
type impostorKit struct {
	ca                       *testcerts.CA
	replica, admin           *testcerts.Cert
	cnImpostor, dnsImpostor  *testcerts.Cert
	replicaTLS, adminTLS     *tls.Config
	cnImpostorTLS, dnsImpTLS *tls.Config
	strangerTLS              *tls.Config
	// cnStrangerTLS's CommonName reads as a SPIFFE ID of the trust
	// domain that has no rule.
	cnStrangerTLS *tls.Config
}

func newImpostorKit(t *testing.T) *impostorKit {
	t.Helper()
	dir := t.TempDir()
	k := &impostorKit{}
	var err error
	issue := func(name string, o testcerts.Options) *testcerts.Cert {
		t.Helper()
		c, err := k.ca.Issue(dir, name, o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if k.ca, err = testcerts.NewCA(dir, "legation"); err != nil {
		t.Fatal(err)
	}
	k.replica = issue("replica", testcerts.Loopback(testcerts.Options{URIs: []string{replicaSPIFFE}}))
	stranger := issue("stranger", testcerts.Options{URIs: []string{strangerSPIFFE}})
	k.admin = issue("admin", testcerts.Options{URIs: []string{adminSPIFFE}})
	k.cnImpostor = issue("cn-impostor", testcerts.Options{CommonName: replicaSPIFFE})
	k.dnsImpostor = issue("dns-impostor", testcerts.Options{CommonName: replicaSPIFFE, DNSNames: []string{replicaSPIFFE}})
	k.replicaTLS, k.adminTLS, k.strangerTLS = k.clientTLS(t, k.replica), k.clientTLS(t, k.admin), k.clientTLS(t, stranger)
	k.cnImpostorTLS, k.dnsImpTLS = k.clientTLS(t, k.cnImpostor), k.clientTLS(t, k.dnsImpostor)
	k.cnStrangerTLS = k.clientTLS(t, issue("cn-stranger", testcerts.Options{CommonName: strangerSPIFFE}))
	return k
}

// clientTLS presents c and trusts the kit's CA for the server localhost.
func (k *impostorKit) clientTLS(t *testing.T, c *testcerts.Cert) *tls.Config {
	t.Helper()
	pair, err := c.TLS()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(k.ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// startImpostorReplica starts a replica on e serving mTLS with the kit's files,
// after granting: the replica's SPIFFE ID the nodes replica-*, the edge
// edge-*, the admin admin; and waits until it is ready.
func startImpostorReplica(t *testing.T, e *xdsEnv, k *impostorKit, edit func(*replica.Config)) (*running, prometheus.Registerer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	for _, r := range []authz.Rule{
		{Identity: replicaSPIFFE, Nodes: []string{"replica-*"}, Groups: []string{"*"}},
		{Identity: edgeSPIFFE, Nodes: []string{"edge-*"}, Groups: []string{"*"}},
		{Identity: adminSPIFFE, Admin: true},
	} {
		if err := authz.Grant(ctx, e.Client, e.prefix, r); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config(t)
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ClientCAFile = k.replica.CertFile, k.replica.KeyFile, k.ca.CertFile
	if edit != nil {
		edit(&cfg)
	}
	r := start(t, cfg)
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: k.adminTLS, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	xdstest.WaitFor(t, "/readyz 200 over HTTPS", func() (bool, string) {
		resp, err := https.Get("https://" + r.HTTPAddr() + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return r, cfg.Registerer
}

// claimNode opens an ADS stream on cc with metadata kv, claims node id in
// group c1, and returns the response headers and the first response's
// error (nil: served).
func claimNode(t *testing.T, cc *grpc.ClientConn, id string, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Cluster.URL}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	hdr, _ := st.Header()
	return hdr, err
}

// csds asks for every client's status on cc with metadata kv.
func csds(cc *grpc.ClientConn, kv ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	_, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
	return err
}

// TestSPIFFEOnlyFromURISAN: a certificate of the cluster's CA whose
// CommonName, or DNS SAN, reads as the replica's SPIFFE ID, with no URI
// SAN, is not the replica: its relay marker is not trusted, the identity
// it forwards is ignored, it cannot claim the nodes granted to the
// replica's SPIFFE ID nor read CSDS, and under --authz-default-trust-domain
// it claims nothing. The real replica's certificate, as a client, can do
// the first two: the test would see the difference.
func TestSPIFFEOnlyFromURISAN(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	k := newImpostorKit(t)
	putCluster(t, e.Client, e.prefix, "c-1")
	for _, td := range []string{"", "legation.test"} {
		t.Run("default trust domain "+td, func(t *testing.T) {
			r, reg := startImpostorReplica(t, e, k, func(c *replica.Config) { c.AuthzDefaultTrustDomain = td })
			relayAs := func(id string) []string {
				return []string{relay.MarkerKey, "replica-2", access.IdentityKey, id}
			}

			// The replica's own certificate relays: the marker is trusted
			// and the forwarded identity decides.
			real := xdstest.DialTLS(t, r.XDSAddr(), k.replicaTLS)
			hdr, err := claimNode(t, real, "edge-1", relayAs(edgeSPIFFE)...)
			if err != nil || len(hdr.Get(relay.ServedByKey)) == 0 {
				t.Fatalf("relayed by the replica: %v, headers %v; want served, with %s", err, hdr, relay.ServedByKey)
			}
			if err := csds(real, relayAs(adminSPIFFE)...); err != nil {
				t.Fatalf("CSDS relayed by the replica for the admin: %v", err)
			}

			for _, imp := range []struct {
				name string
				cfg  *tls.Config
			}{{"CN", k.cnImpostorTLS}, {"DNS SAN", k.dnsImpTLS}} {
				cc := xdstest.DialTLS(t, r.XDSAddr(), imp.cfg)
				before := metricValue(t, reg, "legation_relay_untrusted_markers_total")
				hdr, err := claimNode(t, cc, "edge-1", relayAs(edgeSPIFFE)...)
				if grpcstatus.Code(err) != codes.PermissionDenied || len(hdr.Get(relay.ServedByKey)) != 0 {
					t.Errorf("%s impostor relaying for the edge: %v, headers %v; want PERMISSION_DENIED, marker not trusted", imp.name, err, hdr)
				}
				if after := metricValue(t, reg, "legation_relay_untrusted_markers_total"); after != before+1 {
					t.Errorf("%s impostor's marker: legation_relay_untrusted_markers_total %v -> %v, want one more", imp.name, before, after)
				}
				if _, err := claimNode(t, cc, "replica-1"); grpcstatus.Code(err) != codes.PermissionDenied {
					t.Errorf("%s impostor claiming the replica's node: %v, want PERMISSION_DENIED", imp.name, err)
				}
				if _, err := claimNode(t, cc, "anything-1"); grpcstatus.Code(err) != codes.PermissionDenied {
					t.Errorf("%s impostor claiming any node: %v, want PERMISSION_DENIED", imp.name, err)
				}
				if err := csds(cc); grpcstatus.Code(err) != codes.PermissionDenied {
					t.Errorf("%s impostor reading CSDS: %v, want PERMISSION_DENIED", imp.name, err)
				}
				if err := csds(cc, relayAs(adminSPIFFE)...); grpcstatus.Code(err) != codes.PermissionDenied {
					t.Errorf("%s impostor reading CSDS as a forwarded admin: %v, want PERMISSION_DENIED", imp.name, err)
				}
			}
			if _, err := claimNode(t, xdstest.DialTLS(t, r.XDSAddr(), k.cnStrangerTLS), "anything-1"); grpcstatus.Code(err) != codes.PermissionDenied {
				t.Errorf("CN reading as a SPIFFE ID of the trust domain, without a rule, claiming any node: %v, want PERMISSION_DENIED", err)
			}
			if td != "" {
				// The default trust domain still lets a real SPIFFE ID of
				// it with no rule claim any node.
				if _, err := claimNode(t, xdstest.DialTLS(t, r.XDSAddr(), k.strangerTLS), "anything-1"); err != nil {
					t.Errorf("a SPIFFE ID of the default trust domain claiming any node: %v", err)
				}
			}
			r.stop(t)
		})
	}
}

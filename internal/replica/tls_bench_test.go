package replica_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// BenchmarkMTLSStreams measures new mTLS streams per second on one
// replica: each op is a new connection (a full TLS 1.3 handshake with
// client certificate, ECDSA P-256), an ADS stream whose client is
// authorized (its identity checked against the rules) and its first
// response, then closing. Client and replica share the machine's cores.
func BenchmarkMTLSStreams(b *testing.B) {
	dir := b.TempDir()
	ca, err := testcerts.NewCA(dir, "bench")
	if err != nil {
		b.Fatal(err)
	}
	server, err := ca.Issue(dir, "replica", testcerts.Loopback(testcerts.Options{URIs: []string{"spiffe://legation.test/replica"}}))
	if err != nil {
		b.Fatal(err)
	}
	client, err := ca.Issue(dir, "client", testcerts.Options{URIs: []string{"spiffe://legation.test/ns/edge/sa/envoy"}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig(b)
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ClientCAFile = server.CertFile, server.KeyFile, ca.CertFile
	// No rule needed: the trust domain's default lets the client in
	// (the same table lookup as a rule).
	cfg.AuthzDefaultTrustDomain = "legation.test"
	r := start(b, cfg)

	pair, err := client.TLS()
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	open := func() error {
		cc, err := grpc.NewClient(r.XDSAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Cluster.URL}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	// Until the view and the rules are loaded, streams are refused.
	xdstest.WaitFor(b, "a first mTLS stream answered", func() (bool, string) {
		if err := open(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	start := time.Now()
	for b.Loop() {
		if err := open(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "streams/s")
}

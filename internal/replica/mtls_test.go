package replica_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// The identities of the mTLS tests' certificates (SPIFFE ids in URI
// SANs).
const (
	mtlsReplicaID = "spiffe://legation.test/replica"
	mtlsEdgeID    = "spiffe://legation.test/ns/edge/sa/envoy"
	mtlsOtherID   = "spiffe://legation.test/ns/other/sa/envoy"
	mtlsAdminID   = "spiffe://legation.test/ns/ops/sa/admin"
)

// mtlsKit is a CA, a replica certificate and the clients' certificates
// by identity, with the rules that let edge claim edge-*, other claim
// other-* (any group) and admin be an admin.
type mtlsKit struct {
	ca      *testcerts.CA
	replica *testcerts.Cert
	clients map[string]*testcerts.Cert
}

func newMTLSKit(t *testing.T) *mtlsKit {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "legation")
	if err != nil {
		t.Fatal(err)
	}
	k := &mtlsKit{ca: ca, clients: map[string]*testcerts.Cert{}}
	if k.replica, err = ca.Issue(dir, "replica", testcerts.Loopback(testcerts.Options{URIs: []string{mtlsReplicaID}})); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"edge": mtlsEdgeID, "other": mtlsOtherID, "admin": mtlsAdminID} {
		if k.clients[id], err = ca.Issue(dir, name, testcerts.Options{URIs: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// grant writes the kit's rules to e's etcd, directly.
func (k *mtlsKit) grant(t *testing.T, e *xdsEnv) {
	t.Helper()
	c := e.Etcd.Client(t)
	for _, r := range []authz.Rule{
		{Identity: mtlsEdgeID, Nodes: []string{"edge-*"}, Groups: []string{"*"}},
		{Identity: mtlsOtherID, Nodes: []string{"other-*"}, Groups: []string{"*"}},
		{Identity: mtlsAdminID, Admin: true},
	} {
		if err := authz.Grant(context.Background(), c, e.prefix, r); err != nil {
			t.Fatal(err)
		}
	}
}

// configure makes cfg serve mTLS with the kit's replica certificate.
func (k *mtlsKit) configure(cfg *replica.Config) {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ClientCAFile = k.replica.CertFile, k.replica.KeyFile, k.ca.CertFile
}

// tls is the TLS config of a client presenting identity id's certificate
// (none if id is "").
func (k *mtlsKit) tls(t testing.TB, id string) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(k.ca.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if id != "" {
		pair, err := k.clients[id].TLS()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// get GETs path on r's --http-addr over TLS, without a client
// certificate.
func (k *mtlsKit) get(t testing.TB, r *running, path string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: k.tls(t, "")}, Timeout: 10 * time.Second}
	resp, err := c.Get("https://" + r.HTTPAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// waitReady waits until r's /readyz says 200.
func (k *mtlsKit) waitReady(t testing.TB, r *running) {
	t.Helper()
	xdstest.WaitFor(t, "/readyz 200", func() (bool, string) {
		code, body := k.get(t, r, "/readyz")
		return code == http.StatusOK, body
	})
}

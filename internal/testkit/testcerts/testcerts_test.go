package testcerts_test

import (
	"crypto/x509"
	"testing"

	"github.com/legation-io/legation/internal/testkit/testcerts"
)

func TestIssueVerifies(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(dir, "leaf", testcerts.Loopback(testcerts.Options{URIs: []string{"spiffe://example.org/x"}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TLS(); err != nil {
		t.Fatalf("key pair: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("verify for %v: %v", u, err)
		}
	}
	other, err := testcerts.NewCA(dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	wrong := x509.NewCertPool()
	wrong.AddCert(other.Cert)
	if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: wrong}); err == nil {
		t.Error("verified against another CA")
	}
	if got := c.Cert.URIs[0].String(); got != "spiffe://example.org/x" {
		t.Errorf("URI SAN %q", got)
	}
}

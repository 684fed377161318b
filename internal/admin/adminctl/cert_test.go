package adminctl

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// rsaCA writes a self-signed RSA CA as Helm's genCA makes one (a PKCS #1
// key) to dir, and returns its certificate and key files.
func rsaCA(t *testing.T, dir string, isCA bool) (certFile, keyFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "legation-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(0, 0, 30),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestCertIssue issues a replica's certificate from an RSA CA: it chains
// to the CA for both key usages, carries the SPIFFE ID as the identity
// replicas read, the DNS names and IPs asked for, is valid no longer than
// the CA, and its key is private.
func TestCertIssue(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := rsaCA(t, dir, true)
	out := filepath.Join(dir, "new", "tls")
	h := &harness{t: t, vars: map[string]string{}}
	r := h.runRaw(context.Background(), "", "cert", "issue", "--ca-cert", caCert, "--ca-key", caKey, "--server",
		"--spiffe-id", "spiffe://cluster.local/ns/legation/legation/replica", "--dns", "legation-xds.legation.svc,localhost",
		"--ip", "127.0.0.1,10.1.2.3", "--out-dir", out)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "issued "+filepath.Join(out, "tls.crt")) {
		t.Fatalf("cert issue: %s", r)
	}
	pair, err := os.ReadFile(filepath.Join(out, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pair)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(out, "ca.crt"))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "legation-xds.legation.svc", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("verify for usage %v: %v", u, err)
		}
	}
	if id, err := tlsfiles.Identity(cert); err != nil || id != "spiffe://cluster.local/ns/legation/legation/replica" {
		t.Errorf("identity %q, %v; want the SPIFFE ID", id, err)
	}
	if len(cert.IPAddresses) != 2 || !slices.Equal(cert.DNSNames, []string{"legation-xds.legation.svc", "localhost"}) {
		t.Errorf("SANs: IPs %v, DNS %v", cert.IPAddresses, cert.DNSNames)
	}
	ca, _, err := readCACert(caCert)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.NotAfter) {
		t.Errorf("not after %s; want the CA's, %s (365 days would outlive it)", cert.NotAfter, ca.NotAfter)
	}
	if st, err := os.Stat(filepath.Join(out, "tls.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("tls.key: %v, %v; want mode 0600", st, err)
	}
	// An Envoy's: a client certificate only.
	r = h.runRaw(context.Background(), "", "cert", "issue", "--ca-cert", caCert, "--ca-key", caKey, "--cn", "envoy-7", "--out-dir", out)
	if r.code != 0 {
		t.Fatalf("cert issue --cn: %s", r)
	}
	pair, _ = os.ReadFile(filepath.Join(out, "tls.crt"))
	block, _ = pem.Decode(pair)
	if cert, err = x509.ParseCertificate(block.Bytes); err != nil || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate: %v, key usages %v; want client authentication only", err, cert.ExtKeyUsage)
	}
}

// TestCertIssueErrors: bad flags and files are refused, naming the flag.
func TestCertIssueErrors(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := rsaCA(t, dir, true)
	leaf, leafKey := rsaCA(t, t.TempDir(), false)
	_, otherKey := rsaCA(t, t.TempDir(), true)
	out := filepath.Join(dir, "out")
	h := &harness{t: t, vars: map[string]string{}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca-key", caKey, "--cn", "x", "--out-dir", out}, "--ca-cert and --ca-key"},
		{[]string{"--ca-cert", caCert, "--ca-key", caKey, "--cn", "x"}, "--out-dir"},
		{[]string{"--ca-cert", caCert, "--ca-key", caKey, "--out-dir", out}, "set --spiffe-id, --dns or --cn"},
		{[]string{"--ca-cert", caCert, "--ca-key", caKey, "--spiffe-id", "spiffe://Cluster.local/x", "--out-dir", out}, "--spiffe-id"},
		{[]string{"--ca-cert", caCert, "--ca-key", caKey, "--cn", "x", "--days", "0", "--out-dir", out}, "--days 0"},
		{[]string{"--ca-cert", leaf, "--ca-key", leafKey, "--cn", "x", "--out-dir", out}, "is not a CA certificate"},
		{[]string{"--ca-cert", caCert, "--ca-key", otherKey, "--cn", "x", "--out-dir", out}, "is not the key of --ca-cert's certificate"},
		{[]string{"--ca-cert", caKey, "--ca-key", caKey, "--cn", "x", "--out-dir", out}, "no PEM CERTIFICATE block"},
	} {
		r := h.runRaw(context.Background(), "", append([]string{"cert", "issue"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("cert issue %q: %s\nwant an error containing %q", tc.args, r, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused issue created %s: %v", out, err)
	}
}

package replica_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// TestTLSBadInput: each bad TLS input stops New (or Validate) with an
// error naming the flag, the file and the problem, and binds nothing.
func TestTLSBadInput(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.Issue(dir, "good", testcerts.Loopback(testcerts.Options{URIs: []string{"spiffe://legation.test/replica"}}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue(dir, "other", testcerts.Options{CommonName: "other"})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.Issue(dir, "expired", testcerts.Options{CommonName: "old",
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	badSPIFFE, err := ca.Issue(dir, "bad-spiffe", testcerts.Options{URIs: []string{"spiffe://Legation.Test/replica"}})
	if err != nil {
		t.Fatal(err)
	}
	// A replica certificate named by a DNS SAN only: no SPIFFE ID.
	dnsOnly, err := ca.Issue(dir, "dns-only", testcerts.Loopback(testcerts.Options{CommonName: "spiffe://legation.test/replica"}))
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		tweak func(*replica.Config)
		want  []string // substrings of the error
	}{
		{"missing cert file", func(c *replica.Config) { c.TLSCertFile, c.TLSKeyFile = filepath.Join(dir, "nope.pem"), good.KeyFile },
			[]string{"--tls-cert-file", "nope.pem"}},
		{"key of another cert", func(c *replica.Config) { c.TLSCertFile, c.TLSKeyFile = good.CertFile, other.KeyFile },
			[]string{"--tls-key-file", other.KeyFile, "does not match"}},
		{"expired cert", func(c *replica.Config) { c.TLSCertFile, c.TLSKeyFile = expired.CertFile, expired.KeyFile },
			[]string{"--tls-cert-file", expired.CertFile, "expired"}},
		{"malformed SPIFFE id", func(c *replica.Config) { c.TLSCertFile, c.TLSKeyFile = badSPIFFE.CertFile, badSPIFFE.KeyFile },
			[]string{"--tls-cert-file", "spiffe://Legation.Test/replica"}},
		{"CA file not PEM", func(c *replica.Config) {
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = good.CertFile, good.KeyFile, notPEM
		},
			[]string{"--client-ca-file", notPEM}},
		{"bad replica identity pattern", func(c *replica.Config) {
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = good.CertFile, good.KeyFile, ca.CertFile
			c.ReplicaIdentities = []string{`spiffe://x/\`}
		}, []string{"--replica-identity", "trailing backslash"}},
		{"replica identity not SPIFFE", func(c *replica.Config) {
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = good.CertFile, good.KeyFile, ca.CertFile
			c.ReplicaIdentities = []string{"spiffe://legation.test/replica", "*.replicas.example.org"}
		}, []string{`--replica-identity "*.replicas.example.org"`, "must begin with \"spiffe://\""}},
		{"cluster replica certificate without a SPIFFE ID", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"127.0.0.1:1"}
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = dnsOnly.CertFile, dnsOnly.KeyFile, ca.CertFile
		}, []string{"--tls-cert-file", dnsOnly.CertFile, `identity "dns:localhost" is not a SPIFFE ID`, "--replica-identity"}},
		{"key without cert", func(c *replica.Config) { c.TLSKeyFile = good.KeyFile }, []string{"--tls-cert-file and --tls-key-file"}},
		{"client CA without cert", func(c *replica.Config) { c.ClientCAFile = ca.CertFile }, []string{"--client-ca-file needs --tls-cert-file"}},
		{"cluster TLS without client CA", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"127.0.0.1:1"}
			c.TLSCertFile, c.TLSKeyFile = good.CertFile, good.KeyFile
		}, []string{"--client-ca-file", "relay"}},
		{"trust domain without mTLS", func(c *replica.Config) { c.AuthzDefaultTrustDomain = "legation.test" }, []string{"--authz-default-trust-domain needs mTLS"}},
		{"bad trust domain", func(c *replica.Config) {
			c.TLSCertFile, c.TLSKeyFile, c.ClientCAFile = good.CertFile, good.KeyFile, ca.CertFile
			c.AuthzDefaultTrustDomain = "Legation/Test"
		}, []string{"--authz-default-trust-domain \"Legation/Test\""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.tweak(&cfg)
			n, err := replica.New(cfg)
			if err == nil {
				n.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

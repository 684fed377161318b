package tlsfiles_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/security/tlsfiles"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// writeFile writes content to dir/name and returns its path.
func writeFile(t testing.TB, dir, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustCA(t testing.TB, dir, name string) *testcerts.CA {
	t.Helper()
	ca, err := testcerts.NewCA(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustIssue(t testing.TB, ca *testcerts.CA, dir, name string, opts testcerts.Options) *testcerts.Cert {
	t.Helper()
	c, err := ca.Issue(dir, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	good := mustIssue(t, ca, dir, "good", testcerts.Options{URIs: []string{"spiffe://example.org/node/1"}})
	other := mustIssue(t, ca, dir, "other", testcerts.Options{CommonName: "other"})
	expiredAt := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	expired := mustIssue(t, ca, dir, "expired", testcerts.Options{
		CommonName: "old", NotBefore: expiredAt.Add(-24 * time.Hour), NotAfter: expiredAt,
	})
	validFrom := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	future := mustIssue(t, ca, dir, "future", testcerts.Options{
		CommonName: "new", NotBefore: validFrom, NotAfter: validFrom.Add(24 * time.Hour),
	})
	badSPIFFE := mustIssue(t, ca, dir, "badspiffe", testcerts.Options{
		DNSNames: []string{"a.example"}, URIs: []string{"spiffe://example.org/a/../b"},
	})
	missing := filepath.Join(dir, "missing.pem")
	notPEM := writeFile(t, dir, "notpem.pem", []byte("hello, not a certificate\n"))
	empty := writeFile(t, dir, "empty.pem", nil)
	otherBlock := writeFile(t, dir, "params.pem", []byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"))

	for _, tc := range []struct {
		name string
		cfg  tlsfiles.Config
		want []string // substrings the error must hold
	}{
		{
			name: "cert without key",
			cfg:  tlsfiles.Config{CertFile: good.CertFile, Flag: "--tls"},
			want: []string{"--tls-cert-file is set but --tls-key-file is not"},
		},
		{
			name: "key without cert",
			cfg:  tlsfiles.Config{KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-key-file is set but --tls-cert-file is not"},
		},
		{
			name: "cert without key, no flag",
			cfg:  tlsfiles.Config{CertFile: good.CertFile},
			want: []string{"tlsfiles: CertFile is set but KeyFile is not"},
		},
		{
			name: "missing cert file",
			cfg:  tlsfiles.Config{CertFile: missing, KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + missing + ": no such file"},
		},
		{
			name: "unreadable cert file",
			cfg:  tlsfiles.Config{CertFile: dir, KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + dir + ": cannot read it: is a directory"},
		},
		{
			name: "cert file not PEM",
			cfg:  tlsfiles.Config{CertFile: notPEM, KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + notPEM + ": not PEM"},
		},
		{
			name: "cert file empty, no flag",
			cfg:  tlsfiles.Config{CertFile: empty, KeyFile: good.KeyFile},
			want: []string{empty + ": not PEM"},
		},
		{
			name: "cert file with no certificate",
			cfg:  tlsfiles.Config{CertFile: otherBlock, KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + otherBlock + ": no CERTIFICATE PEM block"},
		},
		{
			name: "cert file holds the key",
			cfg:  tlsfiles.Config{CertFile: good.KeyFile, KeyFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + good.KeyFile + ": holds a PRIVATE KEY, not a certificate"},
		},
		{
			name: "key file holds the cert",
			cfg:  tlsfiles.Config{CertFile: good.CertFile, KeyFile: good.CertFile, Flag: "--tls"},
			want: []string{"--tls-key-file " + good.CertFile + ": holds a certificate, not a private key"},
		},
		{
			name: "both files swapped: both reported",
			cfg:  tlsfiles.Config{CertFile: good.KeyFile, KeyFile: good.CertFile, Flag: "--tls"},
			want: []string{
				"--tls-cert-file " + good.KeyFile + ": holds a PRIVATE KEY",
				"--tls-key-file " + good.CertFile + ": holds a certificate",
			},
		},
		{
			name: "key file not PEM",
			cfg:  tlsfiles.Config{CertFile: good.CertFile, KeyFile: notPEM, Flag: "--tls"},
			want: []string{"--tls-key-file " + notPEM + ": not PEM"},
		},
		{
			name: "key does not match",
			cfg:  tlsfiles.Config{CertFile: good.CertFile, KeyFile: other.KeyFile, Flag: "--tls"},
			want: []string{"--tls-key-file " + other.KeyFile + ": the private key does not match the certificate in --tls-cert-file " + good.CertFile},
		},
		{
			name: "expired",
			cfg:  tlsfiles.Config{CertFile: expired.CertFile, KeyFile: expired.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + expired.CertFile + ": the certificate expired at " + expiredAt.UTC().Format(time.RFC3339)},
		},
		{
			name: "not yet valid",
			cfg:  tlsfiles.Config{CertFile: future.CertFile, KeyFile: future.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + future.CertFile + ": the certificate is not valid until " + validFrom.UTC().Format(time.RFC3339)},
		},
		{
			name: "malformed SPIFFE ID",
			cfg:  tlsfiles.Config{CertFile: badSPIFFE.CertFile, KeyFile: badSPIFFE.KeyFile, Flag: "--tls"},
			want: []string{"--tls-cert-file " + badSPIFFE.CertFile + `: SPIFFE ID "spiffe://example.org/a/../b": the path has a ".." segment`},
		},
		{
			name: "CA file with no certificate",
			cfg:  tlsfiles.Config{CAFile: good.KeyFile, Flag: "--tls"},
			want: []string{"--tls-ca-file " + good.KeyFile + ": holds a PRIVATE KEY, not a certificate"},
		},
		{
			name: "CA file empty",
			cfg:  tlsfiles.Config{CAFile: empty, Flag: "--tls"},
			want: []string{"--tls-ca-file " + empty + ": not PEM"},
		},
		{
			name: "every file wrong: all reported",
			cfg:  tlsfiles.Config{CertFile: missing, KeyFile: notPEM, CAFile: otherBlock, Flag: "--tls"},
			want: []string{
				"--tls-cert-file " + missing + ": no such file",
				"--tls-key-file " + notPEM + ": not PEM",
				"--tls-ca-file " + otherBlock + ": no CERTIFICATE PEM block",
			},
		},
		{
			name: "negative interval",
			cfg:  tlsfiles.Config{Interval: -time.Second},
			want: []string{"Interval -1s is negative"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tlsfiles.New(tc.cfg)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error", f)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	c := mustIssue(t, ca, dir, "node", testcerts.Options{URIs: []string{"spiffe://example.org/node/1"}})

	f, err := tlsfiles.New(tlsfiles.Config{CertFile: c.CertFile, KeyFile: c.KeyFile, CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	if !f.HasCert() || !f.HasCA() {
		t.Errorf("HasCert, HasCA = %v, %v; want true, true", f.HasCert(), f.HasCA())
	}
	if got := f.Certificate(); got == nil || !got.Equal(c.Cert) {
		t.Errorf("Certificate() = %v, want the node's", got)
	}

	f, err = tlsfiles.New(tlsfiles.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if f.HasCert() || f.HasCA() || f.Certificate() != nil {
		t.Errorf("zero Config: HasCert, HasCA, Certificate = %v, %v, %v; want false, false, nil",
			f.HasCert(), f.HasCA(), f.Certificate())
	}
}

package etcdconn

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/testkit/testcerts"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want []string // substrings of the error; none: valid
	}{
		{name: "plain host:port", o: Options{Endpoints: []string{"10.0.0.1:2379"}}},
		{name: "http", o: Options{Endpoints: []string{"http://a:2379", "http://b:2379"}}},
		{name: "https", o: Options{Endpoints: []string{"https://a:2379", "https://b:2379"}}},
		{name: "host:port with TLS flags", o: Options{Endpoints: []string{"a:2379"}, Security: Security{CACert: "ca.pem"}}},
		{name: "no endpoints", o: Options{}},
		{name: "user and password over TLS", o: Options{Endpoints: []string{"a:2379"}, Security: Security{CACert: "ca.pem", Username: "u", Password: "p"}}},
		{name: "user and password over https", o: Options{Endpoints: []string{"https://a:2379"}, Security: Security{Username: "u", Password: "p"}}},
		{
			name: "password over plain text",
			o:    Options{Endpoints: []string{"a:2379"}, Security: Security{Username: "u", Password: "p"}},
			want: []string{`a password (--etcd-username) over plain text (--etcd-endpoints "a:2379", no TLS flag) would cross the network in clear`},
		},
		{
			name: "password over http://",
			o:    Options{Endpoints: []string{"http://a:2379"}, Security: Security{Username: "u", Password: "p"}},
			want: []string{`a password (--etcd-username) over plain text (--etcd-endpoints "http://a:2379"`},
		},
		{
			name: "mixed schemes",
			o:    Options{Endpoints: []string{"http://a:2379", "https://b:2379"}},
			want: []string{`--etcd-endpoints: "http://a:2379" is http:// (plain text) and "https://b:2379" is https://`},
		},
		{
			name: "TLS flags with http",
			o:    Options{Endpoints: []string{"http://a:2379"}, Security: Security{CACert: "ca.pem", Cert: "c.pem", Key: "k.pem"}},
			want: []string{`--etcd-cacert, --etcd-cert, --etcd-key (TLS) with --etcd-endpoints "http://a:2379", which is http://`},
		},
		{name: "cert without key", o: Options{Security: Security{Cert: "c.pem"}}, want: []string{"--etcd-cert without --etcd-key"}},
		{name: "key without cert", o: Options{Security: Security{Key: "k.pem"}}, want: []string{"--etcd-key without --etcd-cert"}},
		{name: "user without password", o: Options{Security: Security{Username: "u"}}, want: []string{"--etcd-username without a password (LEGATION_ETCD_PASSWORD or --etcd-password-file)"}},
		{name: "password without user", o: Options{Security: Security{Password: "hunter2"}}, want: []string{"a password (LEGATION_ETCD_PASSWORD or --etcd-password-file) without --etcd-username"}},
		{name: "bad scheme", o: Options{Endpoints: []string{"unix:///run/etcd"}}, want: []string{`scheme "unix"`}},
		{name: "no port", o: Options{Endpoints: []string{"etcd"}}, want: []string{`--etcd-endpoints "etcd"`}},
		{name: "password in URL", o: Options{Endpoints: []string{"https://u:hunter2@a:2379"}}, want: []string{"no user or password in an endpoint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to hold %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate: %v shows the password", err)
			}
		})
	}
}

func TestUseTLS(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want bool
	}{
		{Options{Endpoints: []string{"a:2379"}}, false},
		{Options{Endpoints: []string{"http://a:2379"}}, false},
		{Options{Endpoints: []string{"https://a:2379"}}, true},
		{Options{Endpoints: []string{"a:2379"}, Security: Security{CACert: "x"}}, true},
		{Options{Endpoints: []string{"a:2379"}, Security: Security{Username: "u", Password: "p"}}, false},
	} {
		if got := tc.o.UseTLS(); got != tc.want {
			t.Errorf("%v UseTLS() = %t, want %t", tc.o.Endpoints, got, tc.want)
		}
	}
}

// certs is a CA and two client certificates in a directory of the test's.
type certs struct {
	dir   string
	ca    *testcerts.CA
	a, b  *testcerts.Cert
	stale *testcerts.Cert // expired a day ago
}

func newCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	c := certs{dir: dir, ca: ca}
	issue := func(name string, o testcerts.Options) *testcerts.Cert {
		cert, err := ca.Issue(dir, name, o)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	c.a = issue("a", testcerts.Options{CommonName: "a"})
	c.b = issue("b", testcerts.Options{CommonName: "b"})
	c.stale = issue("stale", testcerts.Options{CommonName: "stale", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	return c
}

func write(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestClientConfigFiles(t *testing.T) {
	c := newCerts(t)
	notPEM := write(t, filepath.Join(c.dir, "not.pem"), []byte("hello\n"))
	unreadable := write(t, filepath.Join(c.dir, "unreadable.pem"), c.a.CertPEM)
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(c.dir, "missing.pem")
	eps := []string{"127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		s    Security
		want string // substring of the error; empty: valid
	}{
		{name: "CA only", s: Security{CACert: c.ca.CertFile}},
		{name: "CA and pair", s: Security{CACert: c.ca.CertFile, Cert: c.a.CertFile, Key: c.a.KeyFile}},
		{name: "missing CA", s: Security{CACert: missing}, want: "--etcd-cacert " + missing + ": no such file"},
		{name: "CA not PEM", s: Security{CACert: notPEM}, want: "--etcd-cacert " + notPEM + ": no PEM certificate in it"},
		{name: "CA is a key", s: Security{CACert: c.a.KeyFile}, want: "--etcd-cacert " + c.a.KeyFile + ": no PEM certificate in it"},
		{name: "missing cert", s: Security{Cert: missing, Key: c.a.KeyFile}, want: "--etcd-cert " + missing + ": no such file"},
		{name: "missing key", s: Security{Cert: c.a.CertFile, Key: missing}, want: "--etcd-key " + missing + ": no such file"},
		{name: "cert not PEM", s: Security{Cert: notPEM, Key: c.a.KeyFile}, want: "--etcd-cert " + notPEM + ": no PEM certificate in it"},
		{name: "key not PEM", s: Security{Cert: c.a.CertFile, Key: notPEM}, want: "--etcd-key " + notPEM + ": no PEM private key in it"},
		{name: "key not the cert's", s: Security{Cert: c.a.CertFile, Key: c.b.KeyFile}, want: "--etcd-key " + c.b.KeyFile + " is not the key of --etcd-cert " + c.a.CertFile},
		{name: "expired", s: Security{Cert: c.stale.CertFile, Key: c.stale.KeyFile}, want: "--etcd-cert " + c.stale.CertFile + ": expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Endpoints: eps, Security: tc.s}
			cfg, err := o.ClientConfig()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ClientConfig: %v", err)
				}
				if cfg.TLS == nil {
					t.Fatal("ClientConfig: no TLS")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ClientConfig: %v\nwant it to hold %q", err, tc.want)
			}
		})
	}
	if os.Geteuid() != 0 { // root reads any file
		o := Options{Endpoints: eps, Security: Security{CACert: unreadable}}
		want := "--etcd-cacert " + unreadable + ": cannot read it: permission denied"
		if _, err := o.ClientConfig(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ClientConfig: %v\nwant it to hold %q", err, want)
		}
	}
}

func TestClientConfigPlain(t *testing.T) {
	o := Options{Endpoints: []string{"http://127.0.0.1:2379"}}
	cfg, err := o.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS != nil || cfg.Username != "" {
		t.Errorf("ClientConfig = TLS %v, user %q; want no TLS, no user", cfg.TLS, cfg.Username)
	}
	// https:// alone: TLS with the system's roots, and the credentials.
	o = Options{Endpoints: []string{"https://127.0.0.1:2379"}, Security: Security{Username: "u", Password: "p"}}
	if cfg, err = o.ClientConfig(); err != nil || cfg.TLS == nil || cfg.TLS.RootCAs != nil || cfg.Username != "u" || cfg.Password != "p" {
		t.Errorf("ClientConfig(https://) = TLS %v, user %q, %v; want TLS with the system's roots, u and p", cfg.TLS, cfg.Username, err)
	}
}

// TestRotation: a replaced certificate and key are used by the next
// handshake; files that cannot be used leave the last good pair, with one
// warning.
func TestRotation(t *testing.T) {
	c := newCerts(t)
	certFile := write(t, filepath.Join(c.dir, "client.pem"), c.a.CertPEM)
	keyFile := write(t, filepath.Join(c.dir, "client-key.pem"), c.a.KeyPEM)
	var logs bytes.Buffer
	o := Options{Endpoints: []string{"127.0.0.1:2379"}, Security: Security{Cert: certFile, Key: keyFile},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg, err := o.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		t.Helper()
		got, err := cfg.TLS.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Leaf.Subject.CommonName
	}
	if got := cn(); got != "a" {
		t.Fatalf("CN %q, want a", got)
	}
	// Stamps are modification times: set them apart explicitly, as a
	// rotation minutes later would.
	next := time.Now().Add(time.Minute)
	replace := func(certPEM, keyPEM []byte) {
		t.Helper()
		write(t, certFile, certPEM)
		write(t, keyFile, keyPEM)
		next = next.Add(time.Minute)
		for _, f := range []string{certFile, keyFile} {
			if err := os.Chtimes(f, next, next); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace(c.b.CertPEM, c.b.KeyPEM)
	if got := cn(); got != "b" {
		t.Fatalf("after rotation: CN %q, want b", got)
	}
	// Half a rotation: the new certificate, the old key.
	replace(c.a.CertPEM, c.b.KeyPEM)
	for range 3 {
		if got := cn(); got != "b" {
			t.Fatalf("after a bad rotation: CN %q, want b (the last good)", got)
		}
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	replace(c.a.CertPEM, c.a.KeyPEM)
	if got := cn(); got != "a" {
		t.Fatalf("after the rotation was finished: CN %q, want a", got)
	}
}

// TestPasswordHidden: the password shows in no usage, default, String or
// log line.
func TestPasswordHidden(t *testing.T) {
	const pw = "hunter2"
	s := Security{Username: "admin", Password: pw, CACert: "ca.pem"}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	s.AddFlags(fs)
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "etcd", s)
	for what, out := range map[string]string{
		"usage":    fs.FlagUsages(),
		"String":   s.String(),
		"%+v":      fmt.Sprintf("%+v", Options{Security: s}),
		"LogValue": logs.String(),
	} {
		if strings.Contains(out, pw) {
			t.Errorf("%s shows the password: %s", what, out)
		}
	}
	if !strings.Contains(s.String(), "password=[redacted]") {
		t.Errorf("String() = %s, want password=[redacted]", s.String())
	}
}

// TestPasswordOnCommandLine: --etcd-password is refused with an error
// saying where the password goes, which does not repeat it, and the
// password is not kept.
func TestPasswordOnCommandLine(t *testing.T) {
	const pw = "hunter2"
	var s Security
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	s.AddFlags(fs)
	if err := fs.Parse([]string{"--etcd-username", "admin", "--etcd-cacert", "ca.pem", "--etcd-password", pw}); err != nil {
		t.Fatal(err)
	}
	if s.Password != "" {
		t.Errorf("Password %q kept from --etcd-password", s.Password)
	}
	o := Options{Endpoints: []string{"https://a:2379"}, Security: s}
	err := o.Validate()
	want := "--etcd-password: refused: a password on the command line shows in the process list and shell history; set LEGATION_ETCD_PASSWORD or --etcd-password-file"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), pw) {
		t.Errorf("Validate: %v; want %q, without the password", err, want)
	}
	if strings.Contains(fs.FlagUsages(), "--etcd-password ") {
		t.Errorf("usage shows the refused --etcd-password:\n%s", fs.FlagUsages())
	}
}

// TestLoadPassword: the password comes from --etcd-password-file's first
// line or from LEGATION_ETCD_PASSWORD, not both.
func TestLoadPassword(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string { return write(t, filepath.Join(dir, name), []byte(content)) }
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == PasswordEnv && v != "" {
				return v, true
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		name, file, env, want, wantErr string
	}{
		{name: "file", file: file("pw", "s3cret\n"), want: "s3cret"},
		{name: "file CRLF, more lines", file: file("crlf", "s3cret\r\nignored\n"), want: "s3cret"},
		{name: "environment", env: "from-env", want: "from-env"},
		{name: "neither", want: "kept"},
		{name: "both", file: file("both", "x\n"), env: "y", wantErr: "--etcd-password-file and LEGATION_ETCD_PASSWORD are both set"},
		{name: "empty file", file: file("empty", "\n"), wantErr: "its first line is empty"},
		{name: "missing file", file: filepath.Join(dir, "nope"), wantErr: "--etcd-password-file " + filepath.Join(dir, "nope") + ": no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Security{Password: "kept", PasswordFile: tc.file}
			err := s.LoadPassword(env(tc.env))
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("LoadPassword: %v; want %q", err, tc.wantErr)
				}
			case err != nil || s.Password != tc.want:
				t.Errorf("LoadPassword: %v, password %q; want %q", err, s.Password, tc.want)
			}
		})
	}
}

package adminctl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// tlsReadyzServer serves /readyz "ok" over TLS on 127.0.0.1 with the
// certificate cert and clientAuth, checking client certificates against
// clientCAs.
func tlsReadyzServer(t *testing.T, cert *testcerts.Cert, clientAuth tls.ClientAuthType, clientCAs *x509.CertPool) string {
	t.Helper()
	pair, err := cert.TLS()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("ok\n")) //nolint:errcheck // the test reads what arrives
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: clientAuth, ClientCAs: clientCAs}
	// The refused handshakes are the point of some cases, not news.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestMembersTLS(t *testing.T) {
	dir := t.TempDir()
	replicaCA, err := testcerts.NewCA(dir, "replicas")
	if err != nil {
		t.Fatal(err)
	}
	adminCA, err := testcerts.NewCA(dir, "admins")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testcerts.NewCA(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	// The usual replica certificate, with the loopback names too.
	replicaCert, err := replicaCA.Issue(dir, "replica", testcerts.Loopback(testcerts.Options{URIs: []string{"spiffe://legation.test/replica"}}))
	if err != nil {
		t.Fatal(err)
	}
	// A SPIFFE id and no IP or DNS name: no hostname check could pass.
	spiffeOnly, err := replicaCA.Issue(dir, "replica-spiffe", testcerts.Options{URIs: []string{"spiffe://legation.test/replica-spiffe"}})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, err := replicaCA.Issue(dir, "replica-expired", testcerts.Loopback(testcerts.Options{
		URIs: []string{"spiffe://legation.test/replica-expired"}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
	}))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := adminCA.Issue(dir, "admin", testcerts.Options{URIs: []string{"spiffe://legation.test/admin"}})
	if err != nil {
		t.Fatal(err)
	}
	// Issued by a CA the mTLS replica does not take client certificates of.
	stranger, err := otherCA.Issue(dir, "stranger", testcerts.Options{URIs: []string{"spiffe://legation.test/stranger"}})
	if err != nil {
		t.Fatal(err)
	}
	adminPool := x509.NewCertPool()
	adminPool.AddCert(adminCA.Cert)

	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	addrs := map[string]string{
		"tls":    tlsReadyzServer(t, replicaCert, tls.NoClientCert, nil),
		"spiffe": tlsReadyzServer(t, spiffeOnly, tls.NoClientCert, nil),
		// What xds-node does with --client-ca-file: a certificate if given.
		"optional": tlsReadyzServer(t, replicaCert, tls.VerifyClientCertIfGiven, adminPool),
		"mtls":     tlsReadyzServer(t, replicaCert, tls.RequireAndVerifyClientCert, adminPool),
		"expired":  tlsReadyzServer(t, expiredCert, tls.NoClientCert, nil),
		"plain":    readyzServer(t, http.StatusOK, "ok\n"),
	}
	for name, addr := range addrs {
		h.register(shard.Member{Name: name, XDSAddr: "10.0.0.1:18000", HTTPAddr: addr, GossipAddr: "10.0.0.1:7946", Started: started, Ready: true})
	}
	// health runs members -o json with args and returns each replica's
	// health by name.
	health := func(t *testing.T, args ...string) map[string]string {
		t.Helper()
		r := h.run(append([]string{"members", "-o", "json"}, args...)...)
		if r.code != 0 {
			t.Fatal(r)
		}
		var got []memberInfo
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range got {
			// Without x509's times, which change.
			h, _, _ := strings.Cut(m.Health, ": current time ")
			out[m.Name] = h
		}
		return out
	}
	expired := "unknown: its certificate, issued by \"CN=replicas test CA\", does not verify against --tls-ca-file: x509: certificate has expired or is not yet valid"
	needCert := "unknown: the replica requires a client certificate (tls: certificate required): set --tls-cert-file and --tls-key-file"

	for _, tt := range []struct {
		name string
		args []string
		vars map[string]string
		want map[string]string
	}{{
		name: "plain HTTP",
		want: map[string]string{
			"tls": healthServesTLS, "spiffe": healthServesTLS, "optional": healthServesTLS, "mtls": healthServesTLS,
			"expired": healthServesTLS, "plain": "ready",
		},
	}, {
		name: "CA",
		args: []string{"--tls-ca-file", replicaCA.CertFile},
		want: map[string]string{
			"tls": "ready", "spiffe": "ready", "optional": "ready", "mtls": needCert,
			"expired": expired, "plain": healthServesHTTP,
		},
	}, {
		name: "CA and admin certificate",
		args: []string{"--tls-ca-file", replicaCA.CertFile, "--tls-cert-file", admin.CertFile, "--tls-key-file", admin.KeyFile},
		want: map[string]string{
			"tls": "ready", "spiffe": "ready", "optional": "ready", "mtls": "ready",
			"expired": expired, "plain": healthServesHTTP,
		},
	}, {
		name: "from the environment",
		vars: map[string]string{"LEGATION_TLS_CA_FILE": replicaCA.CertFile, "LEGATION_TLS_CERT_FILE": admin.CertFile, "LEGATION_TLS_KEY_FILE": admin.KeyFile},
		want: map[string]string{
			"tls": "ready", "spiffe": "ready", "optional": "ready", "mtls": "ready",
			"expired": expired, "plain": healthServesHTTP,
		},
	}, {
		name: "certificate of another CA",
		args: []string{"--tls-ca-file", replicaCA.CertFile, "--tls-cert-file", stranger.CertFile, "--tls-key-file", stranger.KeyFile},
		want: map[string]string{
			"tls": "ready", "spiffe": "ready",
			// Refused if given, even where none is needed.
			"optional": "unknown: the replica refused the client certificate of --tls-cert-file (tls: unknown certificate authority)",
			"mtls":     "unknown: the replica refused the client certificate of --tls-cert-file (tls: unknown certificate authority)",
			"expired":  expired,
			"plain":    healthServesHTTP,
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			h.vars = tt.vars
			defer func() { h.vars = map[string]string{} }()
			if diff := cmp.Diff(tt.want, health(t, tt.args...)); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("CA that did not sign the replicas", func(t *testing.T) {
		untrusted := `unknown: its certificate, issued by "CN=replicas test CA", is not signed by a CA of --tls-ca-file`
		want := map[string]string{
			"tls": untrusted, "spiffe": untrusted, "optional": untrusted, "mtls": untrusted,
			// x509 checks the dates before the chain.
			"expired": expired, "plain": healthServesHTTP,
		}
		if diff := cmp.Diff(want, health(t, "--tls-ca-file", otherCA.CertFile)); diff != "" {
			t.Errorf("health (-want +got):\n%s", diff)
		}
	})

	t.Run("table", func(t *testing.T) {
		out := h.mustRun("members", "--tls-ca-file", replicaCA.CertFile)
		for _, l := range fields(out)[1:] {
			if l[0] == "tls" && l[4] != "ready" {
				t.Errorf("line of tls: %v", l)
			}
		}
	})
}

// TestMembersTLSFlagErrors checks that bad --tls-* flags and files fail
// members with an error naming the flag and the file, and that they do not
// bother commands that do not talk to replicas.
func TestMembersTLSFlagErrors(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "replicas")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Issue(dir, "admin", testcerts.Options{CommonName: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue(dir, "other", testcerts.Options{CommonName: "other"})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.Issue(dir, "expired", testcerts.Options{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	notPEM := writeFile(t, "not.pem", "just some text\n")
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.Mkdir(unreadable, 0o755); err != nil { // reading a directory fails
		t.Fatal(err)
	}

	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	for _, tt := range []struct {
		name string
		args []string
		vars map[string]string
		want string
	}{
		{"cert without key", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", admin.CertFile},
			nil, "--tls-cert-file without --tls-key-file: a client certificate needs its private key"},
		{"key without cert", []string{"--tls-ca-file", ca.CertFile, "--tls-key-file", admin.KeyFile},
			nil, "--tls-key-file without --tls-cert-file: a private key needs its client certificate"},
		{"cert without CA", []string{"--tls-cert-file", admin.CertFile, "--tls-key-file", admin.KeyFile},
			nil, "--tls-cert-file without --tls-ca-file: a client certificate is only presented over HTTPS, which needs the replicas' CA"},
		{"cert without CA, from the environment", nil,
			map[string]string{"LEGATION_TLS_CERT_FILE": admin.CertFile, "LEGATION_TLS_KEY_FILE": admin.KeyFile},
			"--tls-cert-file without --tls-ca-file"},
		{"CA missing", []string{"--tls-ca-file", missing},
			nil, "--tls-ca-file " + missing + ": no such file"},
		{"CA missing, from the environment", nil,
			map[string]string{"LEGATION_TLS_CA_FILE": missing}, "--tls-ca-file " + missing + ": no such file"},
		{"CA unreadable", []string{"--tls-ca-file", unreadable},
			nil, "--tls-ca-file " + unreadable + ": cannot read it: is a directory"},
		{"CA not PEM", []string{"--tls-ca-file", notPEM},
			nil, "--tls-ca-file " + notPEM + ": not PEM: no \"-----BEGIN\" block in it"},
		{"CA is a key", []string{"--tls-ca-file", admin.KeyFile},
			nil, "--tls-ca-file " + admin.KeyFile + ": holds a PRIVATE KEY, not a certificate"},
		{"cert missing", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", missing, "--tls-key-file", admin.KeyFile},
			nil, "--tls-cert-file " + missing + ": no such file"},
		{"cert not PEM", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", notPEM, "--tls-key-file", admin.KeyFile},
			nil, "--tls-cert-file " + notPEM + ": not PEM"},
		{"key missing", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", admin.CertFile, "--tls-key-file", missing},
			nil, "--tls-key-file " + missing + ": no such file"},
		{"key not PEM", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", admin.CertFile, "--tls-key-file", notPEM},
			nil, "--tls-key-file " + notPEM + ": not PEM"},
		{"key of another certificate", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", admin.CertFile, "--tls-key-file", other.KeyFile},
			nil, "--tls-key-file " + other.KeyFile + ": the private key does not match the certificate in --tls-cert-file " + admin.CertFile},
		{"cert expired", []string{"--tls-ca-file", ca.CertFile, "--tls-cert-file", expired.CertFile, "--tls-key-file", expired.KeyFile},
			nil, "--tls-cert-file " + expired.CertFile + ": the certificate expired at "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.vars = tt.vars
			defer func() { h.vars = map[string]string{} }()
			r := h.run(append([]string{"members"}, tt.args...)...)
			if r.code == 0 || !strings.HasPrefix(r.stderr, "xdsadmin: "+tt.want) {
				t.Errorf("got %s\nwant stderr to start with %q", r, "xdsadmin: "+tt.want)
			}
			if r.stdout != "" {
				t.Errorf("output on error: %q", r.stdout)
			}
		})
	}

	t.Run("not checked by other commands", func(t *testing.T) {
		// get does not talk to replicas: a missing file, or xds-node's own
		// serving certificate in the environment, is no reason to fail.
		for _, vars := range []map[string]string{
			{"LEGATION_TLS_CA_FILE": missing},
			{"LEGATION_TLS_CERT_FILE": admin.CertFile, "LEGATION_TLS_KEY_FILE": admin.KeyFile},
		} {
			h.vars = vars
			h.mustRun("get", "cluster")
		}
		h.vars = map[string]string{}
	})
}

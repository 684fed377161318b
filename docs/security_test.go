// Package docs holds the checks that keep the documentation true. It has
// no code of its own.
package docs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// recipe returns the shell script between the recipe markers of
// the security page, without its code fence.
func recipe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(securityPage)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- recipe:begin -->")
	body, _, ok2 := strings.Cut(rest, "<!-- recipe:end -->")
	if !ok || !ok2 {
		t.Fatal(securityPage + ": no <!-- recipe:begin --> ... <!-- recipe:end --> block")
	}
	body = strings.TrimSpace(body)
	body, ok = strings.CutPrefix(body, "```sh\n")
	body, ok2 = strings.CutSuffix(body, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: the recipe is not one ```sh block:\n%s", securityPage, body)
	}
	return body
}

// TestSecurityCertificateRecipe runs the security page's certificate recipe with
// OpenSSL and checks that what it makes works as the page says, with
// Legation's own TLS code: each certificate's identity is the SPIFFE ID
// of its URI SAN; a replica serves mTLS with it and recognises each
// client (the replica itself too, relaying as a client); a client
// certificate, made for clientAuth only, cannot serve.
func TestSecurityCertificateRecipe(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sh", "-e", "-c", recipe(t))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the recipe: %v\n%s", err, out)
	}
	want := map[string]string{
		"replica":    "spiffe://example.org/legation/replica",
		"envoy-edge": "spiffe://example.org/ns/edge/sa/envoy",
		"admin":      "spiffe://example.org/legation/admin",
	}
	files := map[string]*tlsfiles.Files{}
	for name, id := range want {
		f, err := tlsfiles.New(tlsfiles.Config{
			CertFile: filepath.Join(dir, name+".pem"),
			KeyFile:  filepath.Join(dir, name+"-key.pem"),
			CAFile:   filepath.Join(dir, "ca.pem"),
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files[name] = f
		leaf := f.Certificate()
		if got, err := tlsfiles.Identity(leaf); err != nil || got != id {
			t.Errorf("%s: identity %q (%v), want %q", name, got, err, id)
		}
		if leaf.IsCA || len(leaf.URIs) != 1 {
			t.Errorf("%s: IsCA %v with %d URI SANs, want a leaf with one", name, leaf.IsCA, len(leaf.URIs))
		}
	}
	for name := range want {
		got, err := handshake(files["replica"], files[name])
		if err != nil || got != want[name] {
			t.Errorf("%s to the replica: the replica saw %q (%v), want %q", name, got, err, want[name])
		}
	}
	if _, err := handshake(files["envoy-edge"], files["replica"]); err == nil {
		t.Error("a clientAuth-only certificate served TLS; want the client to refuse it")
	}
}

// handshake serves mTLS with server's material, connects with client's
// and returns the identity the server saw.
func handshake(server, client *tlsfiles.Files) (string, error) {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server.ServerConfig(tls.RequireAndVerifyClientCert))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- ""
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() != nil {
			seen <- ""
			return
		}
		id, _ := tlsfiles.PeerIdentity(tc.ConnectionState())
		seen <- id
	}()
	cfg := client.ClientConfig(func(leaf *x509.Certificate) error {
		if id, err := tlsfiles.Identity(leaf); err != nil || !tlsfiles.IsSPIFFE(id) {
			return fmt.Errorf("server identity %q (%v)", id, err)
		}
		return nil
	})
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// In TLS 1.3 the server checks the client's certificate after the
	// client's side of the handshake ends: wait for its verdict.
	id := <-seen
	if id == "" {
		return "", fmt.Errorf("the server refused the handshake")
	}
	return id, nil
}

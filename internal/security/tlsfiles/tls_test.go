package tlsfiles_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/security/tlsfiles"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

const (
	// defaultTestTimeout bounds what must happen; defaultTestShortTimeout
	// is how long to watch for what must not.
	defaultTestTimeout      = 10 * time.Second
	defaultTestShortTimeout = 300 * time.Millisecond
	// testInterval is how often Run polls in these tests.
	testInterval = 10 * time.Millisecond
)

// server is a TLS echo server on 127.0.0.1: after the handshake it writes
// one line naming the client's PeerIdentity ("none" if it has none),
// then echoes what it reads.
type server struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex // guards conns
	// conns are the open connections, closed at cleanup.
	conns map[net.Conn]struct{}
}

func serve(t testing.TB, cfg *tls.Config) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
					c.Close()
				}()
				s.handle(tls.Server(c, cfg))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) handle(c *tls.Conn) {
	if err := c.Handshake(); err != nil {
		return
	}
	id, ok := tlsfiles.PeerIdentity(c.ConnectionState())
	if !ok {
		id = "none"
	}
	if _, err := fmt.Fprintf(c, "%s\n", id); err != nil {
		return
	}
	io.Copy(c, c) //nolint:errcheck // the echo ends when the client goes or cleanup closes it
}

// conn is a client connection to a server.
type conn struct {
	*tls.Conn
	r *bufio.Reader
	// id is the identity the server saw.
	id string
}

// dial connects to addr with cfg and waits for the server's line, so that
// a client certificate the server refuses fails here (in TLS 1.3 the
// client's handshake ends before the server has checked it).
func dial(t testing.TB, addr string, cfg *tls.Config) (*conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: defaultTestTimeout}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(defaultTestTimeout)) //nolint:errcheck // a failure shows as a read or write error
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: r, id: strings.TrimSuffix(line, "\n")}, nil
}

func mustDial(t testing.TB, addr string, cfg *tls.Config) *conn {
	t.Helper()
	c, err := dial(t, addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return c
}

// echo checks that c still carries data both ways.
func (c *conn) echo(t testing.TB, msg string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo = %q, %v; want %q", got, err, msg)
	}
}

func mustNew(t testing.TB, cfg tlsfiles.Config) *tlsfiles.Files {
	t.Helper()
	f, err := tlsfiles.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// run runs f.Run until the test ends.
func run(t testing.TB, f *tlsfiles.Files) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// filesConfig names c's certificate and key and ca's certificate (either
// may be nil) as a Config's files.
func filesConfig(c *testcerts.Cert, ca *testcerts.CA) tlsfiles.Config {
	var cfg tlsfiles.Config
	if c != nil {
		cfg.CertFile, cfg.KeyFile = c.CertFile, c.KeyFile
	}
	if ca != nil {
		cfg.CAFile = ca.CertFile
	}
	return cfg
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// never checks that cond stays false for defaultTestShortTimeout.
func never(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestShortTimeout)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("%s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// peerRecorder is a verifyPeer that records the identity of the servers
// it sees and refuses those not named want.
type peerRecorder struct {
	mu   sync.Mutex
	want string
	last *x509.Certificate
}

func (p *peerRecorder) verify(leaf *x509.Certificate) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = leaf
	id, err := tlsfiles.Identity(leaf)
	if err != nil {
		return err
	}
	if p.want != "" && id != p.want {
		return fmt.Errorf("server is %q, want %q", id, p.want)
	}
	return nil
}

func (p *peerRecorder) lastLeaf() *x509.Certificate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

const (
	serverID = "spiffe://example.org/xds-node/a"
	clientID = "spiffe://example.org/envoy/n1"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	srvCert := mustIssue(t, ca, dir, "server", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cliCert := mustIssue(t, ca, dir, "client", testcerts.Options{URIs: []string{clientID}})
	srv := mustNew(t, filesConfig(srvCert, ca))
	cli := mustNew(t, filesConfig(cliCert, ca))
	s := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))

	peers := &peerRecorder{want: serverID}
	c := mustDial(t, s.addr, cli.ClientConfig(peers.verify))
	if c.id != clientID {
		t.Errorf("server saw client %q, want %q", c.id, clientID)
	}
	if got := peers.lastLeaf(); got == nil || !got.Equal(srvCert.Cert) {
		t.Errorf("verifyPeer saw %v, want the server's certificate", got)
	}
	cs := c.ConnectionState()
	if cs.NegotiatedProtocol != "h2" {
		t.Errorf("NegotiatedProtocol = %q, want h2", cs.NegotiatedProtocol)
	}
	if id, ok := tlsfiles.PeerIdentity(cs); ok {
		t.Errorf("client side PeerIdentity = %q, true; want false (the chain is verified by hand)", id)
	}
	c.echo(t, "hello")

	t.Run("http/1.1 client", func(t *testing.T) {
		cfg := cli.ClientConfig(nil)
		cfg.NextProtos = []string{"http/1.1"}
		if got := mustDial(t, s.addr, cfg).ConnectionState().NegotiatedProtocol; got != "http/1.1" {
			t.Errorf("NegotiatedProtocol = %q, want http/1.1", got)
		}
	})
	t.Run("verifyPeer refuses", func(t *testing.T) {
		peers := &peerRecorder{want: "spiffe://example.org/someone/else"}
		if _, err := dial(t, s.addr, cli.ClientConfig(peers.verify)); err == nil || !strings.Contains(err.Error(), "someone/else") {
			t.Errorf("dial = %v, want verifyPeer's error", err)
		}
	})
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		cfg := cli.ClientConfig(nil)
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if _, err := dial(t, s.addr, cfg); err == nil {
			t.Error("a TLS 1.1 client was served")
		}
	})
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	otherCA := mustCA(t, dir, "other")
	srvCert := mustIssue(t, ca, dir, "server", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cliCert := mustIssue(t, ca, dir, "client", testcerts.Options{URIs: []string{clientID}})
	strangerCert := mustIssue(t, otherCA, dir, "stranger", testcerts.Options{URIs: []string{clientID}})
	fakeSrvCert := mustIssue(t, otherCA, dir, "fakeserver", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))

	srv := mustNew(t, filesConfig(srvCert, ca))
	cli := mustNew(t, filesConfig(cliCert, ca))
	noCert := mustNew(t, filesConfig(nil, ca))
	stranger := mustNew(t, filesConfig(strangerCert, ca))
	mtls := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	ifGiven := serve(t, srv.ServerConfig(tls.VerifyClientCertIfGiven))

	for _, tc := range []struct {
		name   string
		addr   string
		client *tlsfiles.Files
		wantID string // "" means refused
	}{
		{name: "mTLS, no client cert", addr: mtls.addr, client: noCert},
		{name: "mTLS, client cert of another CA", addr: mtls.addr, client: stranger},
		{name: "if given, no client cert", addr: ifGiven.addr, client: noCert, wantID: "none"},
		{name: "if given, client cert of another CA", addr: ifGiven.addr, client: stranger},
		{name: "if given, good client cert", addr: ifGiven.addr, client: cli, wantID: clientID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dial(t, tc.addr, tc.client.ClientConfig(nil))
			switch {
			case tc.wantID == "" && err == nil:
				t.Fatalf("served, as %q; want refused at the handshake", c.id)
			case tc.wantID != "" && err != nil:
				t.Fatalf("dial: %v", err)
			case tc.wantID != "" && c.id != tc.wantID:
				t.Fatalf("server saw %q, want %q", c.id, tc.wantID)
			}
		})
	}

	t.Run("server cert of another CA", func(t *testing.T) {
		fake := serve(t, mustNew(t, filesConfig(fakeSrvCert, otherCA)).ServerConfig(tls.VerifyClientCertIfGiven))
		_, err := dial(t, fake.addr, cli.ClientConfig(nil))
		if err == nil || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("dial = %v, want the server's certificate refused (unknown authority)", err)
		}
	})
	t.Run("server without CA file refuses every client cert", func(t *testing.T) {
		s := serve(t, mustNew(t, filesConfig(srvCert, nil)).ServerConfig(tls.RequireAndVerifyClientCert))
		if _, err := dial(t, s.addr, cli.ClientConfig(nil)); err == nil {
			t.Fatal("served a client certificate with no CA file to check it against")
		}
	})
	t.Run("server without cert", func(t *testing.T) {
		s := serve(t, noCert.ServerConfig(tls.NoClientCert))
		if _, err := dial(t, s.addr, cli.ClientConfig(nil)); err == nil {
			t.Fatal("handshake with a server that has no certificate succeeded")
		}
	})
	t.Run("client without CA file verifies as crypto/tls does", func(t *testing.T) {
		sys := mustNew(t, filesConfig(cliCert, nil))
		_, err := dial(t, ifGiven.addr, sys.ClientConfig(nil))
		if err == nil || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("dial = %v, want the test CA unknown to the system roots", err)
		}
		// With the CA trusted the usual way, the host name is checked
		// and verifyPeer still called.
		cfg := sys.ClientConfig((&peerRecorder{want: serverID}).verify)
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AddCert(ca.Cert)
		c := mustDial(t, ifGiven.addr, cfg)
		if id, ok := tlsfiles.PeerIdentity(c.ConnectionState()); !ok || id != serverID {
			t.Errorf("PeerIdentity = %q, %v; want %q, true", id, ok, serverID)
		}
		cfg.ServerName = "elsewhere.example"
		if _, err := dial(t, ifGiven.addr, cfg); err == nil {
			t.Error("served under a host name the certificate does not hold")
		}
	})
}

// writeAtomic replaces path's content at once, as rotation tools do.
func writeAtomic(t testing.TB, path string, content []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRotation rotates everything to a new CA: the server's certificate
// and client CA file, the client's certificate and CA file. New
// handshakes use the new material, at once and on both sides, and a
// connection opened before keeps working.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca1 := mustCA(t, dir, "one")
	srv1 := mustIssue(t, ca1, dir, "server1", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cli1 := mustIssue(t, ca1, dir, "client1", testcerts.Options{URIs: []string{clientID}})

	// The files the two Files watch, holding the first material.
	live := filepath.Join(dir, "live")
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	srvCfg := tlsfiles.Config{
		CertFile: writeFile(t, live, "server.pem", srv1.CertPEM),
		KeyFile:  writeFile(t, live, "server-key.pem", srv1.KeyPEM),
		CAFile:   writeFile(t, live, "server-ca.pem", ca1.CertPEM),
		Interval: testInterval,
	}
	cliCfg := tlsfiles.Config{
		CertFile: writeFile(t, live, "client.pem", cli1.CertPEM),
		KeyFile:  writeFile(t, live, "client-key.pem", cli1.KeyPEM),
		CAFile:   writeFile(t, live, "client-ca.pem", ca1.CertPEM),
		Interval: testInterval,
	}
	var logs testbase.LockedBuffer
	srvCfg.Logger = testbase.LoggerTo(&logs)
	srv, cli := mustNew(t, srvCfg), mustNew(t, cliCfg)
	run(t, srv)
	run(t, cli)
	s := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	peers := &peerRecorder{want: serverID}
	cliTLS := cli.ClientConfig(peers.verify)
	old := mustDial(t, s.addr, cliTLS)
	old.echo(t, "before")
	// A client that keeps its first certificate, and trusts the server's
	// new CA: only the server can refuse it.
	stale := mustNew(t, filesConfig(cli1, nil))

	ca2 := mustCA(t, dir, "two")
	srv2 := mustIssue(t, ca2, dir, "server2", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cli2 := mustIssue(t, ca2, dir, "client2", testcerts.Options{URIs: []string{clientID}})
	// Certificates and keys are written key first: see
	// TestHalfWrittenPair for the other order.
	writeAtomic(t, srvCfg.KeyFile, srv2.KeyPEM)
	writeAtomic(t, srvCfg.CertFile, srv2.CertPEM)
	writeAtomic(t, srvCfg.CAFile, ca2.CertPEM)
	writeAtomic(t, cliCfg.KeyFile, cli2.KeyPEM)
	writeAtomic(t, cliCfg.CertFile, cli2.CertPEM)
	writeAtomic(t, cliCfg.CAFile, ca2.CertPEM)
	waitFor(t, "the server's new certificate", func() bool { return srv.Certificate().Equal(srv2.Cert) })
	waitFor(t, "the client's new certificate", func() bool { return cli.Certificate().Equal(cli2.Cert) })
	waitFor(t, "the new CA files loaded", func() bool {
		c, err := dial(t, s.addr, cliTLS)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	c := mustDial(t, s.addr, cliTLS)
	if got := peers.lastLeaf(); !got.Equal(srv2.Cert) {
		t.Errorf("new handshake: server presented serial %v, want the new certificate's %v", got.SerialNumber, srv2.Cert.SerialNumber)
	}
	c.echo(t, "after")
	staleTLS := stale.ClientConfig(nil)
	staleTLS.RootCAs = x509.NewCertPool()
	staleTLS.RootCAs.AddCert(ca2.Cert)
	if _, err := dial(t, s.addr, staleTLS); err == nil || !strings.Contains(err.Error(), "remote error") {
		t.Errorf("dial with the old CA's client certificate = %v, want the server to refuse it", err)
	}
	old.echo(t, "still here")
	if got := logs.Count("level=INFO", "loaded a new certificate and key", "identity="+serverID, "not_after="); got != 1 {
		t.Errorf("%d Info lines for the new certificate, want 1; logs:\n%s", got, logs.String())
	}
	if got := logs.Count("level=WARN"); got != 0 {
		t.Errorf("%d Warn lines, want 0; logs:\n%s", got, logs.String())
	}
}

// TestHalfWrittenPair writes a new certificate and, a while later, its
// key: in between the files do not match, and the old pair stays in use.
func TestHalfWrittenPair(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	c1 := mustIssue(t, ca, dir, "one", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	c2 := mustIssue(t, ca, dir, "two", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cli := mustIssue(t, ca, dir, "client", testcerts.Options{URIs: []string{clientID}})
	live := t.TempDir()
	var logs testbase.LockedBuffer
	cfg := tlsfiles.Config{
		CertFile: writeFile(t, live, "cert.pem", c1.CertPEM),
		KeyFile:  writeFile(t, live, "key.pem", c1.KeyPEM),
		CAFile:   ca.CertFile,
		Interval: testInterval,
		Logger:   testbase.LoggerTo(&logs),
		Flag:     "--tls",
	}
	srv := mustNew(t, cfg)
	run(t, srv)
	s := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	cliTLS := mustNew(t, filesConfig(cli, ca)).ClientConfig(nil)

	writeFile(t, live, "cert.pem", c2.CertPEM) // in place, and the key not yet
	never(t, "the new certificate was loaded without its key", func() bool { return !srv.Certificate().Equal(c1.Cert) })
	mustDial(t, s.addr, cliTLS).echo(t, "old pair")
	waitFor(t, "a Warn about the mismatch", func() bool {
		return logs.Count("level=WARN", "--tls-key-file "+cfg.KeyFile+": the private key does not match") == 1
	})

	writeFile(t, live, "key.pem", c2.KeyPEM)
	waitFor(t, "the new pair", func() bool { return srv.Certificate().Equal(c2.Cert) })
	mustDial(t, s.addr, cliTLS).echo(t, "new pair")
	if got := logs.Count("level=WARN"); got != 1 {
		t.Errorf("%d Warn lines, want 1; logs:\n%s", got, logs.String())
	}
}

// TestBadRewrite writes bad content over good files: the last good
// material stays, a Warn names the file and the problem once per bad
// content, and good content is loaded again.
func TestBadRewrite(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir, "a")
	srvCert := mustIssue(t, ca, dir, "server", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cliCert := mustIssue(t, ca, dir, "client", testcerts.Options{URIs: []string{clientID}})
	expired := mustIssue(t, ca, dir, "expired", testcerts.Loopback(testcerts.Options{
		URIs: []string{serverID}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
	}))
	live := t.TempDir()
	var logs testbase.LockedBuffer
	cfg := tlsfiles.Config{
		CertFile: writeFile(t, live, "cert.pem", srvCert.CertPEM),
		KeyFile:  writeFile(t, live, "key.pem", srvCert.KeyPEM),
		CAFile:   writeFile(t, live, "ca.pem", ca.CertPEM),
		Interval: testInterval,
		Logger:   testbase.LoggerTo(&logs),
		Flag:     "--tls",
	}
	srv := mustNew(t, cfg)
	run(t, srv)
	s := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	cliTLS := mustNew(t, filesConfig(cliCert, ca)).ClientConfig(nil)
	warns := func(subs ...string) func() int {
		return func() int { return logs.Count(append([]string{"level=WARN"}, subs...)...) }
	}

	for _, step := range []struct {
		name  string
		file  string
		write []byte
		warn  []string // what the one Warn holds
	}{
		{"cert not PEM", cfg.CertFile, []byte("garbage"), []string{"--tls-cert-file " + cfg.CertFile + ": not PEM"}},
		{"cert empty", cfg.CertFile, nil, []string{"--tls-cert-file " + cfg.CertFile + ": not PEM"}},
		{"cert expired", cfg.CertFile, expired.CertPEM, []string{"--tls-cert-file " + cfg.CertFile + ": the certificate expired at"}},
		{"key is a cert", cfg.KeyFile, srvCert.CertPEM, []string{"--tls-key-file " + cfg.KeyFile + ": holds a certificate"}},
		{"CA without certificate", cfg.CAFile, srvCert.KeyPEM, []string{"--tls-ca-file " + cfg.CAFile + ": holds a PRIVATE KEY"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			good, err := os.ReadFile(step.file)
			if err != nil {
				t.Fatal(err)
			}
			before := warns(step.warn...)()
			writeAtomic(t, step.file, step.write)
			waitFor(t, "the Warn", func() bool { return warns(step.warn...)() == before+1 })
			never(t, "a second Warn for the same content", func() bool { return warns(step.warn...)() > before+1 })
			if !srv.Certificate().Equal(srvCert.Cert) {
				t.Fatal("the certificate in use changed")
			}
			mustDial(t, s.addr, cliTLS).echo(t, "still served")
			writeAtomic(t, step.file, good)
		})
	}
	// Good content that differs from the last good is loaded: a bundle
	// of two CAs, still holding the clients' CA.
	bundle := append(slices.Clip(ca.CertPEM), mustCA(t, dir, "b").CertPEM...)
	writeAtomic(t, cfg.CAFile, bundle)
	waitFor(t, "the CA bundle loaded", func() bool {
		return logs.Count("level=INFO", "loaded new CA certificates", "certificates=2") == 1
	})
	mustDial(t, s.addr, cliTLS).echo(t, "served")
}

func TestRunTwice(t *testing.T) {
	f := mustNew(t, tlsfiles.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil when ctx ends", err)
	}
	if err := f.Run(ctx); err == nil {
		t.Fatal("second Run = nil, want an error")
	}
}

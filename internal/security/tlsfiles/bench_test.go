package tlsfiles_test

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// BenchmarkHandshake measures full mutual-TLS handshakes over loopback,
// one after the other: each op dials a new TCP connection, runs the
// handshake with ECDSA P-256 certificates (TLS 1.3; the server's
// ServerConfig with RequireAndVerifyClientCert, the client's ClientConfig
// verifying the chain by hand and calling verifyPeer) and reads one byte
// the server writes once it has verified the client, so both sides have
// finished. Server and client share this process and its cores; it
// reports handshakes/s.
func BenchmarkHandshake(b *testing.B) {
	dir := b.TempDir()
	ca := mustCA(b, dir, "a")
	srvCert := mustIssue(b, ca, dir, "server", testcerts.Loopback(testcerts.Options{URIs: []string{serverID}}))
	cliCert := mustIssue(b, ca, dir, "client", testcerts.Options{URIs: []string{clientID}})
	srv := mustNew(b, filesConfig(srvCert, ca))
	cli := mustNew(b, filesConfig(cliCert, ca))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srvTLS := srv.ServerConfig(tls.RequireAndVerifyClientCert)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tc := tls.Server(c, srvTLS)
				if tc.Handshake() == nil {
					tc.Write([]byte{1}) //nolint:errcheck // the client fails the benchmark if it gets no byte
				}
			})
		}
	})
	defer func() {
		ln.Close()
		wg.Wait()
	}()

	cliTLS := cli.ClientConfig((&peerRecorder{want: serverID}).verify)
	addr := ln.Addr().String()
	var one [1]byte
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		c, err := tls.Dial("tcp", addr, cliTLS)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one[:]); err != nil {
			b.Fatal(err)
		}
		c.Close()
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "handshakes/s")
}

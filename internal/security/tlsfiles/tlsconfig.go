package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
)

// nextProtos are the ALPN protocols both sides offer: "h2" for gRPC
// (grpc-go refuses a connection without it) and "http/1.1" for the REST
// endpoints. The server prefers h2.
var nextProtos = []string{"h2", "http/1.1"}

// errNoCert fails a server handshake when no certificate is configured.
var errNoCert = errors.New("tlsfiles: no certificate configured to serve")

// ServerConfig returns a config for a TLS server. Each new handshake uses
// the certificate and the client CA pool current at that moment (through
// GetConfigForClient), so a reload reaches new connections at once and
// never touches open ones. TLS 1.2 is the least version; ALPN offers h2
// and http/1.1.
//
// clientAuth is what is asked of clients: tls.RequireAndVerifyClientCert
// for mutual TLS, tls.VerifyClientCertIfGiven where some clients have no
// certificate (a health check), tls.NoClientCert for none. Client
// certificates are verified against the CA file's certificates; with no CA
// file, against an empty pool, so that every client certificate is
// refused rather than checked against the system roots (a public CA is no
// authority on who may talk to this server).
//
// Session tickets are disabled: a resumed session would skip verifying
// the client's certificate against the current CA pool. xDS connections
// are long-lived, so full handshakes cost little.
//
// Without a certificate configured (HasCert false) every handshake fails.
// The returned config may be modified by the caller (grpc-go's
// credentials.NewTLS clones it) but not the configs its
// GetConfigForClient returns, which are shared by handshakes.
func (f *Files) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	// The per-handshake config is built once per material: handshakes
	// share it until a reload.
	type cached struct {
		pair *pair
		ca   *caSet
		cfg  *tls.Config
	}
	var cache atomic.Pointer[cached]
	emptyPool := x509.NewCertPool()
	return &tls.Config{
		MinVersion:             tls.VersionTLS12,
		NextProtos:             nextProtos,
		ClientAuth:             clientAuth,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			p, ca := f.pair.Load(), f.ca.Load()
			if p == nil {
				return nil, errNoCert
			}
			if c := cache.Load(); c != nil && c.pair == p && c.ca == ca {
				return c.cfg, nil
			}
			cfg := &tls.Config{
				MinVersion:             tls.VersionTLS12,
				NextProtos:             nextProtos,
				Certificates:           []tls.Certificate{*p.cert},
				ClientAuth:             clientAuth,
				ClientCAs:              emptyPool,
				SessionTicketsDisabled: true,
			}
			if ca != nil {
				cfg.ClientCAs = ca.pool
			}
			cache.Store(&cached{pair: p, ca: ca, cfg: cfg})
			return cfg, nil
		},
	}
}

// ClientConfig returns a config for a TLS client. It presents the current
// certificate, if one is configured (GetClientCertificate, asked at each
// handshake).
//
// With a CA file, it verifies the server's chain against the current CA
// pool by hand (InsecureSkipVerify with VerifyConnection), for the server
// certificate's ExtKeyUsage serverAuth and with no host name check: peers
// are dialled by IP and recognised by their identity, which verifyPeer
// checks. Because crypto/tls did not verify the chain itself,
// ConnectionState.VerifiedChains stays empty and PeerIdentity reports
// false on such a connection.
//
// Without a CA file, crypto/tls verifies the server as usual, against the
// system roots and for the host name dialled (ServerName), and
// VerifiedChains is filled.
//
// Either way, once the chain is verified, verifyPeer (if not nil) is
// called with the server's leaf certificate; an error from it fails the
// handshake. It is called concurrently by concurrent handshakes and
// should not block. The returned config is the caller's to modify.
func (f *Files) ClientConfig(verifyPeer func(leaf *x509.Certificate) error) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
	}
	if f.HasCert() {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.pair.Load().cert, nil
		}
	}
	if !f.HasCA() {
		if verifyPeer != nil {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("tlsfiles: the server sent no certificate")
				}
				return verifyPeer(cs.PeerCertificates[0])
			}
		}
		return cfg
	}
	// Verified below, against the current pool and without a host name.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tlsfiles: the server sent no certificate")
		}
		opts := x509.VerifyOptions{
			Roots:         f.ca.Load().pool,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("tlsfiles: the server's certificate: %w", err)
		}
		if verifyPeer == nil {
			return nil
		}
		return verifyPeer(leaf)
	}
	return cfg
}

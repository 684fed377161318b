// Package testcerts makes the certificate authorities, certificates and
// keys that tests use for real TLS: ECDSA P-256 keys, PEM files in a
// directory the test owns. It is for tests only; nothing in the product
// imports it.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert in PEM; CertFile, once written, the file holding it.
	CertPEM  []byte
	CertFile string
}

// NewCA returns a self-signed CA named name, valid from an hour ago for a
// day, its certificate written to dir/name-ca.pem.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.CertFile = filepath.Join(dir, name+"-ca.pem")
	if err := os.WriteFile(ca.CertFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// Options says what a certificate holds. The zero value is a certificate
// for both client and server use, valid from an hour ago for a day, with
// no name at all.
type Options struct {
	// CommonName, DNSNames, IPs and URIs (such as SPIFFE ids,
	// "spiffe://example.org/ns/a/sa/b") are its names.
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string
	// NotBefore and NotAfter, when set, replace the default validity.
	NotBefore, NotAfter time.Time
}

// Cert is an issued certificate and its key, as PEM and as files.
type Cert struct {
	Cert     *x509.Certificate
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
}

// TLS returns the pair as a tls.Certificate.
func (c *Cert) TLS() (tls.Certificate, error) {
	return tls.X509KeyPair(c.CertPEM, c.KeyPEM)
}

// Issue issues a certificate with opts, written to dir/name.pem and its
// key to dir/name-key.pem.
func (ca *CA) Issue(dir, name string, opts Options) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: opts.CommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     opts.DNSNames,
		IPAddresses:  opts.IPs,
	}
	if !opts.NotBefore.IsZero() {
		tmpl.NotBefore = opts.NotBefore
	}
	if !opts.NotAfter.IsZero() {
		tmpl.NotAfter = opts.NotAfter
	}
	for _, s := range opts.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("testcerts: URI %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &Cert{
		Cert:     cert,
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		CertFile: filepath.Join(dir, name+".pem"),
		KeyFile:  filepath.Join(dir, name+"-key.pem"),
	}
	if err := os.WriteFile(c.CertFile, c.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, c.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// Loopback is the names a server certificate for a test on this machine
// holds: localhost, 127.0.0.1 and ::1.
func Loopback(o Options) Options {
	o.DNSNames = append(o.DNSNames, "localhost")
	o.IPs = append(o.IPs, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	return o
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

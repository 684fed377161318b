package tlsfiles

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// pair is a loaded certificate and key: immutable once stored.
type pair struct {
	cert *tls.Certificate // Leaf set
	id   string           // Identity of cert.Leaf, "" if it has none
	// certSum and keySum are the hashes of the file contents it came from,
	// so Run reloads only when the content changes.
	certSum, keySum [sha256.Size]byte
}

// caSet is a loaded CA bundle: immutable once stored.
type caSet struct {
	pool *x509.CertPool
	n    int // certificates in pool
	sum  [sha256.Size]byte
}

// readFile reads the file of kind k, wording its errors for the user.
func (c Config) readFile(k kind) ([]byte, error) {
	path := [...]string{c.CertFile, c.KeyFile, c.CAFile}[k]
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file", c.fileName(k))
	}
	// The *PathError repeats the path; keep only its cause.
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, fmt.Errorf("%s: cannot read it: %w", c.fileName(k), err)
}

// loadPair reads and checks the certificate and key files. now is the
// time the leaf must be valid at.
func (c Config) loadPair(now time.Time) (*pair, error) {
	certPEM, certErr := c.readFile(certKind)
	keyPEM, keyErr := c.readFile(keyKind)
	return c.parsePair(certPEM, certErr, keyPEM, keyErr, now)
}

// parsePair checks certPEM and keyPEM, read with the errors certErr and
// keyErr, collecting every problem it can find: one file's problem does
// not hide the other's.
func (c Config) parsePair(certPEM []byte, certErr error, keyPEM []byte, keyErr error, now time.Time) (*pair, error) {
	errs := []error{certErr, keyErr}
	var ders [][]byte
	var certs []*x509.Certificate
	if certErr == nil {
		var err error
		if ders, certs, err = parseCerts(certPEM); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.fileName(certKind), err))
		}
	}
	var key crypto.Signer
	if keyErr == nil {
		var err error
		if key, err = parseKey(keyPEM); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.fileName(keyKind), err))
		}
	}
	var id string
	if len(certs) > 0 {
		leaf := certs[0]
		if err := checkValidity(leaf, now); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.fileName(certKind), err))
		}
		var err error
		id, err = Identity(leaf)
		if errors.Is(err, ErrNoIdentity) {
			// Not an error here: a server certificate need not name
			// anyone; a peer that checks identities will refuse it.
			id, err = "", nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.fileName(certKind), trimPkg(err)))
		}
		if key != nil && !samePublicKey(key, leaf) {
			// tls.X509KeyPair says "private key does not match public key";
			// say which files, and the likely cause.
			errs = append(errs, fmt.Errorf("%s: the private key does not match the certificate in %s "+
				"(replace both files together)", c.fileName(keyKind), c.fileName(certKind)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &pair{
		cert:    &tls.Certificate{Certificate: ders, PrivateKey: key, Leaf: certs[0]},
		id:      id,
		certSum: sha256.Sum256(certPEM),
		keySum:  sha256.Sum256(keyPEM),
	}, nil
}

// loadCA reads and checks the CA file.
func (c Config) loadCA() (*caSet, error) {
	b, err := c.readFile(caKind)
	if err != nil {
		return nil, err
	}
	return c.parseCA(b)
}

func (c Config) parseCA(b []byte) (*caSet, error) {
	_, certs, err := parseCerts(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.fileName(caKind), err)
	}
	pool := x509.NewCertPool()
	for _, cert := range certs {
		pool.AddCert(cert)
	}
	return &caSet{pool: pool, n: len(certs), sum: sha256.Sum256(b)}, nil
}

// parseCerts parses every CERTIFICATE block of b, in order. Other blocks
// are skipped (a bundle may carry comments or parameters), but a private
// key in a certificate file is an error: it was likely meant for the key
// file, and is a secret written where it should not be.
func parseCerts(b []byte) ([][]byte, []*x509.Certificate, error) {
	var ders [][]byte
	var certs []*x509.Certificate
	blocks := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		blocks++
		switch {
		case block.Type == "CERTIFICATE":
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
			}
			ders = append(ders, block.Bytes)
			certs = append(certs, cert)
		case strings.HasSuffix(block.Type, "PRIVATE KEY"):
			return nil, nil, fmt.Errorf("holds a %s, not a certificate", block.Type)
		}
	}
	switch {
	case blocks == 0:
		return nil, nil, errors.New("not PEM: no \"-----BEGIN\" block in it")
	case len(certs) == 0:
		return nil, nil, errors.New("no CERTIFICATE PEM block in it")
	}
	return ders, certs, nil
}

// parseKey parses the first private key block of b: PKCS #8, PKCS #1
// (RSA) or SEC 1 (EC), the forms tls.X509KeyPair takes.
func parseKey(b []byte) (crypto.Signer, error) {
	sawCert := false
	blocks := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		blocks++
		switch {
		case block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "":
			return nil, errors.New("the private key is encrypted; give it unencrypted")
		case block.Type == "PRIVATE KEY" || strings.HasSuffix(block.Type, " PRIVATE KEY"):
			return parseKeyDER(block.Bytes)
		case block.Type == "CERTIFICATE":
			sawCert = true
		}
	}
	switch {
	case blocks == 0:
		return nil, errors.New("not PEM: no \"-----BEGIN\" block in it")
	case sawCert:
		return nil, errors.New("holds a certificate, not a private key")
	}
	return nil, errors.New("no PRIVATE KEY PEM block in it")
}

func parseKeyDER(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		switch k := k.(type) {
		case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
			return k.(crypto.Signer), nil
		default:
			return nil, fmt.Errorf("private key of type %T is not supported for TLS", k)
		}
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("cannot parse the private key (PKCS #8, PKCS #1 or SEC 1 DER expected)")
}

// samePublicKey reports whether k is the private key of cert.
func samePublicKey(k crypto.Signer, cert *x509.Certificate) bool {
	// Every key type parseKeyDER returns has this method.
	pub, ok := k.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// checkValidity refuses a leaf not valid at now, saying when it was or
// will be.
func checkValidity(leaf *x509.Certificate, now time.Time) error {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("the certificate expired at %s (%s ago)",
			leaf.NotAfter.UTC().Format(time.RFC3339), now.Sub(leaf.NotAfter).Round(time.Second))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("the certificate is not valid until %s (in %s)",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotBefore.Sub(now).Round(time.Second))
	}
	return nil
}

// trimPkg drops the "tlsfiles: " prefix of an error of this package that
// follows a file name.
func trimPkg(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "tlsfiles: "); ok {
		return errors.New(s)
	}
	return err
}

package adminctl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// The flags of ReplicaTLS. Like every global flag, each is also
// LEGATION_<FLAG>.
const (
	flagTLSCA   = "tls-ca-file"
	flagTLSCert = "tls-cert-file"
	flagTLSKey  = "tls-key-file"
)

// ReplicaTLS is how xdsadmin talks to the replicas' HTTP port (members
// asks each replica's /readyz there): plain HTTP, or HTTPS checked against
// CAs of its own. It is apart from the etcd flags: the replicas' CA need
// not be etcd's. The zero value is plain HTTP.
type ReplicaTLS struct {
	// CAFile is the PEM file of the CAs that sign the replicas' serving
	// certificates (--tls-ca-file). Setting it turns HTTPS on. Only the
	// chain is checked, not a name: see TLSConfig.
	CAFile string
	// CertFile and KeyFile are the PEM files of a client certificate and
	// its key presented to the replicas (--tls-cert-file,
	// --tls-key-file): both or neither, and only with CAFile. A replica
	// with --client-ca-file checks it; its /debug/ pages want an admin
	// identity, /readyz none.
	CertFile, KeyFile string
}

// On reports whether xdsadmin talks to replicas over HTTPS.
func (r ReplicaTLS) On() bool { return r.CAFile != "" }

// Scheme is the URL scheme of the replicas' HTTP port: "https" or "http".
func (r ReplicaTLS) Scheme() string {
	if r.On() {
		return "https"
	}
	return "http"
}

func (r *ReplicaTLS) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&r.CAFile, flagTLSCA, r.CAFile,
		"PEM file of the CAs that sign the replicas' certificates; talk to replicas over HTTPS (the chain is checked, not the name: every certificate these CAs issue for servers is trusted)")
	fs.StringVar(&r.CertFile, flagTLSCert, r.CertFile,
		"PEM file of a client certificate presented to the replicas (e.g. an admin identity), with --tls-key-file and --tls-ca-file")
	fs.StringVar(&r.KeyFile, flagTLSKey, r.KeyFile, "PEM file of --tls-cert-file's private key")
}

// Validate checks the flags against each other, without reading a file.
func (r ReplicaTLS) Validate() error {
	switch {
	case r.CertFile != "" && r.KeyFile == "":
		return fmt.Errorf("--%s without --%s: a client certificate needs its private key", flagTLSCert, flagTLSKey)
	case r.KeyFile != "" && r.CertFile == "":
		return fmt.Errorf("--%s without --%s: a private key needs its client certificate", flagTLSKey, flagTLSCert)
	case r.CertFile != "" && r.CAFile == "":
		// Without it the replicas are asked over plain HTTP, where the
		// certificate would be silently unused.
		return fmt.Errorf("--%s without --%s: a client certificate is only presented over HTTPS, which needs the replicas' CA", flagTLSCert, flagTLSCA)
	}
	return nil
}

// TLSConfig reads the files and returns the client TLS configuration for
// the replicas, or nil for plain HTTP. Errors name the flag, the file and
// the problem: missing, unreadable, no PEM certificate or key, a key that
// is not the certificate's, or an expired certificate.
//
// The replica's certificate is checked by chain only, against CAFile's
// roots, for server use: not against the address dialled. Replicas are
// dialled by the IP they registered, and their certificates may carry no
// IP or DNS name at all, only a SPIFFE id (spiffe://...) as URI SAN, which
// crypto/tls's hostname check cannot accept. So the CA is what is trusted:
// any certificate it issued for server use passes as any replica. Use a CA
// that signs only Legation's replicas (or its intermediates). The standard
// check is turned off (InsecureSkipVerify) and done in VerifyConnection
// instead, which runs for every connection, resumed or not.
func (r ReplicaTLS) TLSConfig() (*tls.Config, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if !r.On() {
		return nil, nil
	}
	roots, err := loadCAFile(flagTLSCA, r.CAFile)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // the chain is verified in VerifyConnection; no name can be (see above)
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyChain(cs, roots)
		},
	}
	if r.CertFile != "" {
		pair, err := loadKeyPair(r.CertFile, r.KeyFile, time.Now())
		if err != nil {
			return nil, err
		}
		// Always present it, rather than through Certificates, which
		// crypto/tls leaves out when the server's list of acceptable CAs
		// does not name its issuer: the replica's refusal then says more
		// than a missing certificate.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair, nil }
	}
	return tc, nil
}

// untrustedReplicaError is a replica certificate that --tls-ca-file's CAs
// did not sign, or that is expired or not for servers.
type untrustedReplicaError struct {
	issuer string // the leaf's issuer, which says which CA would verify it
	err    error  // x509's reason; nil: no certificate
}

// Error is short, for members' HEALTH column: the operator knows the file.
func (e *untrustedReplicaError) Error() string {
	var ua x509.UnknownAuthorityError
	switch {
	case e.err == nil:
		return "it presented no certificate"
	case errors.As(e.err, &ua):
		return fmt.Sprintf("its certificate, issued by %q, is not signed by a CA of --%s", e.issuer, flagTLSCA)
	}
	return fmt.Sprintf("its certificate, issued by %q, does not verify against --%s: %v", e.issuer, flagTLSCA, e.err)
}

func (e *untrustedReplicaError) Unwrap() error { return e.err }

// verifyChain checks the server's certificate chain against roots, for
// server use, with no name: see ReplicaTLS.TLSConfig.
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return &untrustedReplicaError{}
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return &untrustedReplicaError{issuer: leaf.Issuer.String(), err: err}
	}
	return nil
}

// The file reading below is as package etcdconn reads the etcd flags'
// files, with these flags' names.

// readFlagFile reads a file a flag names; its error names both and says
// what is wrong.
func readFlagFile(flag, file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		return b, nil
	}
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("--%s %s: no such file", flag, file)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("--%s %s: cannot read it: %w", flag, file, pe.Err)
	}
	return nil, fmt.Errorf("--%s %s: %w", flag, file, err)
}

// parsePEMCerts returns the certificates of the PEM blocks "CERTIFICATE"
// in b, at least one.
func parsePEMCerts(flag, file string, b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: certificate %d: %w", flag, file, len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("--%s %s: no PEM certificate in it (want a -----BEGIN CERTIFICATE----- block)", flag, file)
	}
	return certs, nil
}

// loadCAFile reads a file of CA certificates.
func loadCAFile(flag, file string) (*x509.CertPool, error) {
	b, err := readFlagFile(flag, file)
	if err != nil {
		return nil, err
	}
	certs, err := parsePEMCerts(flag, file, b)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// loadKeyPair reads and checks --tls-cert-file and --tls-key-file, as
// valid at now.
func loadKeyPair(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	certPEM, err := readFlagFile(flagTLSCert, certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFlagFile(flagTLSKey, keyFile)
	if err != nil {
		return nil, err
	}
	certs, err := parsePEMCerts(flagTLSCert, certFile, certPEM)
	if err != nil {
		return nil, err
	}
	if !hasPEMKey(keyPEM) {
		return nil, fmt.Errorf("--%s %s: no PEM private key in it (want a -----BEGIN ... PRIVATE KEY----- block)", flagTLSKey, keyFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("--%s %s is not the key of --%s %s: %w", flagTLSKey, keyFile, flagTLSCert, certFile, err)
		}
		return nil, fmt.Errorf("--%s %s with --%s %s: %w", flagTLSCert, certFile, flagTLSKey, keyFile, err)
	}
	leaf := certs[0]
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("--%s %s: expired at %s", flagTLSCert, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("--%s %s: not valid before %s", flagTLSCert, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	pair.Leaf = leaf
	return &pair, nil
}

func hasPEMKey(b []byte) bool {
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return false
		}
		if strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			return true
		}
	}
}

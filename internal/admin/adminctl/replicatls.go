package adminctl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/legation-io/legation/internal/security/tlsfiles"
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
		"members only: PEM file of the CAs that sign the replicas' certificates; talk to replicas over HTTPS (the chain is checked, not the name: every certificate these CAs issue for servers is trusted, so use CAs that sign only replicas)")
	fs.StringVar(&r.CertFile, flagTLSCert, r.CertFile,
		"members only: PEM file of a client certificate presented to the replicas (e.g. an admin identity), with --tls-key-file and --tls-ca-file")
	fs.StringVar(&r.KeyFile, flagTLSKey, r.KeyFile, "members only: PEM file of --tls-cert-file's private key")
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
	f, err := tlsfiles.New(tlsfiles.Config{CertFile: r.CertFile, KeyFile: r.KeyFile, CAFile: r.CAFile, Flag: "--tls"})
	if err != nil {
		return nil, err
	}
	// tlsfiles verifies the chain against the CAs, for server use, with
	// no name (see above), and presents the client certificate, if any,
	// whatever CAs the replica says it accepts: its refusal then says
	// more than a missing certificate. Its verdict is put in the words of
	// members' HEALTH column.
	tc := f.ClientConfig(nil)
	verify := tc.VerifyConnection
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		err := verify(cs)
		switch {
		case err == nil:
			return nil
		case len(cs.PeerCertificates) == 0:
			return &untrustedReplicaError{}
		}
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // x509's reason, without tlsfiles' words
		}
		return &untrustedReplicaError{issuer: cs.PeerCertificates[0].Issuer.String(), err: err}
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

package adminctl

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// The files cert issue writes, named as in a kubernetes.io/tls Secret.
const (
	certFile   = "tls.crt"
	keyFile    = "tls.key"
	caCertFile = "ca.crt"
)

type certIssueFlags struct {
	caCert, caKey string
	spiffeID, cn  string
	dns           []string
	ips           []net.IP
	days          int
	server        bool
	outDir        string
}

func (a *app) certCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Issue certificates from a CA of your own (the Helm chart's, say)",
		Long: `cert works with certificates and needs no etcd. Its one subcommand,
issue, signs a certificate with a CA's certificate and key: an Envoy's or
a proxyless gRPC client's client certificate, or a replica's.`,
		Example: `  xdsadmin cert issue --ca-cert ca.crt --ca-key ca.key --spiffe-id spiffe://example.org/ns/edge/envoy --out-dir envoy-certs`,
		Args:    exactArgs(0),
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.certIssueCommand())
	return cmd
}

func (a *app) certIssueCommand() *cobra.Command {
	var f certIssueFlags
	cmd := &cobra.Command{
		Use:   "issue",
		Short: "Sign a new key's certificate with a CA's certificate and key",
		Long: `issue makes a new ECDSA P-256 key and a certificate for it signed by the
CA of --ca-cert and --ca-key, and writes them to --out-dir as tls.crt (the
certificate), tls.key (the key, mode 0600) and ca.crt (the CA's
certificate), the names of a kubernetes.io/tls Secret; files of those
names are replaced.

The certificate's identity, as replicas read it (see
docs/operations/authorization.md), is its SPIFFE ID (--spiffe-id, a URI SAN), else its
first DNS name (--dns), else its CommonName (--cn): give at least one. It
has the client authentication key usage, and with --server the server
one too: a replica's certificate needs both (replicas relay to each
other over mTLS), an Envoy's only the first.

The Helm chart's replicas run it at start to get their certificate from
the chart's CA; the same CA's Secret lets you issue your Envoys'.`,
		Example: `  # An Envoy's client certificate from the Helm chart's CA (Secret legation-ca:
  # kubectl -n legation get secret legation-ca -o jsonpath='{.data.tls\.crt}' | base64 -d > ca.crt,
  # and the same with tls\.key into ca.key)
  xdsadmin cert issue --ca-cert ca.crt --ca-key ca.key \
    --spiffe-id spiffe://cluster.local/ns/edge/envoy --out-dir envoy-certs
  # A replica's certificate, with its DNS names
  xdsadmin cert issue --ca-cert ca.crt --ca-key ca.key --server \
    --spiffe-id spiffe://cluster.local/ns/legation/legation/replica \
    --dns legation-xds.legation.svc --ip 10.1.2.3 --out-dir /etc/legation/tls`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runCertIssue(f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.caCert, "ca-cert", "", "the CA's certificate, PEM (required)")
	fl.StringVar(&f.caKey, "ca-key", "", "the CA's private key, PEM: PKCS #1, SEC 1 or PKCS #8 (required)")
	fl.StringVar(&f.spiffeID, "spiffe-id", "", "the SPIFFE ID, spiffe://TRUST_DOMAIN/PATH, as a URI SAN")
	fl.StringSliceVar(&f.dns, "dns", nil, "DNS names (SANs), comma separated")
	fl.IPSliceVar(&f.ips, "ip", nil, "IP addresses (SANs), comma separated")
	fl.StringVar(&f.cn, "cn", "", "the Subject CommonName")
	fl.IntVar(&f.days, "days", 365, "days of validity (at most until the CA expires)")
	fl.BoolVar(&f.server, "server", false, "add the server authentication key usage (a replica's certificate)")
	fl.StringVar(&f.outDir, "out-dir", "", "the directory to write tls.crt, tls.key and ca.crt to, created if missing (required)")
	return cmd
}

// validate checks the flags before any file is read.
func (f certIssueFlags) validate() error {
	switch {
	case f.caCert == "" || f.caKey == "":
		return errors.New("--ca-cert and --ca-key: both are required")
	case f.outDir == "":
		return errors.New("--out-dir: required")
	case f.spiffeID == "" && len(f.dns) == 0 && f.cn == "":
		return errors.New("the certificate needs an identity: set --spiffe-id, --dns or --cn")
	case f.days < 1:
		return fmt.Errorf("--days %d: must be at least 1", f.days)
	}
	if f.spiffeID != "" {
		if err := tlsfiles.ValidateSPIFFE(f.spiffeID); err != nil {
			return fmt.Errorf("--spiffe-id: %w", err)
		}
	}
	return nil
}

func (a *app) runCertIssue(f certIssueFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	ca, caPEM, err := readCACert(f.caCert)
	if err != nil {
		return err
	}
	caKey, err := readCAKey(f.caKey, ca)
	if err != nil {
		return err
	}
	certPEM, keyPEM, notAfter, err := issueCert(f, ca, caKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.outDir, 0o755); err != nil {
		return fmt.Errorf("--out-dir: %w", err)
	}
	for _, w := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{keyFile, keyPEM, 0o600}, {certFile, certPEM, 0o644}, {caCertFile, caPEM, 0o644}} {
		if err := writeFileAtomic(filepath.Join(f.outDir, w.name), w.data, w.mode); err != nil {
			return fmt.Errorf("--out-dir: %w", err)
		}
	}
	_, err = fmt.Fprintf(a.out, "issued %s (key %s, CA %s), valid until %s\n", filepath.Join(f.outDir, certFile),
		filepath.Join(f.outDir, keyFile), filepath.Join(f.outDir, caCertFile), notAfter.Format(time.RFC3339))
	return err
}

// readCACert reads a CA certificate: the first PEM certificate of file,
// which must be a CA's. It returns the file's content too, for ca.crt.
func readCACert(file string) (*x509.Certificate, []byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-cert: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("--ca-cert %s: no PEM CERTIFICATE block", file)
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-cert %s: %w", file, err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("--ca-cert %s: %q is not a CA certificate", file, ca.Subject.String())
	}
	return ca, pem.EncodeToMemory(block), nil
}

// readCAKey reads the private key of file, which must be ca's.
func readCAKey(file string, ca *x509.Certificate) (crypto.Signer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--ca-key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("--ca-key %s: no PEM block", file)
	}
	var key any
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("--ca-key %s: PEM block %q: want a private key", file, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("--ca-key %s: %w", file, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("--ca-key %s: %T cannot sign", file, key)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, fmt.Errorf("--ca-key %s is not the key of --ca-cert's certificate", file)
	}
	return signer, nil
}

// issueCert makes a key and its certificate signed by ca, valid from a
// minute ago (clocks differ) for f.days, or until ca expires if sooner.
func issueCert(f certIssueFlags, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, notAfter time.Time, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now := time.Now()
	notAfter = now.AddDate(0, 0, f.days)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: f.cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     f.dns,
		IPAddresses:  f.ips,
	}
	if f.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if f.spiffeID != "" {
		u, err := url.Parse(f.spiffeID)
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("--spiffe-id: %w", err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("sign the certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), notAfter, nil
}

// writeFileAtomic replaces name with data: a temporary file of the same
// directory renamed over it, so that a replica re-reading its files never
// sees half of one.
func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	// Gone after the rename; only a failure leaves it to remove.
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

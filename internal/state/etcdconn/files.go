package etcdconn

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// readFile reads a file a flag names; its error names both and says what
// is wrong (missing, unreadable) without repeating the path.
func readFile(flag, file string) ([]byte, error) {
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

// parseCerts returns the certificates of the PEM blocks "CERTIFICATE" in b.
func parseCerts(flag, file string, b []byte) ([]*x509.Certificate, error) {
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

// loadCAs reads --etcd-cacert.
func loadCAs(file string) (*x509.CertPool, error) {
	b, err := readFile(FlagCACert, file)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(FlagCACert, file, b)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// loadPair reads and checks a client certificate and its key, as valid at
// now.
func loadPair(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	certPEM, err := readFile(FlagCert, certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile(FlagKey, keyFile)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(FlagCert, certFile, certPEM)
	if err != nil {
		return nil, err
	}
	if !hasKeyBlock(keyPEM) {
		return nil, fmt.Errorf("--%s %s: no PEM private key in it (want a -----BEGIN ... PRIVATE KEY----- block)", FlagKey, keyFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("--%s %s is not the key of --%s %s: %w", FlagKey, keyFile, FlagCert, certFile, err)
		}
		return nil, fmt.Errorf("--%s %s with --%s %s: %w", FlagCert, certFile, FlagKey, keyFile, err)
	}
	leaf := certs[0]
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("--%s %s: expired at %s", FlagCert, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("--%s %s: not valid before %s", FlagCert, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	pair.Leaf = leaf
	return &pair, nil
}

func hasKeyBlock(b []byte) bool {
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

// stamp tells one version of a file from another: rotation tools replace
// the file (or the symlink to it), which changes its modification time or
// size. The zero stamp is a file that cannot be stat'ed.
type stamp struct {
	mod  time.Time
	size int64
}

func stampOf(file string) stamp {
	fi, err := os.Stat(file) // follows symlinks, as Kubernetes' secret volumes use
	if err != nil {
		return stamp{}
	}
	return stamp{mod: fi.ModTime(), size: fi.Size()}
}

// keyPair is a client certificate and key read again when their files
// change. Its get is the tls.Config's GetClientCertificate: called by the
// TLS handshake of every new connection to etcd, from any goroutine; it
// costs two stats when nothing changed.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu  sync.Mutex // guards the fields below; held across the reload's reads
	at  [2]stamp   // the files' stamps when cur was read
	cur *tls.Certificate
	bad [2]stamp // the stamps of the last files that could not be used, warned about once
}

// newKeyPair reads the pair now: an error here stops the start.
func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &keyPair{certFile: certFile, keyFile: keyFile, log: log}
	at := k.stamps()
	cur, err := loadPair(certFile, keyFile, time.Now())
	if err != nil {
		return nil, err
	}
	k.at, k.cur = at, cur
	return k, nil
}

func (k *keyPair) stamps() [2]stamp { return [2]stamp{stampOf(k.certFile), stampOf(k.keyFile)} }

// get returns the pair, first reading the files again if they changed
// since. Files that cannot be used (half written, a key that is not the
// certificate's, expired) leave the last good pair in use, with one
// warning per such version of the files.
func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	at := k.stamps()
	k.mu.Lock()
	if at == k.at {
		cur := k.cur
		k.mu.Unlock()
		return cur, nil
	}
	next, err := loadPair(k.certFile, k.keyFile, time.Now())
	warn := false
	if err == nil {
		k.at, k.cur = at, next
	} else if at != k.bad {
		k.bad, warn = at, true
	}
	cur := k.cur
	k.mu.Unlock()
	switch {
	case err == nil:
		k.log.Info("etcd client certificate files changed: using the new certificate for new connections",
			"cert", k.certFile, "subject", cur.Leaf.Subject.String(), "not_after", cur.Leaf.NotAfter)
	case warn:
		k.log.Warn("etcd client certificate files changed but cannot be used: keeping the last good certificate", "err", err)
	}
	return cur, nil
}

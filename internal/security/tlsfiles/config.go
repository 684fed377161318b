package tlsfiles

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultInterval is how often Run looks at the files when
// Config.Interval is zero.
const DefaultInterval = time.Second

// Config says which files hold the TLS material and how to watch them.
// Every field may be left zero; a zero Config is a client that presents no
// certificate and verifies servers against the system roots.
type Config struct {
	// CertFile and KeyFile hold the certificate (leaf first, then any
	// intermediates) and its private key, PEM. Both or neither; neither
	// means no certificate: HasCert is false, a server built on it fails
	// every handshake and a client presents none.
	CertFile, KeyFile string
	// CAFile holds one or more CA certificates, PEM. For a server, the CAs
	// that client certificates must chain to; for a client, the roots that
	// verify the server. Optional: see ServerConfig and ClientConfig for
	// what its absence means.
	CAFile string
	// Interval is how often Run reads the files; zero means
	// DefaultInterval.
	Interval time.Duration
	// Logger receives the reloads (Info) and the bad contents Run keeps
	// away (Warn). Nil discards.
	Logger *slog.Logger
	// Flag is the prefix of the command-line flags that name the files, so
	// that errors say what the user typed: "--tls" makes errors read
	// "--tls-cert-file /x/y.pem: ...", and likewise --tls-key-file and
	// --tls-ca-file. Empty: errors name just the file's path.
	Flag string
	// CAFlag, if set, names CAFile's flag in errors instead of Flag's
	// "-ca-file" form (xds-node's --client-ca-file).
	CAFlag string
}

// DefaultConfig is a Config with its defaults spelled out: no files (set
// them), Interval DefaultInterval, no logger (discard), no flag prefix.
func DefaultConfig() Config {
	return Config{Interval: DefaultInterval}
}

// Validate checks the fields against each other without reading any file:
// CertFile and KeyFile are both set or both empty, and Interval is not
// negative. New calls it.
func (c Config) Validate() error {
	var errs []error
	prefix := ""
	if c.Flag == "" {
		prefix = "tlsfiles: "
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		errs = append(errs, fmt.Errorf("%s%s is set but %s is not: give both or neither",
			prefix, c.flagName(certKind), c.flagName(keyKind)))
	case c.CertFile == "" && c.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s%s is set but %s is not: give both or neither",
			prefix, c.flagName(keyKind), c.flagName(certKind)))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("tlsfiles: Interval %v is negative", c.Interval))
	}
	return errors.Join(errs...)
}

// kind is one of the three files.
type kind int

const (
	certKind kind = iota
	keyKind
	caKind
)

// flagName names the setting for kind: the flag when Config.Flag is set,
// else the Config field.
func (c Config) flagName(k kind) string {
	if k == caKind && c.CAFlag != "" {
		return c.CAFlag
	}
	suffix := [...]string{"-cert-file", "-key-file", "-ca-file"}[k]
	if c.Flag != "" {
		return c.Flag + suffix
	}
	return [...]string{"CertFile", "KeyFile", "CAFile"}[k]
}

// fileName is how errors about the file of kind begin: "--tls-cert-file
// /x/y.pem" with a Flag, else just the path.
func (c Config) fileName(k kind) string {
	path := [...]string{c.CertFile, c.KeyFile, c.CAFile}[k]
	if c.Flag != "" || (k == caKind && c.CAFlag != "") {
		return c.flagName(k) + " " + path
	}
	return path
}

func (c Config) interval() time.Duration {
	if c.Interval == 0 {
		return DefaultInterval
	}
	return c.Interval
}

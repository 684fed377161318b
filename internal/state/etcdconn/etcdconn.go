package etcdconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The flags this package reads, for errors and docs. Both binaries also
// take each from the environment as LEGATION_<FLAG>: the password as
// PasswordEnv.
const (
	FlagEndpoints = "etcd-endpoints"
	FlagCACert    = "etcd-cacert"
	FlagCert      = "etcd-cert"
	FlagKey       = "etcd-key"
	FlagUsername  = "etcd-username"
	// FlagPassword is refused: a password on the command line shows in
	// the process list (/proc/PID/cmdline) and shell history. The flag
	// exists, hidden, to say so.
	FlagPassword = "etcd-password"
	// FlagPasswordFile names a file holding the password.
	FlagPasswordFile = "etcd-password-file"
	// PasswordEnv is the environment variable holding the password, the
	// other way to give it.
	PasswordEnv = "LEGATION_ETCD_PASSWORD"
)

// errPasswordArg is Validate's error for --etcd-password.
var errPasswordArg = fmt.Errorf("--%s: refused: a password on the command line shows in the process list and shell history; "+
	"set %s or --%s (a file holding it) instead", FlagPassword, PasswordEnv, FlagPasswordFile)

// Security is how a client proves who it is to etcd and checks etcd's
// certificate: the TLS and authentication flags. The zero value is plain
// text without authentication. Its String and LogValue never show the
// password.
type Security struct {
	// CACert is the PEM file of the CAs that sign etcd's server
	// certificates (--etcd-cacert). Setting it turns TLS on. Empty with
	// TLS on: the system's roots. Read once, at start.
	CACert string
	// Cert and Key are the PEM files of the client certificate and its
	// private key presented to etcd (--etcd-cert, --etcd-key): both or
	// neither. Setting them turns TLS on. With etcd's --client-cert-auth,
	// the certificate's Subject CN is the etcd user when no username is
	// given. Read again, for new connections, when either file changes.
	Cert, Key string
	// Username and Password are an etcd user's: both or neither. They
	// take precedence over the certificate's CN as etcd's user. Username
	// is --etcd-username; Password comes from LEGATION_ETCD_PASSWORD or
	// PasswordFile (LoadPassword), never from the command line. Only over
	// TLS: Validate refuses a password over plain text.
	Username, Password string
	// PasswordFile (--etcd-password-file) holds Password on its first
	// line; LoadPassword reads it.
	PasswordFile string

	// passwordArg records that --etcd-password was given: Validate
	// refuses it. Its value is dropped at once.
	passwordArg bool
}

// TLSFlags reports whether a TLS flag is set.
func (s Security) TLSFlags() bool { return s.CACert != "" || s.Cert != "" || s.Key != "" }

// IsZero reports whether no flag is set.
func (s Security) IsZero() bool { return s == Security{} }

// SetFlags names the flags set, as "--etcd-cacert, --etcd-username", and
// the password's variable, LEGATION_ETCD_PASSWORD, when a password is set.
func (s Security) SetFlags() string {
	var names []string
	for _, f := range []struct{ name, v string }{
		{"--" + FlagCACert, s.CACert}, {"--" + FlagCert, s.Cert}, {"--" + FlagKey, s.Key}, {"--" + FlagUsername, s.Username},
		{"--" + FlagPasswordFile, s.PasswordFile}, {PasswordEnv, s.Password},
	} {
		if f.v != "" {
			names = append(names, f.name)
		}
	}
	return strings.Join(names, ", ")
}

// String describes s with the password hidden.
func (s Security) String() string {
	return fmt.Sprintf("cacert=%q cert=%q key=%q username=%q password=%s password_file=%q",
		s.CACert, s.Cert, s.Key, s.Username, redact(s.Password), s.PasswordFile)
}

// LogValue is s for slog, with the password hidden.
func (s Security) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("cacert", s.CACert), slog.String("cert", s.Cert), slog.String("key", s.Key),
		slog.String("username", s.Username), slog.String("password", redact(s.Password)),
		slog.String("password_file", s.PasswordFile))
}

func redact(p string) string {
	if p == "" {
		return `""`
	}
	return "[redacted]"
}

// AddFlags adds the flags to fs, bound to s's fields, with s's values as
// defaults: --etcd-cacert, --etcd-cert, --etcd-key, --etcd-username,
// --etcd-password-file, and --etcd-password, hidden, which takes no
// password but makes Validate fail with an error saying where to put it.
// The password itself comes from LoadPassword.
func (s *Security) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.CACert, FlagCACert, s.CACert,
		"PEM file of the CA certificates that sign etcd's server certificates; turns TLS on (empty with TLS on: the system's roots)")
	fs.StringVar(&s.Cert, FlagCert, s.Cert,
		"PEM file of the client certificate presented to etcd, with --etcd-key; turns TLS on; read again when it changes")
	fs.StringVar(&s.Key, FlagKey, s.Key, "PEM file of --etcd-cert's private key")
	fs.StringVar(&s.Username, FlagUsername, s.Username,
		"etcd user, its password in "+PasswordEnv+" or --"+FlagPasswordFile+" (without: with a client certificate, etcd takes its CN as the user)")
	fs.StringVar(&s.PasswordFile, FlagPasswordFile, s.PasswordFile,
		"file holding --etcd-username's password (its first line); or set "+PasswordEnv+" (not both); never on the command line, nor over plain-text etcd")
	fs.Var(passwordArg{&s.passwordArg}, FlagPassword, "refused: use "+PasswordEnv+" or --"+FlagPasswordFile)
	_ = fs.MarkHidden(FlagPassword) // it exists only to be refused clearly
}

// passwordArg is --etcd-password's value: it records that the flag was
// given and drops the password, which appears nowhere, not even in the
// error.
type passwordArg struct{ given *bool }

func (p passwordArg) String() string { return "" }
func (p passwordArg) Type() string   { return "string" }
func (p passwordArg) Set(string) error {
	*p.given = true
	return nil
}

// LoadPassword sets Password from PasswordFile (its first line) or from
// the environment variable PasswordEnv, read with lookupEnv; both set is
// an error, and neither leaves Password as it is. The binaries call it
// after parsing their flags; their LEGATION_* flag variables skip
// --etcd-password, whose variable this reads.
func (s *Security) LoadPassword(lookupEnv func(string) (string, bool)) error {
	env, _ := lookupEnv(PasswordEnv)
	switch {
	case s.PasswordFile != "" && env != "":
		return fmt.Errorf("--%s and %s are both set: set one", FlagPasswordFile, PasswordEnv)
	case env != "":
		s.Password = env
	case s.PasswordFile != "":
		b, err := readFile(FlagPasswordFile, s.PasswordFile)
		if err != nil {
			return err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if line = strings.TrimSuffix(line, "\r"); line == "" {
			return fmt.Errorf("--%s %s: its first line is empty; want the password", FlagPasswordFile, s.PasswordFile)
		}
		s.Password = line
	}
	return nil
}

// Options are everything needed to reach etcd but timeouts: the endpoints
// and Security.
type Options struct {
	// Endpoints are etcd's client URLs: host:port, http://host:port or
	// https://host:port, all http:// or all https:// (host:port goes
	// either way: TLS when a TLS flag is set).
	Endpoints []string
	Security
	// Logger gets a line when rotated client certificate files are
	// picked up, or cannot be. Nil: discard.
	Logger *slog.Logger
}

// String describes o with the password hidden (Security's String would
// otherwise stand for all of o).
func (o Options) String() string {
	return fmt.Sprintf("endpoints=%q %s", o.Endpoints, o.Security)
}

// LogValue is o for slog, with the password hidden.
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("endpoints", o.Endpoints), slog.Any("security", o.Security))
}

// UseTLS reports whether the connection to etcd is TLS: a TLS flag is
// set or an endpoint is https://.
func (o *Options) UseTLS() bool {
	if o.TLSFlags() {
		return true
	}
	for _, ep := range o.Endpoints {
		if scheme(ep) == "https" {
			return true
		}
	}
	return false
}

// Validate checks the endpoints and the flags against each other, without
// reading any file, and reports every problem, one a line, each naming
// its flag. It does not require an endpoint: a caller for which none
// means something (xds-node's dev mode) checks that itself.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var firstHTTP, firstHTTPS string
	for _, ep := range o.Endpoints {
		if err := CheckEndpoint(ep); err != nil {
			errs = append(errs, err)
			continue
		}
		switch scheme(ep) {
		case "http":
			if firstHTTP == "" {
				firstHTTP = ep
			}
		case "https":
			if firstHTTPS == "" {
				firstHTTPS = ep
			}
		}
	}
	if firstHTTP != "" && firstHTTPS != "" {
		add("--%s: %q is http:// (plain text) and %q is https:// (TLS): all must be one or the other", FlagEndpoints, firstHTTP, firstHTTPS)
	}
	if o.TLSFlags() && firstHTTP != "" {
		var tlsFlags []string
		for _, f := range []struct{ name, v string }{{FlagCACert, o.CACert}, {FlagCert, o.Cert}, {FlagKey, o.Key}} {
			if f.v != "" {
				tlsFlags = append(tlsFlags, "--"+f.name)
			}
		}
		add("%s (TLS) with --%s %q, which is http:// (plain text): use https:// or host:port", strings.Join(tlsFlags, ", "), FlagEndpoints, firstHTTP)
	}
	switch {
	case o.Cert != "" && o.Key == "":
		add("--%s without --%s: a client certificate needs its private key", FlagCert, FlagKey)
	case o.Key != "" && o.Cert == "":
		add("--%s without --%s: a private key needs its client certificate", FlagKey, FlagCert)
	}
	if o.passwordArg {
		errs = append(errs, errPasswordArg)
	}
	switch {
	case o.Username != "" && o.Password == "":
		add("--%s without a password (%s or --%s)", FlagUsername, PasswordEnv, FlagPasswordFile)
	case o.Password != "" && o.Username == "":
		add("a password (%s or --%s) without --%s", PasswordEnv, FlagPasswordFile, FlagUsername)
	}
	if o.Password != "" && !o.UseTLS() {
		ep := "none"
		if len(o.Endpoints) > 0 {
			ep = o.Endpoints[0]
		}
		add("a password (--%s) over plain text (--%s %q, no TLS flag) would cross the network in clear: use https:// endpoints or --%s",
			FlagUsername, FlagEndpoints, ep, FlagCACert)
	}
	if strings.Contains(o.Username, ":") {
		add("--%s %q: etcd user names cannot hold ':'", FlagUsername, o.Username)
	}
	return errors.Join(errs...)
}

// CheckEndpoint checks one etcd endpoint: host:port, http://host:port or
// https://host:port. Its error names --etcd-endpoints.
func CheckEndpoint(ep string) error {
	if !strings.Contains(ep, "://") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			return fmt.Errorf("--%s %q: %w (want host:port, http://host:port or https://host:port)", FlagEndpoints, ep, err)
		}
		if host == "" {
			return fmt.Errorf("--%s %q: no host", FlagEndpoints, ep)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("--%s %q: bad port %q", FlagEndpoints, ep, port)
		}
		return nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", FlagEndpoints, ep, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Hostname() == "" {
			return fmt.Errorf("--%s %q: no host", FlagEndpoints, ep)
		}
		if u.User != nil {
			return fmt.Errorf("--%s: no user or password in an endpoint, please: use --%s and %s", FlagEndpoints, FlagUsername, PasswordEnv)
		}
		return nil
	}
	return fmt.Errorf("--%s %q: scheme %q: want http, https or none", FlagEndpoints, ep, u.Scheme)
}

// scheme is ep's scheme, "" for host:port.
func scheme(ep string) string {
	if s, _, ok := strings.Cut(ep, "://"); ok {
		return s
	}
	return ""
}

// ClientConfig validates o, checks the certificate files and returns a
// clientv3.Config with the endpoints, TLS and credentials set; the caller
// adds timeouts, keepalives and a logger. Errors name the flag, the file
// and the problem: missing, unreadable, not PEM, expired, or a key that is
// not the certificate's.
func (o *Options) ClientConfig() (clientv3.Config, error) {
	if err := o.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	cfg := clientv3.Config{
		Endpoints: o.Endpoints,
		Username:  o.Username,
		Password:  o.Password,
	}
	if !o.UseTLS() {
		return cfg, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CACert != "" {
		pool, err := loadCAs(o.CACert)
		if err != nil {
			return clientv3.Config{}, err
		}
		tc.RootCAs = pool
	}
	if o.Cert != "" {
		kp, err := newKeyPair(o.Cert, o.Key, o.Logger)
		if err != nil {
			return clientv3.Config{}, err
		}
		tc.GetClientCertificate = kp.get
	}
	cfg.TLS = tc
	return cfg, nil
}

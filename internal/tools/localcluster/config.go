package localcluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The ports, fixed: each process has an address of its own.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	// etcdMetricsPort serves a member's /health and /metrics in plain
	// HTTP when its clients are served over TLS (Config.EtcdTLS).
	etcdMetricsPort = 2381
	xdsPort         = 18000
	httpPort        = 18001
	gossipPort      = 7946
)

// Limits of Config's counts: members on .11 to .20, replicas on .21 up.
const (
	maxEtcdMembers = 10
	maxReplicas    = 200
)

// maxSocketPath is the longest path a Unix socket may have (sun_path holds
// 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Config shapes a cluster. Start from DefaultConfig: its zero value is not
// valid.
type Config struct {
	// Dir is the state directory: each process's log (NAME.log), etcd's
	// data (etcd-I.data), haproxy.cfg, HAProxy's admin socket
	// (haproxy.sock), the control socket (control.sock) and env, the
	// sourceable file of every address. Created if missing; kept by Down.
	// Unix sockets live in it, so its path must be short (about 90
	// bytes at most).
	Dir string
	// Net is the 127.0.N. prefix of every address, with its trailing dot:
	// HAProxy on .1, etcd member I on .(10+I), replica I on .(20+I).
	Net string
	// EtcdMembers is how many etcd members to run, 1 to 10. Zero: none;
	// then EtcdEndpoints names the etcd the replicas use.
	EtcdMembers int
	// EtcdEndpoints, host:port, is an etcd the cluster does not own, for
	// a cluster of replicas only (EtcdMembers zero). Empty: the members'.
	EtcdEndpoints []string
	// Replicas is how many xds-node replicas Up starts, up to 200.
	// AddReplica adds more. Zero, without HAProxy: etcd members only, for
	// tests that run replicas in-process (or add them later).
	Replicas int
	// HAProxy puts HAProxy in front of the replicas (round robin over
	// those whose /readyz is 200). False: clients dial replicas directly.
	HAProxy bool
	// NamePrefix prefixes the name of every process (etcd-I, replica-I,
	// haproxy), which is also its log's name, a replica's --name and a
	// member's --name: two clusters on one etcd need replica names of
	// their own. Letters, digits, '-', '_' and '.' only. Empty: none.
	NamePrefix string
	// EtcdBin is the etcd binary (Build makes one at the version go.mod
	// pins). Needed when EtcdMembers is not zero.
	EtcdBin string
	// XDSNodeBin is the xds-node binary.
	XDSNodeBin string
	// HAProxyBin is the haproxy binary. Empty: HAProxyPath's.
	HAProxyBin string
	// EtcdTLS, when not nil, has the members serve clients over TLS only
	// (https://, also in the endpoints given to replicas) with these
	// files; replicas then need XDSNodeFlags for etcd's TLS (--etcd-cacert,
	// and with ClientCertAuth --etcd-cert and --etcd-key). Nil: plain
	// http.
	EtcdTLS *EtcdTLS
	// Secure makes the cluster secure end to end (Security): etcd members
	// serve clients over TLS only, require client certificates and have
	// auth enabled with least-privilege roles (AddRoles); replicas serve
	// xDS over mTLS and HTTP over TLS, relay to each other over mTLS,
	// gossip encrypted, and reach etcd as legation-replica; the
	// authorization rules grant AdminIdentity admin and ClientIdentity
	// every node. The certificates and keys are made in Dir/pki when the
	// cluster first starts anything (Cluster.Security). The cluster's own
	// probes of the replicas (/readyz, /debug/) then use HTTPS with the
	// admin's certificate. It needs etcd members of its own (EtcdMembers)
	// and no EtcdTLS.
	Secure bool
	// EtcdProxies puts a fault proxy (internal/tools/faultnet) between each
	// replica and each etcd member, on the member's IP: the replica's
	// --etcd-endpoints are its proxies (EtcdProxies returns them), so a
	// chaos run can delay, drop or blackhole one replica's etcd
	// connections. Needs etcd members of its own.
	EtcdProxies bool
	// GossipProxies has each replica bind memberlist on port 7947 and
	// advertise a gossip proxy on its gossip address (port 7946, UDP and
	// TCP), through which every peer's gossip to it passes: Partition
	// drops gossip between two replicas.
	GossipProxies bool
	// EtcdFlags are extra flags for every etcd member, after the ones
	// this package sets.
	EtcdFlags []string
	// XDSNodeFlags are extra flags for every replica (e.g.
	// "--shutdown-timeout", "2s"), after the ones this package sets.
	XDSNodeFlags []string
	// Env is the environment of the processes. Nil: this process's. No
	// ETCD_* variable reaches etcd (it would take them for flags);
	// LEGATION_* ones reach the replicas for the flags not set here.
	Env []string
	// Timeout bounds each wait: a process coming up or going after
	// SIGKILL, HAProxy marking a replica up or down, a replica's ring or
	// view.
	Timeout time.Duration
	// Grace is how long a stopped process (SIGTERM) may take to exit
	// before it gets SIGKILL. Zero: SIGKILL at once.
	Grace time.Duration
	// Logger receives a line per process started, stopped or exited on
	// its own. Nil: discard.
	Logger *slog.Logger
}

// EtcdTLS are the TLS files of the etcd members' client URLs.
type EtcdTLS struct {
	// CertFile and KeyFile are the members' server certificate and key
	// (etcd's --cert-file, --key-file). The certificate must name the
	// member's address, Net + (10+I), as an IP SAN.
	CertFile, KeyFile string
	// TrustedCAFile is the CA file for client certificates (etcd's
	// --trusted-ca-file).
	TrustedCAFile string
	// ClientCertAuth requires clients to present a certificate the CA
	// signed (etcd's --client-cert-auth); with etcd's auth enabled, its CN
	// is then the user of requests without a token.
	ClientCertAuth bool
}

// EtcdAddr is the client address (host:port) of etcd member i (from 1) of
// a cluster on net, for certificates made before the cluster starts.
func EtcdAddr(net string, i int) string { return hostPort(etcdIP(net, i), etcdClientPort) }

// DefaultConfig is 3 etcd members, 3 replicas and HAProxy on 127.0.10.,
// with state in ${TMPDIR:-/tmp}/legation-cluster. The binaries are left
// empty: set EtcdBin and XDSNodeBin (Build makes them).
func DefaultConfig() Config {
	return Config{
		Dir: filepath.Join(os.TempDir(), "legation-cluster"),
		// Tests pick prefixes from 127.0.100. up (StartTest): this one is
		// for people.
		Net:         "127.0.10.",
		EtcdMembers: 3,
		Replicas:    3,
		HAProxy:     true,
		// A race-built replica on a busy machine takes a few seconds to
		// be ready; etcd's first election with three members about one.
		Timeout: 30 * time.Second,
		// Longer than a replica's default --drain-period plus
		// --shutdown-timeout plus leaving the cluster (10s+10s+2s) and
		// etcd's request timeout (7s), which bound their graceful exits.
		Grace: 25 * time.Second,
	}
}

var (
	netPattern  = regexp.MustCompile(`^127\.([0-9]{1,3})\.([0-9]{1,3})\.$`)
	namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)
)

// Validate checks each field and the fields against each other, and
// reports every problem it finds.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c.validateAddresses(add)
	c.validateProcesses(add)
	if !namePattern.MatchString(c.NamePrefix) {
		add("NamePrefix %q: letters, digits, '-', '_' and '.' only", c.NamePrefix)
	}
	if c.EtcdMembers > 0 && c.EtcdBin == "" {
		add("EtcdBin: empty (Build makes one)")
	}
	if c.XDSNodeBin == "" {
		add("XDSNodeBin: empty (Build makes one)")
	}
	if c.Timeout <= 0 {
		add("Timeout %s: want more than 0", c.Timeout)
	}
	if c.Grace < 0 {
		add("Grace %s: want 0 or more", c.Grace)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("localcluster: config: %w", errors.Join(errs...))
}

// validateAddresses checks Dir, whose sockets' paths must fit a Unix
// socket's, and Net.
func (c *Config) validateAddresses(add func(format string, a ...any)) {
	switch {
	case c.Dir == "":
		add("Dir: empty")
	default:
		for _, sock := range []string{lbSocket(c.Dir), ControlSocket(c.Dir)} {
			if abs, err := filepath.Abs(sock); err == nil && len(abs) > maxSocketPath {
				add("Dir %q: the socket %s would be %d bytes long, more than a Unix socket's %d", c.Dir, filepath.Base(sock), len(abs), maxSocketPath)
			}
		}
		if c.HAProxy && strings.ContainsAny(c.Dir, " \t\n\"'#\\") {
			add("Dir %q: no spaces, quotes, '#' or '\\', please: HAProxy's config names its admin socket", c.Dir)
		}
	}
	if m := netPattern.FindStringSubmatch(c.Net); m == nil {
		add("Net %q: want a prefix like 127.0.10. (with its trailing dot)", c.Net)
	} else {
		for _, part := range m[1:] {
			if n, _ := strconv.Atoi(part); n > 255 {
				add("Net %q: not an IPv4 prefix", c.Net)
				break
			}
		}
	}
}

// validateProcesses checks the etcd members or endpoints, the replicas,
// and the TLS and proxy options that depend on them.
func (c *Config) validateProcesses(add func(format string, a ...any)) {
	switch {
	case c.EtcdMembers < 0 || c.EtcdMembers > maxEtcdMembers:
		add("EtcdMembers %d: want 0 to %d", c.EtcdMembers, maxEtcdMembers)
	case c.EtcdMembers == 0 && len(c.EtcdEndpoints) == 0:
		add("EtcdMembers 0 and no EtcdEndpoints: the replicas need an etcd")
	case c.EtcdMembers > 0 && len(c.EtcdEndpoints) > 0:
		add("EtcdMembers %d and EtcdEndpoints %v: one or the other", c.EtcdMembers, c.EtcdEndpoints)
	}
	for _, ep := range c.EtcdEndpoints {
		if strings.TrimSpace(ep) == "" || strings.Contains(ep, ",") {
			add("EtcdEndpoints: %q is not host:port", ep)
		}
	}
	switch {
	case c.Replicas < 0 || c.Replicas > maxReplicas:
		add("Replicas %d: want 0 to %d", c.Replicas, maxReplicas)
	case c.Replicas == 0 && (c.HAProxy || c.EtcdMembers == 0):
		add("Replicas 0: only for etcd members without HAProxy")
	}
	if t := c.EtcdTLS; t != nil && (t.CertFile == "" || t.KeyFile == "" || t.ClientCertAuth && t.TrustedCAFile == "") {
		add("EtcdTLS: CertFile and KeyFile, and with ClientCertAuth TrustedCAFile, are needed")
	}
	if c.Secure && (c.EtcdMembers == 0 || c.EtcdTLS != nil) {
		add("Secure: needs etcd members of its own (EtcdMembers) and no EtcdTLS (it makes its own)")
	}
	if c.EtcdProxies && c.EtcdMembers == 0 {
		add("EtcdProxies: needs etcd members of its own (EtcdMembers)")
	}
}

// ControlSocket is the path of the control socket of the cluster whose
// state directory is dir (see ControlHandler and Client).
func ControlSocket(dir string) string { return filepath.Join(dir, "control.sock") }

// pkiDir is where a secure cluster's certificates and keys are.
func pkiDir(dir string) string { return filepath.Join(dir, "pki") }

// etcdTLS is cfg's EtcdTLS, or, for a secure cluster, its own: the CA of
// Dir/pki, client certificates required (each member's certificate and
// key are its own: etcdArgs).
func etcdTLS(cfg *Config) *EtcdTLS {
	if !cfg.Secure {
		return cfg.EtcdTLS
	}
	return &EtcdTLS{TrustedCAFile: filepath.Join(pkiDir(cfg.Dir), "legation-ca.pem"), ClientCertAuth: true}
}

func lbSocket(dir string) string { return filepath.Join(dir, "haproxy.sock") }

func etcdIP(net string, i int) string    { return net + strconv.Itoa(10+i) }
func replicaIP(net string, i int) string { return net + strconv.Itoa(20+i) }
func lbIP(net string) string             { return net + "1" }

func hostPort(ip string, port int) string { return ip + ":" + strconv.Itoa(port) }

package replica

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/security/tlsfiles"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/xdstp"
)

// Validate checks every field and the fields against each other. It
// reports every problem found, one a line, each naming its flag.
func (c *Config) Validate() error {
	errs := []error{
		c.validateEtcd(),
		c.validateCluster(),
		c.validateTimes(),
		c.validateLRS(),
	}
	if c.EtcdStaleAfter <= 0 {
		errs = append(errs, fmt.Errorf("--etcd-stale-after %s: must be positive", c.EtcdStaleAfter))
	}
	errs = append(errs, c.validateStreams(), c.validateLimits(), c.validateTLS())
	if c.Gatherer == nil && c.Registerer != nil {
		if _, ok := c.Registerer.(prometheus.Gatherer); !ok {
			errs = append(errs, errors.New("the Registerer is not a prometheus.Gatherer: set Gatherer for /metrics"))
		}
	}
	if errors.Join(errs...) == nil {
		// Only when each address parses: two listeners on one port.
		errs = append(errs, c.validatePorts())
	}
	// The errors name flags and are shown to the user as they are, one a
	// line.
	return errors.Join(errs...)
}

// validateEtcd checks the flags of etcd and of dev mode's embedded one.
func (c *Config) validateEtcd() error {
	var errs []error
	eo := c.etcdOptions()
	errs = append(errs, eo.Validate())
	if c.DevMode() && !c.EtcdSecurity.IsZero() {
		errs = append(errs, fmt.Errorf("%s: only with --etcd-endpoints: dev mode's embedded etcd is plain text without authentication", c.EtcdSecurity.SetFlags()))
	}
	if c.DevMode() {
		if c.DataDir == "" {
			errs = append(errs, errors.New("--data-dir: empty; dev mode (no --etcd-endpoints) needs a directory for the embedded etcd"))
		}
		errs = append(errs, checkListenAddr("--dev-etcd-addr", c.DevEtcdAddr))
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || !strings.HasSuffix(c.EtcdPrefix, "/") {
		errs = append(errs, fmt.Errorf("--etcd-prefix %q: must start and end with '/'", c.EtcdPrefix))
	}
	return errors.Join(errs...)
}

// validateCluster checks the addresses, the gossip key, the replica's
// name and how nodes are grouped.
func (c *Config) validateCluster() error {
	errs := []error{
		checkListenAddr("--xds-addr", c.XDSAddr),
		checkListenAddr("--http-addr", c.HTTPAddr),
		checkListenAddr("--gossip-addr", c.GossipAddr),
	}
	if c.AdvertiseAddr != "" {
		errs = append(errs, checkHost("--advertise-addr", c.AdvertiseAddr))
	}
	for _, j := range c.Join {
		errs = append(errs, checkHost("--join", j))
	}
	if c.GossipKeyFile != "" {
		switch {
		case c.DevMode():
			errs = append(errs, errors.New("--gossip-key-file: set in dev mode (no --etcd-endpoints), where the replica gossips with no one; set --etcd-endpoints, or drop the flag"))
		case c.Standalone:
			errs = append(errs, errors.New("--gossip-key-file: set with --standalone, where the replica gossips with no one; drop one of them"))
		}
	}
	if strings.TrimSpace(c.Name) == "" {
		errs = append(errs, errors.New("--name: empty"))
	}
	if _, err := scope.ParseGroupBy(c.GroupBy); err != nil {
		errs = append(errs, err)
	}
	if _, err := xdstp.NewAuthorities(c.Authorities); err != nil {
		errs = append(errs, fmt.Errorf("--authority: %w", err))
	}
	return errors.Join(errs...)
}

// validateTimes checks the timeouts and the rates of the replica's own
// work (rebalance, status writes).
func (c *Config) validateTimes() error {
	var errs []error
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout %s: negative", c.DialTimeout))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %s: negative", c.ShutdownTimeout))
	}
	if c.DrainPeriod < 0 || c.DrainPeriod > maxDrainPeriod {
		errs = append(errs, fmt.Errorf("--drain-period %s: must be between 0 and %s", c.DrainPeriod, maxDrainPeriod))
	}
	if c.CatchupTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--catchup-timeout %s: must be positive", c.CatchupTimeout))
	}
	if c.AuthzStaleAfter < minAuthzStaleAfter {
		errs = append(errs, fmt.Errorf("--authz-stale-after %s: must be at least %s (the rules' watch hears from etcd every second)", c.AuthzStaleAfter, minAuthzStaleAfter))
	}
	if !(c.RebalanceRate > 0) || c.RebalanceRate > 1e6 {
		errs = append(errs, fmt.Errorf("--rebalance-rate %v: must be positive (streams per second)", c.RebalanceRate))
	}
	if !(c.StatusWriteBudget > 0) || c.StatusWriteBudget > 1e6 {
		errs = append(errs, fmt.Errorf("--status-write-budget %v: must be positive (etcd transactions per second)", c.StatusWriteBudget))
	}
	return errors.Join(errs...)
}

// validateLRS checks the flags of load reporting.
func (c *Config) validateLRS() error {
	var errs []error
	if c.LRSInterval < time.Second || c.LRSInterval > time.Hour {
		errs = append(errs, fmt.Errorf("--lrs-interval %s: must be from 1s to 1h", c.LRSInterval))
	}
	if c.LRSWindows < 1 || c.LRSWindows > 1000 {
		errs = append(errs, fmt.Errorf("--lrs-windows %d: must be from 1 to 1000", c.LRSWindows))
	}
	if !(c.LRSMaxRate >= 1) || math.IsInf(c.LRSMaxRate, 0) {
		errs = append(errs, fmt.Errorf("--lrs-max-rate %v: must be at least 1 (requests per second a node may report)", c.LRSMaxRate))
	}
	if c.LRSMaxRowsPerNode < 1 || c.LRSMaxRowsPerNode > lrs.MaxRows {
		errs = append(errs, fmt.Errorf("--lrs-max-rows-per-node %d: must be from 1 to %d", c.LRSMaxRowsPerNode, lrs.MaxRows))
	}
	for _, cl := range c.LRSClusters {
		if strings.TrimSpace(cl) == "" {
			errs = append(errs, errors.New("--lrs-clusters: an empty cluster name"))
		}
	}
	return errors.Join(errs...)
}

// validateStreams checks the bounds of one stream: zero is no bound,
// negative is an error.
func (c *Config) validateStreams() error {
	var errs []error
	if c.MaxRecvMsgSize <= 0 {
		errs = append(errs, fmt.Errorf("--max-recv-msg-size %d: must be positive", c.MaxRecvMsgSize))
	}
	if c.FirstRequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("--first-request-timeout %s: negative", c.FirstRequestTimeout))
	}
	negative := func(flag string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: negative", flag, v))
		}
	}
	negative("--max-names", c.MaxNames)
	negative("--max-subscribed-bytes-per-stream", c.MaxSubscribedBytes)
	negative("--max-subscribed-bytes-per-conn", c.MaxSubscribedBytesPerConn)
	negative("--max-name-length", c.MaxNameLength)
	negative("--max-node-id-length", c.MaxNodeIDLength)
	negative("--max-vhds-groups", c.MaxVHDSGroups)
	negative("--max-nack-message", c.MaxNackMessage)
	if c.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("--send-timeout %s: negative", c.SendTimeout))
	}
	return errors.Join(errs...)
}

// validatePorts checks that no two listeners bind one port; each address
// must parse.
func (c *Config) validatePorts() error {
	var errs []error
	addrs := [][2]string{{"--xds-addr", c.XDSAddr}, {"--http-addr", c.HTTPAddr}, {"--gossip-addr", c.GossipAddr}}
	if c.DevMode() {
		addrs = append(addrs, [2]string{"--dev-etcd-addr", c.DevEtcdAddr})
	}
	for i := range addrs {
		for j := i + 1; j < len(addrs); j++ {
			if clash(addrs[i][1], addrs[j][1]) {
				errs = append(errs, fmt.Errorf("%s %q and %s %q: same port", addrs[i][0], addrs[i][1], addrs[j][0], addrs[j][1]))
			}
		}
	}
	return errors.Join(errs...)
}

// validateTLS checks the TLS and authorization flags against each other;
// the files themselves are checked when New loads them.
func (c *Config) validateTLS() error {
	var errs []error
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file: give both or neither"))
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file and --tls-key-file (mTLS is TLS with client certificates)"))
	}
	if c.TLSCertFile != "" && c.ClientCAFile == "" && !c.DevMode() && !c.Standalone {
		errs = append(errs, errors.New("--tls-cert-file in a cluster needs --client-ca-file: replicas relay to each other over mTLS and check each other's certificates with it"))
	}
	if c.ClientCAFile == "" {
		if len(c.ReplicaIdentities) > 0 {
			errs = append(errs, errors.New("--replica-identity needs mTLS (--client-ca-file)"))
		}
		if c.AuthzDefaultTrustDomain != "" {
			errs = append(errs, errors.New("--authz-default-trust-domain needs mTLS (--client-ca-file)"))
		}
	}
	for _, p := range c.ReplicaIdentities {
		if _, err := authz.ParsePattern(p); err != nil {
			errs = append(errs, fmt.Errorf("--replica-identity: %w", err))
		} else if !strings.HasPrefix(p, tlsfiles.SPIFFEPrefix) {
			errs = append(errs, fmt.Errorf("--replica-identity %q: replica identities are SPIFFE IDs from URI SANs: "+
				"the pattern must begin with %q (a DNS SAN or CommonName never names a replica)", p, tlsfiles.SPIFFEPrefix))
		}
	}
	if td := c.AuthzDefaultTrustDomain; td != "" {
		if err := tlsfiles.ValidateSPIFFE("spiffe://" + td); err != nil || strings.Contains(td, "/") {
			errs = append(errs, fmt.Errorf("--authz-default-trust-domain %q: want a SPIFFE trust domain such as example.org (lowercase letters, digits, '.', '-', '_')", td))
		}
	}
	return errors.Join(errs...)
}

// validateLimits checks the flags of "Limits and overload".
func (c *Config) validateLimits() error {
	var errs []error
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", flag, d))
		}
	}
	positive("--keepalive-min-time", c.KeepaliveMinTime)
	seconds := func(flag string, d time.Duration) {
		if d < time.Second {
			errs = append(errs, fmt.Errorf("%s %s: below 1s (the kernel's TCP keepalive counts whole seconds)", flag, d))
		}
	}
	seconds("--keepalive-time", c.KeepaliveTime)
	seconds("--keepalive-timeout", c.KeepaliveTimeout)
	positive("--ping-time", c.PingTime)
	positive("--http-read-timeout", c.HTTPReadTimeout)
	if c.MaxConnectionAge < 0 {
		errs = append(errs, fmt.Errorf("--max-connection-age %s: negative (0: no age)", c.MaxConnectionAge))
	}
	if c.MaxConnectionAgeGrace < 0 {
		errs = append(errs, fmt.Errorf("--max-connection-age-grace %s: negative", c.MaxConnectionAgeGrace))
	}
	nonNegative := func(flag string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: negative (0: no bound)", flag, v))
		}
	}
	nonNegative("--max-connections", c.MaxConnections)
	positive("--handshake-timeout", c.HandshakeTimeout)
	nonNegative("--max-streams-per-conn", c.MaxStreamsPerConn)
	nonNegative("--max-streams", c.MaxStreams)
	nonNegative("--max-relayed-streams", c.MaxRelayedStreams)
	if !(c.RelayStreamRate >= 0) || c.RelayStreamRate > 1e9 {
		errs = append(errs, fmt.Errorf("--relay-stream-rate %v: must be 0 (no rate) or positive (streams per second)", c.RelayStreamRate))
	}
	if c.RelayStreamRate > 0 && c.RelayStreamBurst < 1 {
		errs = append(errs, fmt.Errorf("--relay-stream-burst %d: must be at least 1 with --relay-stream-rate", c.RelayStreamBurst))
	}
	nonNegative("--http-max-conns", c.HTTPMaxConns)
	nonNegative("--max-csds-matchers", c.MaxCSDSMatchers)
	nonNegative("--http-max-conns-per-ip", c.HTTPMaxConnsPerIP)
	if !(c.StreamRate >= 0) || c.StreamRate > 1e9 {
		errs = append(errs, fmt.Errorf("--stream-rate %v: must be 0 (no rate) or positive (streams per second)", c.StreamRate))
	}
	if c.MaxStreamsShare != 0 && !(c.MaxStreamsShare >= 1 && c.MaxStreamsShare < 1e6) {
		errs = append(errs, fmt.Errorf("--max-streams-share %v: must be 0 (no cap) or at least 1 (a multiple of the fair share)", c.MaxStreamsShare))
	}
	if c.StreamRate > 0 && c.StreamBurst < 1 {
		errs = append(errs, fmt.Errorf("--stream-burst %d: must be at least 1 with --stream-rate", c.StreamBurst))
	}
	return errors.Join(errs...)
}

// checkListenAddr checks a host:port to listen on; host may be empty (all
// interfaces) and port 0 picks a free one.
func checkListenAddr(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w (want host:port, e.g. :18000)", flag, addr, err)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("%s %q: bad host %q", flag, addr, host)
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

// checkHost checks a host or host:port another replica dials; the host is
// required.
func checkHost(flag, addr string) error {
	host := addr
	if h, port, err := net.SplitHostPort(addr); err == nil {
		if _, err := parsePort(port); err != nil {
			return fmt.Errorf("%s %q: %w", flag, addr, err)
		}
		host = h
	} else if net.ParseIP(addr) == nil && strings.Contains(addr, ":") {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "" || strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("%s %q: want host or host:port", flag, addr)
	}
	return nil
}

func parsePort(port string) (int, error) {
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("bad port %q", port)
	}
	return p, nil
}

// clash reports whether two listen addresses would bind the same port: the
// same non-zero port on the same host or on all interfaces.
func clash(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// maxDrainPeriod bounds --drain-period: longer is surely a typo (10m for
// 10s), and would hold a stopping replica for that long.
const maxDrainPeriod = 10 * time.Minute

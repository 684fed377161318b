package shard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/state/keyspace"
)

// Config configures a Membership. Zero values of optional fields mean the
// DefaultConfig value.
type Config struct {
	// Name is this replica's name, unique in the cluster: the memberlist
	// node name and the registry key. Required; at most 128 bytes, no '/'
	// and no control characters.
	Name string

	// BindAddr is the host:port memberlist listens on (UDP and TCP). An
	// empty host means all interfaces; port 0 picks a free port (tests).
	// The host must be an IP address.
	BindAddr string
	// AdvertiseAddr is the ip:port other replicas use to gossip with this
	// one. Empty: derived from BindAddr (with an unspecified bind host,
	// the first private address of the machine). Port 0 means the bound
	// port.
	AdvertiseAddr string

	// XDSAddr is the host:port other replicas relay xDS streams to, put in
	// this replica's record. Required, and reachable from the others: not
	// an empty or wildcard host.
	XDSAddr string
	// HTTPAddr is the host:port of this replica's HTTP server, put in its
	// record for operators. Optional.
	HTTPAddr string
	// Authorities are the xdstp:// authorities this replica serves, put
	// in its record (Member.Authorities). Optional.
	Authorities []string

	// Join lists seed replicas' gossip addresses (host:port) joined at
	// start. Empty: join the members found in the etcd registry. Either
	// way the registry is re-read every RefreshInterval and registered
	// members missing from the gossip set are joined, so replicas that
	// started together or were partitioned find each other.
	Join []string

	// Client is the etcd client for the registry. Required; Membership
	// does not close it.
	Client *clientv3.Client
	// Prefix is the etcd key prefix, starting and ending in '/'; the
	// registry lives under <Prefix>members/.
	Prefix string
	// LeaseTTL is the TTL of the registry lease, in whole seconds (rounded
	// up): how long the record of a replica that crashed outlives it.
	LeaseTTL time.Duration
	// RefreshInterval is how often the registry is re-read to join
	// registered members missing from the gossip set.
	RefreshInterval time.Duration

	// VNodes is the number of virtual nodes per member on the ring. Every
	// replica must use the same value, or they disagree on homes.
	VNodes int

	// ProbeInterval is memberlist's failure-detection probe period: each
	// replica probes one other replica per interval.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// indirect probes are tried. Below ProbeInterval.
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a suspected replica has to refute
	// before it is declared dead: SuspicionMult * max(1, log10(members)) *
	// ProbeInterval once another replica confirms the suspicion.
	SuspicionMult int
	// GossipInterval is how often gossip messages (joins, leaves, meta
	// updates) are sent.
	GossipInterval time.Duration
	// TCPTimeout bounds one gossip TCP exchange (join, push/pull, TCP
	// ping), and so how long Start and Close may wait on an unreachable
	// peer.
	TCPTimeout time.Duration

	// RingDamping is how long a member that memberlist declared dead
	// stays on the ring while its registration in etcd is live, in this
	// replica's awake time (Clock): one that is alive again within it
	// (slow, not dead) keeps its nodes. It is added to the time a killed
	// replica's nodes keep it as their home on the ring when its host
	// vanished (a crashed process, whose xDS port refuses connections, is
	// dropped at once), though not to their failover: a stream whose
	// home does not answer is relayed to the next replica on the ring at
	// once. The end of a registration (a graceful leave, an expired
	// lease) removes a member at once whatever it is. Negative: none, a
	// death removes at once.
	RingDamping time.Duration
	// Clock is this replica's awake clock, which RingDamping is measured
	// on, so that a replica starved of CPU drops no peer for it; nil: the
	// wall clock.
	Clock *awake.Clock

	// GossipKeyFile is the path of the gossip keyring (ReadKeyFile tells
	// its format). Set: every gossip packet and TCP stream is encrypted
	// and authenticated (memberlist's AES-GCM) with the file's first key,
	// and one that no key of the file opens is dropped, so a replica
	// without a key of this one's never joins its ring. Start fails if the
	// file is bad; afterwards it is re-read every GossipKeyInterval and
	// the keyring updated in place, and a bad rewrite keeps the keyring
	// in use. Empty: gossip in clear, and anyone who reaches BindAddr can
	// join the gossip (though not the ring, which needs a registration in
	// etcd); a cluster of more than one replica then logs an error.
	GossipKeyFile string
	// GossipKeyInterval is how often GossipKeyFile is checked for a
	// change.
	GossipKeyInterval time.Duration

	// Logger receives the package's and memberlist's logs; nil discards.
	Logger *slog.Logger
	// Registerer registers this Membership's metrics from Start until
	// Leave or Close; nil: no metrics.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a Config with every default filled in; Name,
// XDSAddr and Client are left for the caller.
func DefaultConfig() Config {
	return Config{
		BindAddr:        ":7946",                // memberlist's usual port
		Prefix:          keyspace.DefaultPrefix, // xds-node's --etcd-prefix default
		LeaseTTL:        10 * time.Second,
		RefreshInterval: 5 * time.Second,
		VNodes:          DefaultVNodes,
		// A killed replica is probed within about a second, suspected after
		// one ProbeInterval, and dead SuspicionMult intervals later: it
		// leaves the alive set in about 5s on a LAN.
		ProbeInterval:  time.Second,
		ProbeTimeout:   500 * time.Millisecond,
		SuspicionMult:  3,
		GossipInterval: 200 * time.Millisecond,
		TCPTimeout:     3 * time.Second,
		// A death stands 5s before it moves nodes: longer than a stall of
		// the process that memberlist takes for one, within the failover
		// bound with detection's 5s.
		RingDamping: 5 * time.Second,
		// A rewritten key file applies within 2s: a rotation step is done
		// on every replica before the next one starts.
		GossipKeyInterval: 2 * time.Second,
	}
}

// fill replaces zero optional fields with their defaults.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = d.RefreshInterval
	}
	if c.VNodes == 0 {
		c.VNodes = d.VNodes
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = d.ProbeTimeout
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	if c.GossipInterval == 0 {
		c.GossipInterval = d.GossipInterval
	}
	if c.TCPTimeout == 0 {
		c.TCPTimeout = d.TCPTimeout
	}
	if c.GossipKeyInterval == 0 {
		c.GossipKeyInterval = d.GossipKeyInterval
	}
	if c.RingDamping == 0 {
		c.RingDamping = d.RingDamping
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// maxNameLen keeps a name well inside memberlist's and etcd's limits.
const maxNameLen = 128

// Validate checks c, with zero optional fields taken as their defaults.
func (c Config) Validate() error {
	c.fill()
	if err := validName(c.Name); err != nil {
		return err
	}
	if _, _, err := splitBind(c.BindAddr); err != nil {
		return err
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitAdvertise(c.AdvertiseAddr); err != nil {
			return err
		}
	}
	if err := validHostPort("XDSAddr", c.XDSAddr); err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(c.XDSAddr); host == "" || isUnspecified(host) {
		return fmt.Errorf("shard: XDSAddr %q must be an address other replicas can reach, not a wildcard", c.XDSAddr)
	}
	if c.HTTPAddr != "" {
		if err := validHostPort("HTTPAddr", c.HTTPAddr); err != nil {
			return err
		}
	}
	for i, j := range c.Join {
		if strings.TrimSpace(j) == "" {
			return fmt.Errorf("shard: Join[%d] is empty", i)
		}
	}
	switch {
	case c.Client == nil:
		return errors.New("shard: Client is required")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("shard: Prefix %q must start and end with '/'", c.Prefix)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("shard: LeaseTTL %v is below 1s", c.LeaseTTL)
	case c.RefreshInterval < 10*time.Millisecond:
		return fmt.Errorf("shard: RefreshInterval %v is below 10ms", c.RefreshInterval)
	case c.VNodes < 1 || c.VNodes > 1<<16:
		return fmt.Errorf("shard: VNodes %d is not in [1, 65536]", c.VNodes)
	case c.ProbeInterval < time.Millisecond:
		return fmt.Errorf("shard: ProbeInterval %v is below 1ms", c.ProbeInterval)
	case c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("shard: ProbeTimeout %v must be positive and below ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	case c.SuspicionMult < 1:
		return fmt.Errorf("shard: SuspicionMult %d must be positive", c.SuspicionMult)
	case c.GossipInterval <= 0:
		return fmt.Errorf("shard: GossipInterval %v must be positive", c.GossipInterval)
	case c.TCPTimeout <= 0:
		return fmt.Errorf("shard: TCPTimeout %v must be positive", c.TCPTimeout)
	case c.GossipKeyInterval < 10*time.Millisecond:
		return fmt.Errorf("shard: GossipKeyInterval %v is below 10ms", c.GossipKeyInterval)
	}
	// The record must fit memberlist's meta limit: check the longest form.
	if n := len(encodeMeta(Member{XDSAddr: c.XDSAddr, HTTPAddr: c.HTTPAddr, Started: time.Now(), Ready: true, Version: legation.Version()})); n > metaMaxSize {
		return fmt.Errorf("shard: XDSAddr and HTTPAddr take %d bytes of gossip meta, over the %d-byte limit", n, metaMaxSize)
	}
	return nil
}

// metaMaxSize is memberlist.MetaMaxSize: memberlist panics beyond it.
const metaMaxSize = 512

func validName(name string) error {
	switch {
	case name == "":
		return errors.New("shard: Name is required")
	case len(name) > maxNameLen:
		return fmt.Errorf("shard: Name %.16q... is longer than %d bytes", name, maxNameLen)
	case strings.Contains(name, "/"):
		return fmt.Errorf("shard: Name %q holds a '/'", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("shard: Name %q holds a control character", name)
	}
	return nil
}

// splitBind parses BindAddr: an IP or empty host, and a port (0 allowed).
func splitBind(addr string) (string, int, error) {
	host, port, err := splitIPPort("BindAddr", addr)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// splitAdvertise parses AdvertiseAddr: an IP and a port (0: the bound one).
func splitAdvertise(addr string) (string, int, error) {
	host, port, err := splitIPPort("AdvertiseAddr", addr)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		return "", 0, fmt.Errorf("shard: AdvertiseAddr %q has no IP address", addr)
	}
	if isUnspecified(host) {
		return "", 0, fmt.Errorf("shard: AdvertiseAddr %q is an unspecified address; others could not reach it", addr)
	}
	return host, port, nil
}

func splitIPPort(field, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("shard: %s %q: want ip:port: %w", field, addr, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return "", 0, fmt.Errorf("shard: %s %q: host must be an IP address", field, addr)
		}
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("shard: %s %q: bad port %q", field, addr, p)
	}
	return host, int(port), nil
}

func validHostPort(field, addr string) error {
	if addr == "" {
		return fmt.Errorf("shard: %s is required", field)
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("shard: %s %q: want host:port: %w", field, addr, err)
	}
	if port, err := strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
		return fmt.Errorf("shard: %s %q: bad port %q", field, addr, p)
	}
	return nil
}

func isUnspecified(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

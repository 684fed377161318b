// Command xds-node is one Legation replica: it watches etcd and serves
// Envoy's xDS. With no flag it runs in dev mode, with an embedded etcd on
// 127.0.0.1:2379 (where xdsadmin looks by default) and data in
// ./legation-data. Every flag can also be given as an environment variable
// LEGATION_<FLAG> (--etcd-endpoints is LEGATION_ETCD_ENDPOINTS); a flag on
// the command line wins.
//
// Exit codes: 0 after a clean shutdown (SIGINT, SIGTERM), 1 on a runtime
// error, 2 on a bad flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/tracing"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		// One line per problem: Validate reports them all.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "xds-node: %s\n", line)
		}
		os.Exit(2)
	}
	cfg.Registerer = replica.NewRegistry()
	tp, err := tracing.New(context.Background(), tracing.Config{Service: "xds-node",
		Attributes: []attribute.KeyValue{attribute.String("legation.replica", cfg.Name)}, Logger: cfg.Logger})
	if err != nil {
		cfg.Logger.Error("xds-node cannot start", "err", err)
		os.Exit(1)
	}
	cfg.Tracing = tp

	n, err := replica.New(cfg)
	if err != nil {
		cfg.Logger.Error("xds-node cannot start", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// Once shutdown began, a second signal kills at once.
	context.AfterFunc(ctx, stop)
	err = n.Run(ctx)
	// The spans not yet exported go out (or give up) before the exit.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if serr := tp.Shutdown(sctx); serr != nil {
		cfg.Logger.Warn("xds-node: traces", "err", serr)
	}
	cancel()
	if err != nil {
		cfg.Logger.Error("xds-node failed", "err", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line and LEGATION_* variables into a
// checked Config with its Logger set. Errors name the flag.
func parseFlags(args []string) (replica.Config, error) {
	cfg := replica.DefaultConfig()
	fs, logLevel, logFormat := newFlagSet(&cfg)
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			err = fmt.Errorf("%w (see --help)", err)
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if err := applyEnv(fs); err != nil {
		return cfg, err
	}
	if fs.Changed(flagDebugOpen) {
		return cfg, errDebugOpen
	}
	if err := cfg.EtcdSecurity.LoadPassword(os.LookupEnv); err != nil {
		return cfg, err
	}
	cfg.EtcdEndpoints = cleanList(cfg.EtcdEndpoints)
	cfg.Join = cleanList(cfg.Join)
	cfg.ReplicaIdentities = cleanList(cfg.ReplicaIdentities)
	if cfg.DevMode() {
		// Dev mode is private until the operator picks an address: its
		// listeners default to loopback, not every interface.
		for _, f := range []struct {
			name string
			addr *string
		}{{"xds-addr", &cfg.XDSAddr}, {"http-addr", &cfg.HTTPAddr}, {"gossip-addr", &cfg.GossipAddr}} {
			if !fs.Changed(f.name) {
				*f.addr = loopbackDefault(*f.addr)
			}
		}
	}
	logger, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return cfg, err
	}
	cfg.Logger = logger
	return cfg, cfg.Validate()
}

// newFlagSet is xds-node's flag set, bound to cfg's fields, with the
// --log-level and --log-format values it returns beside. The Helm chart's
// test (chart_test.go) checks the chart's arguments against it.
func newFlagSet(cfg *replica.Config) (fs *pflag.FlagSet, logLevel, logFormat *string) {
	fs = pflag.NewFlagSet("xds-node", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", cfg.EtcdEndpoints,
		"etcd endpoints, comma separated (host:port, http://host:port or https://host:port); empty: dev mode, an embedded single-member etcd")
	cfg.EtcdSecurity.AddFlags(fs)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "embedded etcd data directory (dev mode only)")
	fs.StringVar(&cfg.DevEtcdAddr, "dev-etcd-addr", cfg.DevEtcdAddr,
		"client address of the embedded etcd (dev mode only; xdsadmin's default endpoint)")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "etcd key prefix; starts and ends with '/'")
	fs.StringVar(&cfg.XDSAddr, "xds-addr", cfg.XDSAddr, "gRPC listen address: ADS (SotW and delta), the per-type xDS services, CSDS, LRS, gRPC health")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address: REST-JSON /v3/discovery:*, /healthz, /readyz, /metrics, /debug/view, /debug/streams")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr,
		"memberlist bind address, ip:port (UDP and TCP; etcd mode)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr,
		"ip[:port] other replicas use for gossip and relaying xDS streams; empty: derived")
	fs.StringSliceVar(&cfg.Join, "join", cfg.Join,
		"seed replicas' gossip addresses, comma separated host[:port]; empty: discover peers through etcd")
	fs.StringVar(&cfg.GossipKeyFile, "gossip-key-file", cfg.GossipKeyFile,
		"gossip keyring file: one base64 key (16, 24 or 32 bytes) a line, the first encrypts, all decrypt; re-read while running (etcd mode); empty: gossip unencrypted")
	fs.BoolVar(&cfg.Standalone, "standalone", cfg.Standalone,
		"in etcd mode, stay out of any cluster: no gossip, no relaying; serve every node here")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "replica name")
	fs.StringVar(&cfg.GroupBy, "group-by", cfg.GroupBy, "how a node's group is derived: cluster, id or metadata:KEY")
	logLevel = fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat = fs.String("log-format", "text", "log format: text or json")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout,
		"on SIGTERM or SIGINT, once --drain-period is over, how long to let what is left of streams and requests finish before cutting them")
	fs.DurationVar(&cfg.DrainPeriod, "drain-period", cfg.DrainPeriod,
		"on SIGTERM or SIGINT, once not ready and out of the cluster, close the xDS streams with UNAVAILABLE spread (jittered) over this period, refusing new ones; 0: all at once")
	fs.DurationVar(&cfg.CatchupTimeout, "catchup-timeout", cfg.CatchupTimeout,
		"how long a client presenting a version newer than this replica's view waits for it before its stream ends with UNAVAILABLE")
	fs.BoolVar(&cfg.SotwTrustVersion, "sotw-trust-version", cfg.SotwTrustVersion,
		"on a new SotW stream, send named resources (EDS, RDS) only if changed since the version presented; only for fleets whose SotW clients are all Envoy")
	fs.IntVar(&cfg.MaxRecvMsgSize, "max-recv-msg-size", cfg.MaxRecvMsgSize,
		"largest xDS request message accepted, in bytes")
	fs.DurationVar(&cfg.FirstRequestTimeout, "first-request-timeout", cfg.FirstRequestTimeout,
		"an xDS stream that sends no request for this long ends with DEADLINE_EXCEEDED; 0: no bound")
	fs.IntVar(&cfg.MaxNames, "max-names", cfg.MaxNames,
		"most resource names an xDS stream may subscribe to per type (and delta initial_resource_versions entries); beyond: RESOURCE_EXHAUSTED; 0: no bound")
	fs.IntVar(&cfg.MaxNameLength, "max-name-length", cfg.MaxNameLength,
		"longest resource name accepted in an xDS request, in bytes; longer: INVALID_ARGUMENT; 0: no bound")
	fs.IntVar(&cfg.MaxNodeIDLength, "max-node-id-length", cfg.MaxNodeIDLength,
		"longest node id accepted in an xDS request or poll, in bytes; longer: INVALID_ARGUMENT; 0: no bound")
	fs.IntVar(&cfg.MaxVHDSGroups, "max-vhds-groups", cfg.MaxVHDSGroups,
		"node groups with virtual hosts of their own whose VHDS alias indexes are kept per revision; one more: RESOURCE_EXHAUSTED; 0: no bound")
	fs.IntVar(&cfg.MaxNackMessage, "max-nack-message", cfg.MaxNackMessage,
		"bytes of a NACK's error message kept and logged; the rest is cut; 0: no bound")
	fs.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout,
		"an xDS stream (relayed ones too) whose client takes no response for this long ends with UNAVAILABLE; 0: no bound")
	fs.Float64Var(&cfg.RebalanceRate, "rebalance-rate", cfg.RebalanceRate,
		"streams each replica closes per second (with jitter) when a membership change moves their node's home")
	fs.Float64Var(&cfg.StatusWriteBudget, "status-write-budget", cfg.StatusWriteBudget,
		"etcd transactions per second (each up to 64 node status records) this replica spends at most on status records; the rest waits, coalesced by node")
	fs.DurationVar(&cfg.LRSInterval, "lrs-interval", cfg.LRSInterval,
		"LRS: the load_reporting_interval sent to clients, and the length of the load windows each replica publishes to etcd (1s to 1h)")
	fs.IntVar(&cfg.LRSWindows, "lrs-windows", cfg.LRSWindows,
		"LRS: how many of its last load windows each replica keeps in etcd")
	fs.StringSliceVar(&cfg.LRSClusters, "lrs-clusters", cfg.LRSClusters,
		"LRS: the only clusters clients are asked to report on, comma separated; empty: all (send_all_clusters)")
	fs.Float64Var(&cfg.LRSMaxRate, "lrs-max-rate", cfg.LRSMaxRate,
		"LRS: the requests per second one node may report, on average over a window; cluster stats beyond are refused and counted")
	fs.IntVar(&cfg.LRSMaxRowsPerNode, "lrs-max-rows-per-node", cfg.LRSMaxRowsPerNode,
		"LRS: the rows (cluster, service, locality) one node may add to a load window; beyond, its rows are summed into one of its own")
	fs.DurationVar(&cfg.EtcdStaleAfter, "etcd-stale-after", cfg.EtcdStaleAfter,
		"not ready after hearing nothing from etcd for this long (the last view is still served)")
	fs.BoolVar(&cfg.InsecureLoopbackSecrets, "insecure-loopback-secrets", cfg.InsecureLoopbackSecrets,
		"without mTLS, send SDS secrets to clients on loopback, unauthenticated (a proxy on this host makes everyone loopback); off: no secrets without mTLS")
	fs.BoolVar(&cfg.InsecureLoopbackDebug, "insecure-loopback-debug", cfg.InsecureLoopbackDebug,
		"without mTLS, let /debug/ answer clients on loopback, unauthenticated (a proxy on this host makes everyone loopback); off: no /debug/ without mTLS")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof,
		"serve Go's profiles at /debug/pprof/ to whom /debug/ answers (admins with mTLS)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", cfg.TLSCertFile,
		"PEM certificate of this replica: the xDS and HTTP ports serve TLS, and relaying to other replicas presents it; reloaded when it changes")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", cfg.TLSKeyFile, "PEM private key of --tls-cert-file; reloaded when it changes")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", cfg.ClientCAFile,
		"PEM CA certificates: the xDS port requires client certificates chaining to them (mTLS), and identities are checked against the authorization rules; reloaded when it changes")
	fs.StringSliceVar(&cfg.ReplicaIdentities, "replica-identity", cfg.ReplicaIdentities,
		"patterns of the SPIFFE IDs replicas present in a URI SAN, each beginning with spiffe:// (relay markers are trusted only from them), comma separated; empty: this replica's own certificate's SPIFFE ID")
	fs.StringVar(&cfg.AuthzDefaultTrustDomain, "authz-default-trust-domain", cfg.AuthzDefaultTrustDomain,
		"with mTLS, let SPIFFE IDs (URI SANs) of this trust domain that have no rule claim any node and group; empty: no rule, no access")
	fs.DurationVar(&cfg.AuthzStaleAfter, "authz-stale-after", cfg.AuthzStaleAfter,
		"with mTLS, refuse new streams (UNAVAILABLE), close live ones and report not ready when etcd has not confirmed the authorization rules for this long")
	// Limits and overload (README, "Limits and overload").
	fs.DurationVar(&cfg.KeepaliveMinTime, "keepalive-min-time", cfg.KeepaliveMinTime,
		"shortest interval between a client's keepalive pings accepted, with or without streams (faster: GOAWAY too_many_pings)")
	fs.DurationVar(&cfg.KeepaliveTime, "keepalive-time", cfg.KeepaliveTime,
		"the kernel sends a TCP keepalive probe after this long with nothing received on a connection (at least 1s)")
	fs.DurationVar(&cfg.KeepaliveTimeout, "keepalive-timeout", cfg.KeepaliveTimeout,
		"close a connection whose client does not answer a keepalive probe or an HTTP/2 ping within this (at least 1s)")
	fs.DurationVar(&cfg.PingTime, "ping-time", cfg.PingTime,
		"send an HTTP/2 ping after this long without activity on an xDS connection (each costs the process some 200µs of CPU)")
	fs.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", cfg.MaxConnectionAge,
		"send GOAWAY to connections older than this (plus or minus 10%); 0: no age")
	fs.DurationVar(&cfg.MaxConnectionAgeGrace, "max-connection-age-grace", cfg.MaxConnectionAgeGrace,
		"time an aged connection's streams get to end before it is cut")
	fs.IntVar(&cfg.MaxConnections, "max-connections", cfg.MaxConnections,
		"connections open at once on --xds-addr (clients and relaying replicas); one more is closed as soon as accepted; 0: no bound")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", cfg.HandshakeTimeout,
		"a new connection on --xds-addr not through its TLS and HTTP/2 handshakes within this is closed")
	fs.IntVar(&cfg.MaxStreamsPerConn, "max-streams-per-conn", cfg.MaxStreamsPerConn,
		"streams one client connection may hold open (relay connections between replicas exempt); 0: no bound")
	fs.Float64Var(&cfg.StreamRate, "stream-rate", cfg.StreamRate,
		"new streams admitted per second; one over it waits up to 1s, then gets RESOURCE_EXHAUSTED; 0: no rate")
	fs.IntVar(&cfg.StreamBurst, "stream-burst", cfg.StreamBurst, "new streams admitted at once above --stream-rate")
	fs.Float64Var(&cfg.RelayStreamRate, "relay-stream-rate", cfg.RelayStreamRate,
		"streams relayed here by other replicas admitted per second (their own budget, apart from --stream-rate); one over it waits up to 1s, then gets RESOURCE_EXHAUSTED; 0: no rate")
	fs.IntVar(&cfg.RelayStreamBurst, "relay-stream-burst", cfg.RelayStreamBurst, "relayed streams admitted at once above --relay-stream-rate")
	fs.IntVar(&cfg.MaxRelayedStreams, "max-relayed-streams", cfg.MaxRelayedStreams,
		"streams relayed here by other replicas open at once; beyond: RESOURCE_EXHAUSTED; 0: no bound")
	fs.BoolVar(&cfg.GCBetweenPushes, "gc-between-pushes", cfg.GCBetweenPushes,
		"experimental, off by default: collect garbage in the quiet after a push (when the heap is past half the way to the next collection), not during the next one, and skip the runtime's forced collection every 2 minutes while quiet, by changing the process-wide GC settings (GOGC, memory limit); false: leave it to the Go runtime")
	fs.IntVar(&cfg.MaxStreams, "max-streams", cfg.MaxStreams, "streams open at once on this replica; beyond: RESOURCE_EXHAUSTED; 0: no bound")
	fs.Float64Var(&cfg.MaxStreamsShare, "max-streams-share", cfg.MaxStreamsShare,
		"cap the streams open at this multiple of the replica's fair share of the cluster's (at least 100; in a cluster only); 0: no cap")
	fs.DurationVar(&cfg.HTTPReadTimeout, "http-read-timeout", cfg.HTTPReadTimeout, "bound on reading an HTTP request, headers and body")
	fs.IntVar(&cfg.HTTPMaxConns, "http-max-conns", cfg.HTTPMaxConns,
		"HTTP connections open at once; beyond, the one idle longest is closed, or if none is idle the new one waits in the listen queue; 0: no bound")
	fs.StringVar(&cfg.ProbeAddr, "probe-addr", cfg.ProbeAddr,
		"listen address serving /healthz and /readyz alone, in plain HTTP, apart from --http-addr (for the kubelet's probes); empty: none")
	fs.IntVar(&cfg.HTTPMaxConnsPerIP, "http-max-conns-per-ip", cfg.HTTPMaxConnsPerIP,
		"HTTP connections one client IP may hold open; beyond, one of its idle ones is closed, or if none is idle the new one is refused (503); 0: no bound")
	fs.IntVar(&cfg.MaxCSDSMatchers, "max-csds-matchers", cfg.MaxCSDSMatchers,
		"node matchers one CSDS request may hold; more: INVALID_ARGUMENT; 0: no bound")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: xds-node [flags]\n\n"+
			"One Legation replica. With no flag: dev mode, an embedded etcd on 127.0.0.1:2379.\n"+
			"Each flag can also be set as LEGATION_<FLAG> (e.g. LEGATION_ETCD_ENDPOINTS);\n"+
			"a flag given on the command line wins, and an empty variable is ignored.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// Kept, hidden, only to say what replaced it.
	fs.Bool(flagDebugOpen, false, "removed: see --insecure-loopback-debug")
	_ = fs.MarkHidden(flagDebugOpen)
	return fs, logLevel, logFormat
}

// flagDebugOpen is a removed flag: it let /debug/ answer any client
// without mTLS.
const flagDebugOpen = "debug-open"

// errDebugOpen is parseFlags' error for --debug-open.
var errDebugOpen = errors.New("--debug-open was removed: nothing is trusted for being on loopback or on the network without mTLS; " +
	"without mTLS, use --insecure-loopback-debug, which opens /debug/ to loopback clients only (and --pprof Go's profiles); with mTLS, /debug/ answers admins")

// applyEnv sets each flag not given on the command line from its
// LEGATION_* variable, when that is set and not empty; but
// LEGATION_ETCD_PASSWORD is the password itself, which the refused
// --etcd-password never takes (etcdconn's LoadPassword reads it).
func applyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == etcdconn.FlagPassword {
			return
		}
		env := "LEGATION_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := os.Getenv(env)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", env, v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// loopbackDefault is addr with an empty host replaced by 127.0.0.1.
func loopbackDefault(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// cleanList trims the items of a comma list and drops empty ones, so
// "a, b," means [a b].
func cleanList(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newLogger returns a slog logger writing to stderr.
func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

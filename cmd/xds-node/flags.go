package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/replica"
)

// newFlagSet is xds-node's flag set, bound to cfg's fields, with the
// --log-level and --log-format values it returns beside. The Helm chart's
// test (chart_test.go) checks the chart's arguments against it. The
// flags are defined, and listed by --help, by area, in the order below;
// docs/reference/xds-node.md has a table per area.
func newFlagSet(cfg *replica.Config) (fs *pflag.FlagSet, logLevel, logFormat *string) {
	fs = pflag.NewFlagSet("xds-node", pflag.ContinueOnError)
	fs.SortFlags = false
	area := func(title string, define func()) { defineArea(fs, title, define) }
	area("etcd", func() { etcdFlags(fs, cfg) })
	area("Listen addresses", func() { listenFlags(fs, cfg) })
	area("Cluster", func() { clusterFlags(fs, cfg) })
	area("Logs", func() { logLevel, logFormat = logFlags(fs) })
	area("Shutdown", func() { shutdownFlags(fs, cfg) })
	area("xDS streams", func() { streamFlags(fs, cfg) })
	area("Cluster upkeep", func() { upkeepFlags(fs, cfg) })
	area("Load reporting (LRS)", func() { lrsFlags(fs, cfg) })
	area("Readiness", func() { readinessFlags(fs, cfg) })
	area("Security", func() { securityFlags(fs, cfg) })
	area("Connections", func() { connectionFlags(fs, cfg) })
	area("Overload", func() { overloadFlags(fs, cfg) })
	area("HTTP", func() { httpFlags(fs, cfg) })
	area("CSDS", func() { csdsFlags(fs, cfg) })
	area("Version", func() {
		fs.Bool(flagVersion, false, "print the version (CHANGELOG.md's latest release) and the build's VCS revision, and exit")
	})
	fs.Usage = func() { printUsage(os.Stderr, fs) }
	// Kept, hidden, only to say what replaced it.
	fs.Bool(flagDebugOpen, false, "removed: see --insecure-loopback-debug")
	_ = fs.MarkHidden(flagDebugOpen)
	return fs, logLevel, logFormat
}

// usageHead is what --help prints before the flags.
const usageHead = `Usage: xds-node [flags]

One Legation replica. With no --etcd-endpoints: dev mode, an embedded etcd on 127.0.0.1:2379,
and the xDS, HTTP and gossip listeners on 127.0.0.1 unless their flags are given.
Each flag can also be set as LEGATION_<FLAG> (e.g. LEGATION_ETCD_ENDPOINTS);
a flag given on the command line wins, and an empty variable is ignored.
`

// usageExamples is the "Examples:" part of --help; a test parses each
// command and docs/reference/xds-node.md shows them.
const usageExamples = `  # dev mode: an embedded etcd in ./legation-data, every listener on 127.0.0.1
  xds-node
  # dev mode, reachable from the network
  xds-node --xds-addr :18000 --http-addr :18001
  # a replica of a cluster: etcd over TLS, the replica's certificate, mTLS for clients and replicas
  xds-node --etcd-endpoints https://etcd-0:2379,https://etcd-1:2379,https://etcd-2:2379 \
    --etcd-cacert etcd-ca.pem --etcd-cert etcd-client.pem --etcd-key etcd-client-key.pem \
    --name replica-0 --tls-cert-file tls.crt --tls-key-file tls.key --client-ca-file ca.crt \
    --gossip-key-file /etc/legation/gossip.keys
  # a single replica on an existing etcd, out of any cluster
  xds-node --etcd-endpoints 10.0.0.5:2379 --standalone --log-format json
`

// areaAnnotation is the flag annotation holding a flag's area.
const areaAnnotation = "xds-node.area"

// defineArea runs define, which defines flags on fs, and marks the flags
// it defined as of the area title.
func defineArea(fs *pflag.FlagSet, title string, define func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	define()
	fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] {
			_ = fs.SetAnnotation(f.Name, areaAnnotation, []string{title})
		}
	})
}

// A flagArea is the flags of one area, in their order.
type flagArea struct {
	title string
	flags []*pflag.Flag
}

// flagAreas are fs's areas, in their order, with their flags that --help
// lists.
func flagAreas(fs *pflag.FlagSet) []flagArea {
	var out []flagArea
	fs.VisitAll(func(f *pflag.Flag) {
		title := f.Annotations[areaAnnotation]
		if f.Hidden || len(title) == 0 {
			return
		}
		if len(out) == 0 || out[len(out)-1].title != title[0] {
			out = append(out, flagArea{title: title[0]})
		}
		out[len(out)-1].flags = append(out[len(out)-1].flags, f)
	})
	return out
}

// printUsage writes --help: the head, the flags area by area, the
// examples.
func printUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprint(w, usageHead)
	for _, a := range flagAreas(fs) {
		sub := pflag.NewFlagSet(a.title, pflag.ContinueOnError)
		sub.SortFlags = false
		for _, f := range a.flags {
			sub.AddFlag(f)
		}
		fmt.Fprintf(w, "\n%s:\n%s", a.title, sub.FlagUsages())
	}
	fmt.Fprintf(w, "\nExamples:\n%s", usageExamples)
}

// envName is the environment variable that sets the flag name:
// LEGATION_ and the name in capitals with '_' for '-'.
func envName(name string) string {
	return "LEGATION_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagVersion prints the version and exits. It is no setting, so no
// LEGATION_VERSION variable sets it.
const flagVersion = "version"

// errVersion is parseFlags' answer to --version: main prints the version
// and exits 0.
var errVersion = errors.New("--version")

// flagDebugOpen is a removed flag: it let /debug/ answer any client
// without mTLS.
const flagDebugOpen = "debug-open"

// errDebugOpen is parseFlags' error for --debug-open.
var errDebugOpen = errors.New("--debug-open was removed: nothing is trusted for being on loopback or on the network without mTLS; " +
	"without mTLS, use --insecure-loopback-debug, which opens /debug/ to loopback clients only (and --pprof Go's profiles); with mTLS, /debug/ answers admins")

// etcdFlags defines the flags of where etcd is and how to reach it, or
// in dev mode where the embedded one keeps its data and serves.
func etcdFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", cfg.EtcdEndpoints,
		"etcd endpoints, comma separated (host:port, http://host:port or https://host:port; all http:// or all https://); empty: dev mode, an embedded single-member etcd")
	cfg.EtcdSecurity.AddFlags(fs)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "embedded etcd data directory (dev mode only)")
	fs.StringVar(&cfg.DevEtcdAddr, "dev-etcd-addr", cfg.DevEtcdAddr,
		"client address of the embedded etcd (dev mode only; xdsadmin's default endpoint)")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "etcd key prefix; starts and ends with '/'")
}

// listenFlags defines the xDS and HTTP listen addresses.
func listenFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.StringVar(&cfg.XDSAddr, "xds-addr", cfg.XDSAddr, "gRPC listen address: ADS (SotW and delta), the per-type xDS services, CSDS, LRS, gRPC health")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address: REST-JSON /v3/discovery:*, /healthz, /readyz, /metrics, /debug/view, /debug/streams")
}

// clusterFlags defines how the replica gossips with and joins the
// others, or stays alone, its name, and how a node's group is derived.
func clusterFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", cfg.GossipAddr,
		"memberlist bind address, ip:port (UDP and TCP; etcd mode)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", cfg.AdvertiseAddr,
		"ip[:port] other replicas use for gossip and relaying xDS streams; empty: the host of --xds-addr or --gossip-addr if not a wildcard, else the machine's first private address")
	fs.StringSliceVar(&cfg.Join, "join", cfg.Join,
		"seed replicas' gossip addresses, comma separated host[:port]; empty: discover peers through etcd")
	fs.StringVar(&cfg.GossipKeyFile, "gossip-key-file", cfg.GossipKeyFile,
		"gossip keyring file: one base64 key (16, 24 or 32 bytes) a line, the first encrypts, all decrypt; re-read while running; etcd mode only, not with --standalone; empty: gossip unencrypted and unauthenticated (a warning at start)")
	fs.BoolVar(&cfg.Standalone, "standalone", cfg.Standalone,
		"in etcd mode, stay out of any cluster: no gossip, no registry, no relaying; serve every node that connects here")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "replica name, unique in the cluster; every xDS response carries it in control_plane.identifier")
	fs.StringVar(&cfg.GroupBy, "group-by", cfg.GroupBy, "how a node's group (its scope besides default) is derived from its Node: cluster, id or metadata:KEY (a string field of its metadata)")
	fs.StringSliceVar(&cfg.Authorities, "authority", cfg.Authorities,
		"xdstp:// authorities this cluster serves, comma separated or repeated: resources named xdstp://AUTHORITY/... of any other are not served, and a client asking for one is told so; old-style names and xdstp:/// (the empty authority) are always served")
}

// logFlags defines the level and format of the logs, and returns their
// values.
func logFlags(fs *pflag.FlagSet) (level, format *string) {
	level = fs.String("log-level", "info", "log level: debug, info, warn or error")
	format = fs.String("log-format", "text", "log format: text or json")
	return level, format
}

// shutdownFlags defines the pace of the shutdown on SIGTERM or SIGINT.
func shutdownFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout,
		"on SIGTERM or SIGINT, once --drain-period is over, how long to let what is left of streams and requests finish before cutting them; the whole shutdown takes at most --drain-period plus this, plus up to 2s to leave the cluster")
	fs.DurationVar(&cfg.DrainPeriod, "drain-period", cfg.DrainPeriod,
		"on SIGTERM or SIGINT, once not ready and out of the cluster, close the xDS streams with UNAVAILABLE spread (jittered) over this period, refusing new ones; at most 10m; 0: all at once")
}

// streamFlags defines how an xDS stream is served and the bounds on
// what its client sends and takes.
func streamFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.CatchupTimeout, "catchup-timeout", cfg.CatchupTimeout,
		"how long a client presenting a version newer than this replica's view waits for it before its stream ends with UNAVAILABLE")
	fs.BoolVar(&cfg.SotwTrustVersion, "sotw-trust-version", cfg.SotwTrustVersion,
		"on a new SotW stream, send named resources (EDS, RDS) only if changed since the version presented; only for fleets whose SotW clients are all Envoy")
	fs.IntVar(&cfg.MaxRecvMsgSize, "max-recv-msg-size", cfg.MaxRecvMsgSize,
		"largest xDS request message accepted, in bytes; a larger one ends the stream with RESOURCE_EXHAUSTED")
	fs.DurationVar(&cfg.FirstRequestTimeout, "first-request-timeout", cfg.FirstRequestTimeout,
		"an xDS stream that sends no request for this long ends with DEADLINE_EXCEEDED; 0: no bound")
	fs.IntVar(&cfg.MaxNames, "max-names", cfg.MaxNames,
		"most resource names an xDS stream may subscribe to per type (and delta initial_resource_versions entries); beyond: RESOURCE_EXHAUSTED; 0: no bound")
	fs.IntVar(&cfg.MaxSubscribedBytes, "max-subscribed-bytes-per-stream", cfg.MaxSubscribedBytes,
		"most an xDS stream's subscriptions may cost over all its types together, in bytes: each name its length plus 64; beyond: RESOURCE_EXHAUSTED; 0: no bound")
	fs.IntVar(&cfg.MaxSubscribedBytesPerConn, "max-subscribed-bytes-per-conn", cfg.MaxSubscribedBytesPerConn,
		"most the subscriptions of all the xDS streams of one client connection may cost together, in bytes (as --max-subscribed-bytes-per-stream; relay connections between replicas not counted); beyond: RESOURCE_EXHAUSTED; 0: no bound")
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
}

// upkeepFlags defines the rates the replica spends on the cluster's
// upkeep: moving streams after a membership change, writing status
// records.
func upkeepFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.Float64Var(&cfg.RebalanceRate, "rebalance-rate", cfg.RebalanceRate,
		"streams each replica closes per second (with jitter) when a membership change moves their node's home; keep it at most --stream-rate (a warning at start otherwise)")
	fs.DurationVar(&cfg.RingDamping, "ring-damping", cfg.RingDamping,
		"how long a replica that gossip declared dead keeps its nodes while its etcd registration is live and its xDS port does not refuse connections (this replica's awake time): one that was only slow refutes it and nothing moves; a crashed one (port refused) or one whose lease expired leaves the ring at once; negative: none")
	fs.Float64Var(&cfg.StatusWriteBudget, "status-write-budget", cfg.StatusWriteBudget,
		"etcd transactions per second (each up to 64 node status records) this replica spends at most on status records; the rest waits, coalesced by node")
	fs.BoolVar(&cfg.RolloutController, "rollout-controller", cfg.RolloutController,
		"stand for election to run the rollout controller, which promotes and aborts canary rollouts (its etcd user then needs the role legation-rollouts with etcd auth); false: rollouts wait for xdsadmin rollout promote or abort")
}

// lrsFlags defines the load reporting (LRS) service's interval, windows
// and bounds.
func lrsFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.LRSInterval, "lrs-interval", cfg.LRSInterval,
		"LRS: the load_reporting_interval sent to clients, and the length of the load windows each replica publishes to etcd (1s to 1h)")
	fs.IntVar(&cfg.LRSWindows, "lrs-windows", cfg.LRSWindows,
		"LRS: how many of its last load windows each replica keeps in etcd (1 to 1000)")
	fs.StringSliceVar(&cfg.LRSClusters, "lrs-clusters", cfg.LRSClusters,
		"LRS: the only clusters clients are asked to report on, comma separated; empty: all (send_all_clusters)")
	fs.Float64Var(&cfg.LRSMaxRate, "lrs-max-rate", cfg.LRSMaxRate,
		"LRS: the requests per second one node may report, on average over a window; cluster stats beyond are refused and counted")
	fs.IntVar(&cfg.LRSMaxRowsPerNode, "lrs-max-rows-per-node", cfg.LRSMaxRowsPerNode,
		"LRS: the rows (cluster, service, locality) one node may add to a load window (1 to 2000); beyond, its rows are summed into one of its own")
}

// readinessFlags defines when silence from etcd makes the replica not
// ready.
func readinessFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.EtcdStaleAfter, "etcd-stale-after", cfg.EtcdStaleAfter,
		"not ready after hearing nothing from etcd for this long (the last view is still served)")
}

// securityFlags defines the replica's TLS, mTLS and authorization, and
// what is served without mTLS.
func securityFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.BoolVar(&cfg.InsecureLoopbackSecrets, "insecure-loopback-secrets", cfg.InsecureLoopbackSecrets,
		"without mTLS, send SDS secrets to clients on loopback, unauthenticated (a proxy on this host makes everyone loopback); off: no secrets without mTLS; no effect with mTLS")
	fs.BoolVar(&cfg.InsecureLoopbackDebug, "insecure-loopback-debug", cfg.InsecureLoopbackDebug,
		"without mTLS, let /debug/ answer clients on loopback, unauthenticated (a proxy on this host makes everyone loopback); off: no /debug/ without mTLS; no effect with mTLS, where /debug/ answers admins")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof,
		"serve Go's profiles at /debug/pprof/ to whom /debug/ answers (admins with mTLS)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", cfg.TLSCertFile,
		"PEM certificate of this replica (leaf first, then intermediates), with --tls-key-file: the xDS and HTTP ports serve TLS, and relaying to other replicas presents it; reloaded when it changes")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", cfg.TLSKeyFile, "PEM private key of --tls-cert-file; reloaded when it changes")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", cfg.ClientCAFile,
		"PEM CA certificates: the xDS port requires client certificates chaining to them (mTLS), replicas' too, and identities are checked against the authorization rules; needs --tls-cert-file, and is required with it in a cluster; reloaded when it changes")
	fs.StringSliceVar(&cfg.ReplicaIdentities, "replica-identity", cfg.ReplicaIdentities,
		"patterns of the SPIFFE IDs replicas present in a URI SAN, each beginning with spiffe:// (relay markers are trusted only from them), comma separated; empty: this replica's own certificate's SPIFFE ID")
	fs.StringVar(&cfg.AuthzDefaultTrustDomain, "authz-default-trust-domain", cfg.AuthzDefaultTrustDomain,
		"with mTLS, let SPIFFE IDs (URI SANs) of this trust domain that have no rule claim any node and group; empty: no rule, no access")
	fs.DurationVar(&cfg.AuthzStaleAfter, "authz-stale-after", cfg.AuthzStaleAfter,
		"with mTLS, refuse new streams (UNAVAILABLE), close live ones and report not ready when etcd has not confirmed the authorization rules for this long; at least 2s")
}

// connectionFlags defines the bounds on the connections on --xds-addr:
// keepalives, age, count and handshake.
func connectionFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.KeepaliveMinTime, "keepalive-min-time", cfg.KeepaliveMinTime,
		"shortest interval between a client's keepalive pings accepted, with or without streams (faster: GOAWAY too_many_pings)")
	fs.DurationVar(&cfg.KeepaliveTime, "keepalive-time", cfg.KeepaliveTime,
		"the kernel sends TCP keepalive probes after this long with nothing received on a connection (plus or minus 10% on the xDS port; at least 1s)")
	fs.DurationVar(&cfg.KeepaliveTimeout, "keepalive-timeout", cfg.KeepaliveTimeout,
		"close a connection whose client answers none of 3 keepalive probes, or not an HTTP/2 ping, within this (at least 1s)")
	fs.DurationVar(&cfg.PingTime, "ping-time", cfg.PingTime,
		"send an HTTP/2 ping after this long without activity on an xDS connection, and close it without an answer within --keepalive-timeout (each ping costs the process some 90µs of CPU); behind a proxy that ends TCP, what a dead client may hold, e.g. 5m")
	fs.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", cfg.MaxConnectionAge,
		"send GOAWAY to connections older than this (plus or minus 10%); 0: no age")
	fs.DurationVar(&cfg.MaxConnectionAgeGrace, "max-connection-age-grace", cfg.MaxConnectionAgeGrace,
		"time an aged connection's streams get to end before it is cut")
	fs.IntVar(&cfg.MaxConnections, "max-connections", cfg.MaxConnections,
		"connections open at once on --xds-addr (clients and relaying replicas); one more is closed as soon as accepted; 0: no bound")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", cfg.HandshakeTimeout,
		"a new connection on --xds-addr not through its TLS and HTTP/2 handshakes within this is closed")
}

// overloadFlags defines the bounds on the streams admitted and open,
// the relayed ones apart, and the experimental collection between
// pushes.
func overloadFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.IntVar(&cfg.MaxStreamsPerConn, "max-streams-per-conn", cfg.MaxStreamsPerConn,
		"streams one client connection may hold open (relay connections between replicas exempt); 0: no bound")
	fs.Float64Var(&cfg.StreamRate, "stream-rate", cfg.StreamRate,
		"new streams admitted per second, in turns fair between clients (identities with mTLS, source addresses in plain text); one over it waits up to 1s, then gets RESOURCE_EXHAUSTED; 0: no rate")
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
		"cap the streams open at this multiple of the replica's fair share of the cluster's (never below 100 streams; in a cluster only); 0: no cap, else at least 1, e.g. 1.1")
}

// httpFlags defines the bounds on the HTTP connections and requests,
// and the probes' own listener.
func httpFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.DurationVar(&cfg.HTTPReadTimeout, "http-read-timeout", cfg.HTTPReadTimeout, "bound on reading an HTTP request, headers and body")
	fs.IntVar(&cfg.HTTPMaxConns, "http-max-conns", cfg.HTTPMaxConns,
		"HTTP connections open at once; beyond, the one idle longest is closed, or if none is idle the new one waits in the listen queue; 0: no bound")
	fs.StringVar(&cfg.ProbeAddr, "probe-addr", cfg.ProbeAddr,
		"listen address serving /healthz and /readyz alone, in plain HTTP, apart from --http-addr (for the kubelet's probes); empty: none")
	fs.IntVar(&cfg.HTTPMaxConnsPerIP, "http-max-conns-per-ip", cfg.HTTPMaxConnsPerIP,
		"HTTP connections one client IP may hold open; beyond, one of its idle ones is closed, or if none is idle the new one is refused (503); 0: no bound")
}

// csdsFlags defines the bound on what one CSDS request may ask.
func csdsFlags(fs *pflag.FlagSet, cfg *replica.Config) {
	fs.IntVar(&cfg.MaxCSDSMatchers, "max-csds-matchers", cfg.MaxCSDSMatchers,
		"node matchers one CSDS request may hold; more: INVALID_ARGUMENT; 0: no bound")
}

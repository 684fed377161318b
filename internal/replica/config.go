package replica

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/state/etcdconn"
	"github.com/legation-io/legation/internal/tracing"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Config configures a Node. Each field but Logger, Registerer and Gatherer
// is a flag of xds-node (docs/reference/xds-node.md); errors from Validate name the
// flag.
type Config struct {
	// EtcdEndpoints are the etcd servers (--etcd-endpoints), as host:port,
	// http://host:port or https://host:port (all http:// or all
	// https://). Empty: dev mode, an embedded single-member etcd in
	// DataDir serving on DevEtcdAddr.
	EtcdEndpoints []string
	// EtcdSecurity is TLS and authentication to etcd (--etcd-cacert,
	// --etcd-cert, --etcd-key, --etcd-username, --etcd-password or
	// LEGATION_ETCD_PASSWORD; see package etcdconn). Etcd mode only: dev
	// mode's embedded etcd is plain text without authentication. Zero:
	// neither, unless an endpoint is https://. With a username, New
	// authenticates to etcd (etcd's client does, in clientv3.New), so etcd
	// must answer within DialTimeout; with a client certificate alone (its
	// CN the etcd user) New needs no etcd.
	EtcdSecurity etcdconn.Security
	// DataDir holds the embedded etcd's data (--data-dir). Dev mode only.
	DataDir string
	// DevEtcdAddr is the host:port the embedded etcd serves clients on
	// (--dev-etcd-addr). Dev mode only. The default, 127.0.0.1:2379, is
	// where xdsadmin looks by default. Port 0 picks a free port.
	DevEtcdAddr string
	// EtcdPrefix is the etcd key prefix (--etcd-prefix); it starts and
	// ends with '/'.
	EtcdPrefix string
	// XDSAddr is the gRPC listen address (--xds-addr): ADS (SotW and
	// delta), the per-type xDS services and the standard gRPC health
	// service.
	XDSAddr string
	// HTTPAddr is the HTTP listen address (--http-addr): REST-JSON
	// /v3/discovery:*, /healthz, /readyz, /metrics, /debug/view,
	// /debug/streams and /debug/cluster.
	HTTPAddr string
	// GossipAddr is the memberlist bind address (--gossip-addr), UDP and
	// TCP; its host must be an IP address or empty. Etcd mode only: in dev
	// mode the replica is alone.
	GossipAddr string
	// AdvertiseAddr is the address other replicas use for gossip and
	// relaying xDS streams (--advertise-addr), as ip or ip:port (the
	// gossip port). Empty: the host of --xds-addr or --gossip-addr when
	// not a wildcard, else the machine's first private address.
	AdvertiseAddr string
	// Join lists seed replicas' gossip addresses as host or host:port
	// (--join; the port defaults to --gossip-addr's, or 7946). Empty:
	// discover peers through the etcd registry.
	Join []string
	// GossipKeyFile (--gossip-key-file) is the gossip keyring, one base64
	// key a line, the first encrypting (shard.ReadKeyFile): gossip is
	// then encrypted and authenticated, and the file is re-read while the
	// replica runs, so keys rotate without a restart. Empty: gossip in
	// clear, with a warning at start. Etcd mode only, and not with
	// Standalone: a replica that gossips with no one refuses it, so that a
	// forgotten --etcd-endpoints does not pass for an encrypted cluster.
	GossipKeyFile string
	// Standalone (--standalone) keeps a replica in etcd mode out of any
	// cluster: no gossip, no registry, no relaying; it serves every node
	// that connects. Dev mode is always standalone.
	Standalone bool
	// RebalanceRate bounds how many streams per second are closed, with
	// jitter, when a membership change moved their node's home
	// (--rebalance-rate); their clients reconnect to the new home. Must
	// be positive.
	RebalanceRate float64
	// RingDamping (--ring-damping) is how long a replica that gossip
	// declared dead stays on the ring while its registration in etcd is
	// live, in this replica's awake time: one that was slow, not dead,
	// keeps its nodes (shard.Config.RingDamping). A replica whose xDS
	// port refuses connections (crashed, killed) or whose lease expired
	// leaves the ring at once; a killed replica's nodes fail over at once
	// regardless (a stream whose home does not answer is relayed to the
	// next replica). Negative: none. Zero: the default.
	RingDamping time.Duration
	// EtcdStaleAfter (--etcd-stale-after): a replica that heard nothing
	// from etcd for longer (not even a progress notification, asked for
	// every second) reports not ready, and leaves the ring's homes to
	// ready replicas, while it keeps serving its last view. Must be
	// positive.
	EtcdStaleAfter time.Duration
	// StatusWriteBudget (--status-write-budget) bounds this replica's
	// writes of node status records: etcd transactions per second, each
	// of up to 64 records, whatever the number of nodes it serves. What
	// changes beyond it waits, coalesced by node, for the next seconds.
	// Must be positive.
	StatusWriteBudget float64
	// RolloutController (--rollout-controller) has the replica stand for
	// election to run the rollout controller (package canary), which
	// promotes and aborts canary rollouts: it writes resources, apply
	// markers, history and rollouts, which with etcd auth needs the role
	// legation-rollouts.
	RolloutController bool
	// LRSInterval (--lrs-interval) is the load_reporting_interval sent to
	// every LRS client, and the length of the windows each replica rolls
	// their reports up into and publishes to etcd (one transaction per
	// window). From 1s to 1h.
	LRSInterval time.Duration
	// LRSWindows (--lrs-windows) is how many of its last load windows
	// each replica keeps in etcd. From 1 to 1000.
	LRSWindows int
	// LRSClusters (--lrs-clusters), if not empty, are the only clusters
	// LRS clients are asked to report on; empty: send_all_clusters.
	LRSClusters []string
	// LRSMaxRate (--lrs-max-rate) bounds the requests one node may report
	// per second, on average over a window (lrs.Config.MaxRate): cluster
	// stats beyond are refused and counted. At least 1.
	LRSMaxRate float64
	// LRSMaxRowsPerNode (--lrs-max-rows-per-node) bounds the rows one node
	// adds to a load window (lrs.Config.MaxRowsPerNode); beyond, its rows
	// are summed into one of its own. From 1 to 2000.
	LRSMaxRowsPerNode int
	// Name is the replica's name (--name). DefaultConfig uses the
	// hostname.
	Name string
	// GroupBy says how a node's group is derived from its Node message
	// (--group-by): "cluster", "id" or "metadata:KEY".
	GroupBy string
	// Authorities are the xdstp:// authorities the replica serves
	// (--authority): resources named xdstp://AUTHORITY/... of another
	// are not served, and a client asking for one is told so. Old-style
	// names and those of the empty authority are always served.
	Authorities []string
	// DialTimeout bounds etcd client set-up calls. Connecting itself does
	// not block: until etcd answers, the view retries and /readyz says 503.
	// Zero: no bound.
	DialTimeout time.Duration
	// ShutdownTimeout is the graceful stop budget once Run's ctx ends and
	// the drain (DrainPeriod) is over (--shutdown-timeout): gRPC streams
	// and HTTP requests still open after it are cut. The whole shutdown
	// takes at most DrainPeriod plus ShutdownTimeout (plus up to 2s to
	// leave the cluster). Zero: cut at once after the drain.
	ShutdownTimeout time.Duration
	// DrainPeriod (--drain-period) is how long, once Run's ctx ends and
	// the replica is not ready and has left the cluster, it takes to
	// close its xDS streams, local and relayed, each with UNAVAILABLE:
	// spread evenly over the period with jitter, so that their clients
	// reconnect to the other replicas gradually, not in one storm. Streams
	// arriving meanwhile are refused with UNAVAILABLE. ShutdownTimeout
	// starts after it. Zero: all closed at once.
	DrainPeriod time.Duration
	// CatchupTimeout bounds the wait for the view to reach a version a
	// client presents (--catchup-timeout); after it the stream ends with
	// UNAVAILABLE. Must be positive.
	CatchupTimeout time.Duration
	// SotwTrustVersion (--sotw-trust-version): named SotW requests on a
	// new stream presenting a version get only what changed since; for
	// fleets whose SotW clients are all Envoy.
	SotwTrustVersion bool
	// MaxRecvMsgSize bounds a request message on --xds-addr
	// (--max-recv-msg-size); larger ones end the stream with
	// RESOURCE_EXHAUSTED. Must be positive.
	MaxRecvMsgSize int
	// FirstRequestTimeout (--first-request-timeout): a stream that sends
	// no request for that long ends with DEADLINE_EXCEEDED. Zero: no
	// bound.
	FirstRequestTimeout time.Duration
	// MaxNames (--max-names) bounds the names a stream subscribes to per
	// type (SotW resource_names, delta subscriptions as they accumulate,
	// VHDS aliases included) and the entries of delta
	// initial_resource_versions; beyond it the stream ends with
	// RESOURCE_EXHAUSTED. Zero: no bound.
	MaxNames int
	// MaxSubscribedBytes (--max-subscribed-bytes-per-stream) bounds what
	// the names a stream subscribes to cost over all its types together
	// (each its length plus xdsstream.NameOverhead); beyond it the stream
	// ends with RESOURCE_EXHAUSTED. Zero: no bound.
	MaxSubscribedBytes int
	// MaxSubscribedBytesPerConn (--max-subscribed-bytes-per-conn) bounds
	// the same over all the streams of one client connection (relay
	// connections between replicas not counted). Zero: no bound.
	MaxSubscribedBytesPerConn int
	// MaxNameLength (--max-name-length) bounds a resource name in a
	// request, in bytes; a longer one ends the stream with
	// INVALID_ARGUMENT. Zero: no bound.
	MaxNameLength int
	// MaxNodeIDLength (--max-node-id-length) bounds a request's node id,
	// in bytes, on streams and polls; a longer one is INVALID_ARGUMENT.
	// Zero: no bound.
	MaxNodeIDLength int
	// MaxVHDSGroups (--max-vhds-groups) bounds the VHDS alias indexes
	// kept per revision, one per node group with virtual hosts of its
	// own; a delta stream needing one more ends with RESOURCE_EXHAUSTED.
	// Zero: no bound.
	MaxVHDSGroups int
	// MaxNackMessage (--max-nack-message) bounds the bytes of a NACK's
	// message kept and logged; the rest is cut, and the cut marked. Zero:
	// no bound.
	MaxNackMessage int
	// SendTimeout (--send-timeout): a stream (relayed ones too) whose
	// client takes no response for that long ends with UNAVAILABLE, and
	// the snapshots it held are freed. Zero: no bound.
	SendTimeout time.Duration
	// Without mTLS nothing tells who a client is; being on loopback does
	// not either (behind a sidecar, HAProxy or kubectl port-forward on the
	// same host every client is on loopback). So without mTLS secrets and
	// /debug/ are off unless the operator takes that risk by name.
	//
	// InsecureLoopbackSecrets (--insecure-loopback-secrets), without
	// mTLS, sends SDS secrets (gRPC and REST-JSON) to clients on loopback
	// (127.0.0.0/8, ::1); false: to no one. No effect with mTLS, where
	// secrets go to the authorized clients (a Warn at start says so).
	InsecureLoopbackSecrets bool
	// InsecureLoopbackDebug (--insecure-loopback-debug), without mTLS,
	// lets /debug/ answer clients on loopback; false: /debug/ answers no
	// one. No effect with mTLS, where /debug/ answers admins.
	InsecureLoopbackDebug bool
	// Pprof (--pprof) serves Go's profiles at /debug/pprof/, to whom
	// /debug/ answers (admins with mTLS, loopback clients with
	// InsecureLoopbackDebug without). False: /debug/pprof/ is off (404).
	Pprof bool
	// TLSCertFile and TLSKeyFile (--tls-cert-file, --tls-key-file) are
	// the replica's certificate and key, PEM: with them the xDS and HTTP
	// ports serve TLS, and replicas relay to each other over mTLS with
	// them. Both or neither. Reloaded when they change.
	TLSCertFile string
	TLSKeyFile  string
	// ClientCAFile (--client-ca-file), PEM, needs TLSCertFile: the xDS
	// port then requires client certificates that chain to it, the
	// client's identity decides what it may claim (authorization rules in
	// etcd), and the REST endpoints, CSDS and /debug/ require one too.
	// Replicas' certificates must chain to it. Reloaded when it changes.
	ClientCAFile string
	// ReplicaIdentities (--replica-identity) are patterns ('*' any run,
	// '?' one character) of the identities replicas present: only their
	// relay markers and forwarded client identities are trusted. Each is
	// a SPIFFE ID pattern ("spiffe://..."), matched against SPIFFE IDs
	// from URI SANs only, never against a DNS SAN or CommonName. Empty:
	// the identity of the replica's own certificate, which must then be a
	// SPIFFE ID in a cluster.
	ReplicaIdentities []string
	// AuthzDefaultTrustDomain (--authz-default-trust-domain): a SPIFFE
	// identity of this trust domain with no rule may claim any node id and
	// group (not admin). Empty: no rule, no access.
	AuthzDefaultTrustDomain string
	// AuthzStaleAfter (--authz-stale-after), with mTLS: rules that etcd
	// has not confirmed for longer (no watch answer, progress
	// notification or reload, as when the replica is cut off from etcd)
	// may miss a revocation, so new streams and admin calls are refused
	// with UNAVAILABLE, live streams are closed, and /readyz says 503,
	// until etcd answers. Must be at least 2s (the rules' watch asks for
	// progress every second).
	AuthzStaleAfter time.Duration

	// Limits and overload (docs/operations/running-a-cluster.md; package limits).

	// KeepaliveMinTime (--keepalive-min-time) is the shortest interval
	// between a client's HTTP/2 keepalive pings the xDS port accepts,
	// with or without streams; a client pinging more often is sent
	// GOAWAY too_many_pings. Must be positive.
	KeepaliveMinTime time.Duration
	// KeepaliveTime (--keepalive-time) and KeepaliveTimeout
	// (--keepalive-timeout) find dead peers on the xDS and HTTP ports, in
	// the kernel, at no cost to the process: after KeepaliveTime with
	// nothing received on a connection the kernel sends TCP keepalive
	// probes, three over KeepaliveTimeout, and closes the connection when
	// none is answered. On the xDS port each connection's KeepaliveTime
	// is jittered by up to a tenth either way, so that thousands of
	// connections that went quiet together (after a push) are not probed
	// in one burst, and data the replica sent that stays unacknowledged
	// for both together closes the connection too (TCP_USER_TIMEOUT).
	// The kernel counts whole seconds: both must be at least 1s.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// PingTime (--ping-time): after that long without activity on an xDS
	// connection the replica sends the client an HTTP/2 ping, and closes
	// the connection when no answer comes within KeepaliveTimeout. It
	// finds what the kernel's probes cannot: a client whose host answers
	// while its process does not, or one behind a proxy that ends TCP.
	// A ping costs the process some 90 µs of CPU, each connection each
	// PingTime, hence the long default. Must be positive.
	PingTime time.Duration
	// MaxConnectionAge (--max-connection-age): a connection older than
	// this (plus or minus 10%) is sent GOAWAY, and its streams get
	// MaxConnectionAgeGrace (--max-connection-age-grace) to end before it
	// is cut; its clients reconnect, maybe elsewhere. Zero: no age.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// MaxConnections (--max-connections) bounds the connections open at
	// once on --xds-addr, clients' and relaying replicas'; one beyond it
	// is closed as soon as accepted, and counted. Zero: no bound.
	MaxConnections int
	// HandshakeTimeout (--handshake-timeout) bounds a new connection's
	// TLS and HTTP/2 handshakes on --xds-addr (grpc.ConnectionTimeout,
	// 120s in grpc-go): a connection not through them by then is closed.
	// Must be positive.
	HandshakeTimeout time.Duration
	// MaxStreamsPerConn (--max-streams-per-conn) bounds the streams one
	// client connection holds open; beyond it a stream gets
	// RESOURCE_EXHAUSTED. Relay connections between replicas are exempt.
	// Zero: no bound.
	MaxStreamsPerConn int
	// StreamRate (--stream-rate) is the new streams admitted per second,
	// with bursts of StreamBurst (--stream-burst); a stream over it waits
	// up to 1s, then gets RESOURCE_EXHAUSTED. Relayed streams are
	// admitted at the replica their client reached. Zero: no rate.
	StreamRate  float64
	StreamBurst int
	// RelayStreamRate (--relay-stream-rate) is the streams relayed here by
	// other replicas admitted per second, with bursts of RelayStreamBurst
	// (--relay-stream-burst), and MaxRelayedStreams (--max-relayed-streams)
	// bounds those open at once: the relay budget, apart from the
	// clients' (StreamRate, MaxStreams), which relayed streams used at the
	// replica their client reached. Beyond it a relayed stream gets
	// RESOURCE_EXHAUSTED. Zero: no rate, no bound.
	RelayStreamRate   float64
	RelayStreamBurst  int
	MaxRelayedStreams int
	// GCBetweenPushes (--gc-between-pushes) has the replica collect
	// garbage when no stream has been busy for 100 ms after a change, if
	// its heap is past half the way to the runtime's next collection, so
	// that collections fall between pushes rather than in them (package
	// quietgc). While no change comes and no stream is busy it also holds
	// off the runtime's forced collection every 2 minutes (GOGC off under
	// a memory limit at the heap's goal, restored at the next change or
	// collection). Experimental, and off by default: it changes the
	// process-wide GC settings (GOGC and the memory limit) from within
	// the replica, which logs a line at start when it is on. False, the
	// default, leaves collections to the Go runtime alone.
	GCBetweenPushes bool
	// MaxStreams (--max-streams) bounds the streams admitted and open at
	// once; beyond it a stream gets RESOURCE_EXHAUSTED. Zero: no bound.
	MaxStreams int
	// MaxStreamsShare (--max-streams-share) caps the streams admitted
	// and open at this multiple of the replica's fair share of the
	// cluster's streams, estimated locally (the streams it is home to
	// divided by its share of the ring, divided by the members), and
	// never below 100; only in a cluster of two or more. Zero: no cap;
	// else at least 1.
	MaxStreamsShare float64
	// HTTPReadTimeout (--http-read-timeout) bounds reading a request on
	// --http-addr, headers and body: a client sending slowly is cut.
	// Must be positive.
	HTTPReadTimeout time.Duration
	// HTTPMaxConns (--http-max-conns) bounds the connections open at
	// once on --http-addr: beyond it the connection idle longest is
	// closed to make room, and if none is idle the new connection waits
	// in the listen queue until one closes. Zero: no bound.
	HTTPMaxConns int
	// MaxCSDSMatchers (--max-csds-matchers) bounds the node matchers of
	// one CSDS request; a request with more gets INVALID_ARGUMENT. Zero:
	// no bound.
	MaxCSDSMatchers int
	// HTTPMaxConnsPerIP (--http-max-conns-per-ip) bounds the connections
	// one client IP holds open on --http-addr: beyond it one of its idle
	// keep-alive connections is closed to make room, and if none is idle
	// the new connection is refused (503 in plaintext). Zero: no bound.
	HTTPMaxConnsPerIP int
	// ProbeAddr (--probe-addr), host:port, serves /healthz and /readyz
	// alone, in plain HTTP, apart from --http-addr, so that liveness and
	// readiness probes get through however busy that port is. Empty: no
	// probe listener (the probes are on --http-addr only).
	ProbeAddr string
	// shareFloor and shedSettle, when set, replace the constants of the
	// same names, and fairShare the estimate of the fair share: test
	// hooks (SetShareForTest).
	shareFloor int
	shedSettle time.Duration
	fairShare  func() (float64, bool)
	// testStreamInterceptor, when set, is the innermost stream
	// interceptor, around the handler: a test hook
	// (SetPanicOnNodeForTest).
	testStreamInterceptor grpc.StreamServerInterceptor

	// Logger gets the node's logs; nil discards them.
	Logger *slog.Logger
	// Registerer gets the node's and the view's metrics. Nil: a fresh
	// registry of the node's own.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves. Nil: Registerer, which must then
	// be a Gatherer too (a *prometheus.Registry is) unless it is nil.
	Gatherer prometheus.Gatherer
	// Tracing makes the replica's spans (from the OTEL_* variables, see
	// package tracing): its pushes, and otelgrpc's on the xDS server and
	// the relay's connections. Nil or off: no span is made, and the push
	// path carries no tracing hook.
	Tracing *tracing.Provider
}

// minAuthzStaleAfter is the least --authz-stale-after: twice the rules'
// watch's progress interval (authz.DefaultWatcherConfig), so that a
// healthy, idle watch never turns stale.
const minAuthzStaleAfter = 2 * time.Second

// DefaultConfig returns the flags' defaults (docs/reference/xds-node.md): dev mode
// with an embedded etcd on 127.0.0.1:2379, xDS on :18000, HTTP on :18001.
func DefaultConfig() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "xds-node"
	}
	xd := xdsstream.DefaultConfig()
	c := Config{
		EtcdEndpoints:   nil,               // dev mode
		DataDir:         "./legation-data", // relative to the working directory
		DevEtcdAddr:     "127.0.0.1:2379",  // xdsadmin's default --etcd-endpoints
		EtcdPrefix:      "/legation/",      // keyspace.DefaultPrefix
		XDSAddr:         ":18000",          // gRPC
		HTTPAddr:        ":18001",          // health, readiness, metrics, debug
		GossipAddr:      ":7946",           // memberlist's usual port
		AdvertiseAddr:   "",                // derived
		Join:            nil,               // discover peers through etcd
		Name:            name,              // the hostname
		GroupBy:         "cluster",         // Node.cluster
		DialTimeout:     5 * time.Second,   // etcd client set-up calls
		ShutdownTimeout: 10 * time.Second,  // graceful stop budget, after the drain
		DrainPeriod:     10 * time.Second,  // streams closed over it on SIGTERM
		CatchupTimeout:  5 * time.Second,   // promise 3 (docs/concepts/design.md)
		MaxRecvMsgSize:  4 << 20,           // gRPC's default
		// Stream bounds: package xdsstream's defaults.
		FirstRequestTimeout:       xd.FirstRequestTimeout.MaxOrZero(),
		MaxNames:                  xd.MaxNames.MaxOrZero(),
		MaxSubscribedBytes:        xd.MaxSubscribedBytes.MaxOrZero(),
		MaxSubscribedBytesPerConn: xd.MaxSubscribedBytesPerConn.MaxOrZero(),
		MaxNameLength:             xd.MaxNameLength.MaxOrZero(),
		MaxNodeIDLength:           xd.MaxNodeIDLength.MaxOrZero(),
		MaxVHDSGroups:             delta.DefaultMaxVHDSGroups,
		MaxNackMessage:            xd.MaxNackMessage.MaxOrZero(),
		SendTimeout:               xd.SendTimeout.MaxOrZero(),
		RebalanceRate:             50,               // streams closed per second after a membership change
		RingDamping:               5 * time.Second,  // shard.DefaultConfig
		EtcdStaleAfter:            3 * time.Second,  // three missed progress notifications
		AuthzStaleAfter:           30 * time.Second, // past it a revocation may be missed
		StatusWriteBudget:         20,               // status.DefaultConfig: 1,280 records a second
		RolloutController:         true,             // rollouts promote and abort themselves
		LRSInterval:               10 * time.Second, // Envoy's and grpc-go's usual
		LRSWindows:                6,                // the last minute at 10s
		LRSMaxRate:                1e6,              // far beyond one proxy's traffic, far below 2^64
		LRSMaxRowsPerNode:         200,              // 100 localities of two clusters
	}
	c.limitDefaults()
	return c
}

// limitDefaults sets the defaults of "Limits and overload".
func (c *Config) limitDefaults() {
	c.KeepaliveMinTime = 5 * time.Second       // Envoy's and gRPC's usual pings are 10s or more
	c.KeepaliveTime = 30 * time.Second         // the kernel probes a quiet client after 30s
	c.KeepaliveTimeout = 10 * time.Second      // and drops it if it does not answer in 10s
	c.PingTime = 2 * time.Hour                 // grpc-go's own default: the kernel finds dead peers
	c.MaxConnectionAge = 0                     // connections live as long as their clients
	c.MaxConnectionAgeGrace = 30 * time.Second // once aged, streams get 30s to end
	c.MaxConnections = 50000                   // five times the 10,000 clients a replica is measured with (docs/operations/performance.md)
	c.HandshakeTimeout = 10 * time.Second      // a TLS handshake takes a few round trips
	c.MaxStreamsPerConn = 100                  // Envoy and grpc-go open one ADS stream a connection
	c.StreamRate = 1000                        // new streams a second
	c.StreamBurst = 1000                       // one second's worth at once
	c.MaxStreams = 0                           // no cap
	c.RelayStreamRate = 5000                   // five edges' worth of --stream-rate
	c.RelayStreamBurst = 5000                  // one second's worth at once
	c.MaxRelayedStreams = 0                    // no cap
	c.GCBetweenPushes = false                  // experimental: the Go runtime alone collects
	c.MaxStreamsShare = 0                      // no cap; 1.1 keeps replicas within 10% of their share
	c.HTTPReadTimeout = 10 * time.Second       // a request's headers and body
	c.HTTPMaxConns = 1000                      // scrapes, probes, REST pollers
	c.MaxCSDSMatchers = 1000                   // a dashboard's page of nodes; patterns match more
	c.HTTPMaxConnsPerIP = 100                  // a tenth of --http-max-conns: one client cannot take them all
}

// etcdOptions are the etcd client's endpoints and security, as package
// etcdconn takes them.
func (c *Config) etcdOptions() etcdconn.Options {
	return etcdconn.Options{Endpoints: c.EtcdEndpoints, Security: c.EtcdSecurity, Logger: c.Logger}
}

// DevMode reports whether the config runs an embedded etcd.
func (c *Config) DevMode() bool { return len(c.EtcdEndpoints) == 0 }

// MTLS reports whether clients must present certificates.
func (c *Config) MTLS() bool { return c.ClientCAFile != "" }

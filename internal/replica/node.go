package replica

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/security/tlsfiles"
	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/tracing"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Node is one xds-node replica: every part built by New, run by Run.
// XDSAddr, HTTPAddr and the HTTP handlers may be used from any goroutine.
type Node struct {
	cfg    Config
	log    *slog.Logger
	reg    prometheus.Registerer
	xdsLis net.Listener
	// xdsConns is xdsLis, tracking its connections for the drain.
	xdsConns *connTracker
	httpLis  net.Listener
	// httpConns bounds httpLis's connections (httpconns.go).
	httpConns *httpConns
	// probeLis and probeSrv serve /healthz and /readyz alone
	// (--probe-addr, probe.go); nil without it.
	probeLis net.Listener
	probeSrv *http.Server
	// devEtcdAddr is the client address of the embedded etcd (port 0
	// resolved), which client points at; empty unless dev mode.
	devEtcdAddr string
	client      *clientv3.Client
	view        *view.View
	leases      *lease.Tracker
	status      *status.Writer
	csds        *status.CSDS
	// tls is the replica's certificate and client CA, nil without TLS;
	// rules the authorization rules, nil without mTLS.
	tls        *tlsfiles.Files
	rules      *authz.Watcher
	guard      *access.Guard
	replicaIDs []authz.Pattern
	cluster    *shard.Agent
	relay      *relay.Relay
	sotw       *sotw.Server
	delta      *delta.Server
	lrs        *lrs.Server
	grpcSrv    *grpc.Server
	health     *health.Server
	httpSrv    *http.Server
	limits     *limits.Limits
	// pushes makes the push spans; nil with traces off.
	pushes *tracing.Pushes
	// quietGC collects between pushes; nil with --gc-between-pushes=false.
	quietGC *quietgc.Collector
	// rebalancing is set while a rebalance after a membership change
	// runs, and ringChanged is when one last began or ended (Unix
	// nanoseconds): shedLoop waits for the ring to settle.
	rebalancing atomic.Bool
	ringChanged atomic.Int64
	// served counts the xDS streams served here (not relayed away): the
	// streams this replica is home to, for the fair share's estimate.
	served atomic.Int64

	started  atomic.Bool // set by the first Run or Close
	stopping atomic.Bool // set when Run's ctx ends: no longer ready
	// readyChanged tells the cluster agent that readiness changed
	// (watchReadiness sends, without blocking), so that it does not poll.
	readyChanged chan struct{}
	// readinessChecks counts watchReadiness's reads of readiness (tests).
	readinessChecks atomic.Uint64
	// devEtcdUp is set once the embedded etcd serves (dev mode), for
	// readiness's reason.
	devEtcdUp atomic.Bool
}

// New checks cfg, binds the xDS and HTTP listeners and builds every part
// of the replica: the etcd client (which connects on first use), the view,
// the lease tracker, the status writer and CSDS, the cluster agent, the
// relay, the SotW, delta and LRS servers, the gRPC server with its
// services and the HTTP mux. It does no other I/O but reading the etcd certificate
// files and --gossip-key-file to check them, and authenticating to etcd
// when EtcdSecurity has a username; in dev mode it picks the embedded
// etcd's port when --dev-etcd-addr's is 0. Call Run, or Close if Run will
// not be called.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GossipKeyFile != "" {
		// Checked now, so that a bad file stops the replica at start
		// instead of leaving its agent retrying to join.
		if _, err := shard.ReadKeyFile(cfg.GossipKeyFile); err != nil {
			return nil, fmt.Errorf("node: --gossip-key-file: %w", err)
		}
	}
	n := &Node{cfg: cfg, log: cfg.Logger, reg: cfg.Registerer}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	gatherer := cfg.Gatherer
	if n.reg == nil {
		r := prometheus.NewRegistry()
		n.reg = r
		if gatherer == nil {
			gatherer = r
		}
	}
	if gatherer == nil {
		gatherer = n.reg.(prometheus.Gatherer) // checked by Validate
	}

	var err error
	// Dead peers are found by the kernel (Config.KeepaliveTime): a probe
	// after KeepaliveTime of silence, the connection closed when none is
	// answered within KeepaliveTimeout. One probe, answered or not, is
	// the verdict, as one HTTP/2 ping would be.
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: cfg.KeepaliveTime, Interval: cfg.KeepaliveTimeout, Count: 1,
	}}
	if n.xdsLis, err = lc.Listen(context.Background(), "tcp", cfg.XDSAddr); err != nil {
		return nil, fmt.Errorf("node: --xds-addr: %w", err)
	}
	n.xdsConns = newConnTracker(n.xdsLis, cfg.KeepaliveTime+cfg.KeepaliveTimeout, cfg.MaxConnections, n.log)
	n.xdsLis = n.xdsConns
	if n.httpLis, err = lc.Listen(context.Background(), "tcp", cfg.HTTPAddr); err != nil {
		n.xdsLis.Close()
		return nil, fmt.Errorf("node: --http-addr: %w", err)
	}
	if err := n.listenProbe(lc); err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, err
	}
	if err := n.build(gatherer); err != nil {
		n.release() //nolint:errcheck // the build error is the one to report
		return nil, err
	}
	return n, nil
}

// build builds the parts of n once its listeners are bound. What it built
// that holds resources (the etcd client) is in n, for release, even on
// error.
func (n *Node) build(gatherer prometheus.Gatherer) error {
	cfg := n.cfg
	if err := newMetrics(n.reg, n.ready); err != nil {
		return err
	}
	if err := n.xdsConns.register(n.reg); err != nil {
		return err
	}
	opts := cfg.etcdOptions()
	opts.Logger = n.log
	if cfg.DevMode() {
		addr, err := devetcd.ResolvePort(cfg.DevEtcdAddr)
		if err != nil {
			return fmt.Errorf("node: --dev-etcd-addr: %w", err)
		}
		n.devEtcdAddr = addr
		opts.Endpoints = []string{addr}
	}
	// Reads the certificate files: a bad one stops the start here.
	ccfg, err := opts.ClientConfig()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	ccfg.DialTimeout = cfg.DialTimeout
	// Keepalive pings find a member that stopped answering (frozen, or
	// cut off): the client then uses the others.
	ccfg.DialKeepAliveTime = 2 * time.Second
	ccfg.DialKeepAliveTimeout = 2 * time.Second
	ccfg.Logger = zap.NewNop()
	// clientv3.New does not connect (but with a username, see below): the
	// first request does, once Run started what answers it, and the view
	// retries until etcd answers.
	if n.client, err = clientv3.New(ccfg); err != nil {
		return fmt.Errorf("node: etcd client for %v: %w", opts.Endpoints, err)
	}
	if n.view, err = view.New(view.Config{
		Client:     n.client,
		Prefix:     cfg.EtcdPrefix,
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.leases, err = lease.New(lease.Config{
		Client:     n.client,
		Prefix:     cfg.EtcdPrefix,
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.status, err = status.NewWriter(status.Config{
		Client:           n.client,
		Prefix:           cfg.EtcdPrefix,
		Replica:          cfg.Name,
		Source:           statusSource{n},
		Generation:       n.statusGeneration,
		MaxTxnsPerSecond: cfg.StatusWriteBudget,
		Logger:           n.log,
		Registerer:       n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.csds, err = status.NewCSDS(status.CSDSConfig{
		Client:      n.client,
		Prefix:      cfg.EtcdPrefix,
		MaxMatchers: cfg.MaxCSDSMatchers,
		// A CSDS stream re-checks its client is an admin whenever the
		// rules change, as xDS streams re-check their node.
		Authorize:  func(ctx context.Context) (<-chan struct{}, error) { return n.guard.AdminRecheck(ctx) },
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.buildAccess(); err != nil {
		return err
	}
	n.readyChanged = make(chan struct{}, 1)
	if n.cluster, err = shard.NewAgent(n.agentConfig()); err != nil {
		return fmt.Errorf("node: cluster membership (--gossip-addr, --advertise-addr, --join, --name): %w", err)
	}

	groupBy, err := scope.ParseGroupBy(cfg.GroupBy)
	if err != nil {
		return err
	}
	if cfg.Tracing.On() {
		if n.pushes, err = tracing.NewPushes(tracing.PushConfig{
			Provider: cfg.Tracing,
			Client:   n.client,
			Prefix:   cfg.EtcdPrefix,
			Replica:  cfg.Name,
			Logger:   n.log,
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	xcfg := xdsstream.Config{
		Source:         n.view,
		GroupBy:        groupBy,
		CatchupTimeout: cfg.CatchupTimeout,
		// The node's zero is no bound, xdsstream's is its default.
		FirstRequestTimeout: unbounded(cfg.FirstRequestTimeout),
		MaxNames:            unbounded(cfg.MaxNames),
		MaxNameLength:       unbounded(cfg.MaxNameLength),
		MaxNodeIDLength:     unbounded(cfg.MaxNodeIDLength),
		MaxNackMessage:      unbounded(cfg.MaxNackMessage),
		SendTimeout:         unbounded(cfg.SendTimeout),
		Leases:              n.leases,
		Authorizer:          n.guard,
		Identifier:          cfg.Name,
		Logger:              n.log,
		Registerer:          n.reg,
		PanicOnNode:         cfg.panicOnNode,
	}
	if cfg.GCBetweenPushes {
		busy := &quietgc.Busy{}
		collections := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "legation_quiet_gc_collections_total",
			Help: "Garbage collections the replica started in the quiet after a push (--gc-between-pushes).",
		})
		parked := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "legation_quiet_gc_parked",
			Help: "1 while the replica, quiet, holds off the Go runtime's forced collection every 2 minutes (GOGC off under a memory limit at the heap's goal), 0 otherwise (--gc-between-pushes).",
		})
		for _, c := range []prometheus.Collector{collections, parked} {
			if err := n.reg.Register(c); err != nil {
				return fmt.Errorf("node: register metrics: %w", err)
			}
		}
		n.quietGC = quietgc.New(quietgc.Config{Busy: busy, Collections: collections, Park: true, Parked: parked})
		xcfg.Busy = busy
	}
	if n.pushes != nil {
		xcfg.PushTracer = n.pushes // a nil *Pushes must not become a non-nil interface
	}
	if n.delta, err = delta.New(delta.Config{Config: xcfg, MaxVHDSGroups: unbounded(cfg.MaxVHDSGroups)}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.sotw, err = sotw.New(sotw.Config{Config: xcfg, TrustVersion: cfg.SotwTrustVersion}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.lrs, err = lrs.New(lrs.Config{
		Client:          n.client,
		Prefix:          cfg.EtcdPrefix,
		Replica:         cfg.Name,
		Interval:        cfg.LRSInterval,
		Windows:         cfg.LRSWindows,
		Clusters:        cfg.LRSClusters,
		MaxRate:         cfg.LRSMaxRate,
		MaxRowsPerNode:  cfg.LRSMaxRowsPerNode,
		MaxNodeIDLength: unbounded(cfg.MaxNodeIDLength),
		Known:           n.knownCluster,
		Group:           groupBy,
		Authorizer:      n.guard,
		Identity:        func(ctx context.Context) string { return n.guard.Of(ctx).Name },
		Logger:          n.log,
		Registerer:      n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	rcfg := relay.DefaultConfig()
	rcfg.Self = cfg.Name
	rcfg.Home = n.cluster.Home
	rcfg.Next = n.cluster.Next
	rcfg.Rate = cfg.RebalanceRate
	rcfg.Burst = max(1, int(cfg.RebalanceRate/5))
	rcfg.TrustMarker = n.guard.TrustRelay
	// From the address the registry holds: a plaintext home trusts the
	// relay marker from there only.
	rcfg.SourceIP = n.cluster.AdvertisedIP()
	rcfg.Forward = n.guard.Forward
	rcfg.SendTimeout = unbounded(cfg.SendTimeout)
	if n.tls != nil {
		// Replicas relay to each other over mTLS, each checking that the
		// other presents a replica's identity.
		rcfg.DialOptions = append(rcfg.DialOptions, grpc.WithTransportCredentials(credentials.NewTLS(n.tls.ClientConfig(n.verifyReplica))))
	}
	rcfg.DialOptions = append(rcfg.DialOptions, cfg.Tracing.DialOptions()...)
	rcfg.Drained = n.xdsConns.closeSoon
	rcfg.Logger = n.log
	rcfg.Registerer = n.reg
	if n.relay, err = relay.New(rcfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}

	if n.limits, err = limits.New(limits.Config{
		MaxStreamsPerConn: cfg.MaxStreamsPerConn,
		StreamRate:        cfg.StreamRate,
		StreamBurst:       cfg.StreamBurst,
		MaxStreams:        cfg.MaxStreams,
		MaxWait:           time.Second,
		ShareFactor:       cfg.MaxStreamsShare,
		ShareFloor:        n.shareFloor(),
		FairShare:         n.fairShare,
		Full:              n.xdsConns.closeSoon, // the client's retry goes elsewhere
		Trusted:           n.relayedByReplica,
		RelayStreamRate:   cfg.RelayStreamRate,
		RelayStreamBurst:  cfg.RelayStreamBurst,
		MaxRelayedStreams: cfg.MaxRelayedStreams,
		Exempt:            func(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") },
		Logger:            n.log,
		Registerer:        n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	gm, err := grpcMetrics(n.reg)
	if err != nil {
		return err
	}
	srvOpts := append(grpcapi.ServerOptions(),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             cfg.KeepaliveMinTime,
			PermitWithoutStream: true, // idle Envoys ping too
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  cfg.PingTime,
			Timeout:               cfg.KeepaliveTimeout,
			MaxConnectionAge:      cfg.MaxConnectionAge, // 0: grpc-go's default, no age
			MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		}),
		// Static HTTP/2 windows for what clients send (requests, ACKs,
		// load reports: small): grpc-go's default sizes them by probing
		// the bandwidth, a ping to the client on each burst of data it
		// receives, so every round of ACKs after a push cost each
		// connection a write and a read more. 1 MiB per connection,
		// 64 KiB per stream (HTTP/2's default) hold any request up to
		// --max-recv-msg-size with window updates; what the replica sends
		// is bounded by the client's windows, not these.
		grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(1<<20),
		grpc.StatsHandler(n.limits.StatsHandler()),
		grpc.StatsHandler(n.xdsConns), // counts connections closed before their handshakes
		// One stream interceptor (see streamInterceptor for the order);
		// the unary ones in the same order.
		grpc.StreamInterceptor(streamInterceptor(gm, n.limits, n.guard.Admin,
			statusv3.ClientStatusDiscoveryService_StreamClientStatus_FullMethodName, n.relay.StreamInterceptor())),
		grpc.ChainUnaryInterceptor(gm.UnaryServerInterceptor(), n.limits.RecoverUnary(), n.limits.AdmitUnary(),
			n.guard.AdminUnaryInterceptor(statusv3.ClientStatusDiscoveryService_FetchClientStatus_FullMethodName)))
	srvOpts = append(srvOpts, cfg.Tracing.ServerOptions()...)
	if n.tls != nil {
		srvOpts = append(srvOpts, grpc.Creds(credentials.NewTLS(n.tls.ServerConfig(xdsClientAuth(cfg.MTLS())))))
	}
	n.grpcSrv = grpc.NewServer(srvOpts...)
	n.health = health.NewServer()
	// health.NewServer reports the server ("") SERVING; it is not until
	// the view is loaded.
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	grpcapi.Register(n.grpcSrv, grpcapi.Services{
		SotW:   servedSotW{n.sotw, &n.served},
		Delta:  servedDelta{n.delta, &n.served},
		CSDS:   n.csds,
		LRS:    n.lrs,
		Health: n.health,
	})
	gm.InitializeMetrics(n.grpcSrv) // every method's series, at 0

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.serveHealthz)
	mux.HandleFunc("GET /readyz", n.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	n.handleDebug(mux)
	mux.Handle(sotw.RESTPattern, n.sotw.RESTHandler())
	n.httpSrv = &http.Server{
		Handler: n.guard.HTTP(mux),
		// REST polls, probes and scrapes are small requests answered at
		// once: nothing is streamed, so a write deadline cuts nothing
		// legitimate.
		ReadHeaderTimeout: min(10*time.Second, cfg.HTTPReadTimeout),
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
	if n.tls != nil {
		// Health, readiness and metrics stay reachable without a client
		// certificate (load balancers, Prometheus); REST and /debug/ ask
		// for one (access.Guard).
		auth := tls.NoClientCert
		if cfg.MTLS() {
			auth = tls.VerifyClientCertIfGiven
		}
		n.httpSrv.TLSConfig = n.tls.ServerConfig(auth)
	}
	if n.httpConns, err = newHTTPConns(n.httpLis, cfg.HTTPMaxConns, cfg.HTTPMaxConnsPerIP, n.tls != nil, n.reg, n.log); err != nil {
		return err
	}
	n.httpSrv.ConnState = n.httpConns.trackState
	n.buildProbe()
	return nil
}

// The HTTP server's write and idle timeouts: fixed, as no response is
// long-lived (--http-read-timeout bounds the client's side).
const (
	httpWriteTimeout = 30 * time.Second
	httpIdleTimeout  = 2 * time.Minute
)

// shareFloor is the streams --max-streams-share always admits: below it
// the estimate of the fair share is too noisy to refuse anyone on.
const shareFloor = 100

// shareFloor is the floor of the share cap: the constant, unless a test
// set one.
func (n *Node) shareFloor() int {
	if n.cfg.shareFloor > 0 {
		return n.cfg.shareFloor
	}
	return shareFloor
}

// fairShare estimates this replica's fair share of the cluster's streams
// (limits.Config.FairShare) from what it knows locally: the streams it
// serves are those of the nodes it is home to, about its share of the
// ring of all the cluster's streams, so the cluster has about served /
// share streams, and a fair share is that divided by the members. Unknown
// (false) alone, before the agent joined, and while this replica is not
// on the ring.
func (n *Node) fairShare() (float64, bool) {
	if n.cfg.fairShare != nil {
		return n.cfg.fairShare()
	}
	m := n.cluster.Membership()
	if m == nil {
		return 0, false
	}
	ring := m.Ring()
	members := ring.Len()
	if members < 2 {
		return 0, false
	}
	share := ring.Shares()[n.cfg.Name]
	if share <= 0 {
		return 0, false
	}
	return float64(n.served.Load()) / share / float64(members), true
}

// servedSotW and servedDelta count the streams their server serves in
// served: the handler runs only for streams served here, after the relay.
type servedSotW struct {
	*sotw.Server
	served *atomic.Int64
}

func (s servedSotW) Serve(st grpcapi.SotWStream, t *resource.Type) error {
	s.served.Add(1)
	defer s.served.Add(-1)
	return s.Server.Serve(st, t)
}

type servedDelta struct {
	*delta.Server
	served *atomic.Int64
}

func (s servedDelta) Serve(st grpcapi.DeltaStream, t *resource.Type) error {
	s.served.Add(1)
	defer s.served.Add(-1)
	return s.Server.Serve(st, t)
}

// relayedByReplica reports whether the stream of ctx was relayed here by
// another replica: it carries the relay marker and its peer may set it
// (access.Guard.TrustRelay: with mTLS a replica's identity; in plain
// text a registered replica's address, as for the relay itself).
func (n *Node) relayedByReplica(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, relay.MarkerKey)) > 0 && n.guard.TrustRelay(ctx)
}

// xdsClientAuth is the xDS port's client-certificate policy.
func xdsClientAuth(mtls bool) tls.ClientAuthType {
	if mtls {
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// buildAccess loads the TLS files, makes the authorization rules' watcher
// (mTLS) and the guard that judges clients.
func (n *Node) buildAccess() error {
	cfg := n.cfg
	var err error
	if cfg.TLSCertFile != "" {
		if n.tls, err = tlsfiles.New(tlsfiles.Config{
			CertFile: cfg.TLSCertFile,
			KeyFile:  cfg.TLSKeyFile,
			CAFile:   cfg.ClientCAFile,
			Logger:   n.log,
			Flag:     "--tls",
			CAFlag:   "--client-ca-file",
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	gcfg := access.Config{MTLS: cfg.MTLS(), InsecureLoopbackSecrets: cfg.InsecureLoopbackSecrets, Logger: n.log}
	// In plaintext, relay markers are trusted from the addresses of the
	// replicas registered in etcd only (the cluster agent is built after
	// the guard, and streams come after both).
	gcfg.ReplicaAddr = func(ip netip.Addr) bool { return n.cluster != nil && n.cluster.IsReplicaAddr(ip) }
	if cfg.MTLS() {
		if err := n.loadReplicaIdentities(); err != nil {
			return err
		}
		if n.rules, err = authz.NewWatcher(authz.WatcherConfig{
			Client:             n.client,
			Prefix:             cfg.EtcdPrefix,
			Logger:             n.log,
			Registerer:         n.reg,
			DefaultTrustDomain: cfg.AuthzDefaultTrustDomain,
			StaleAfter:         cfg.AuthzStaleAfter,
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		gcfg.Rules = func() (access.Table, <-chan struct{}) {
			t, changed := n.rules.Current()
			return t, changed
		}
		gcfg.RulesReady = n.rules.Ready()
		gcfg.Fresh = n.rules.Fresh
		gcfg.ReadyTimeout = cfg.CatchupTimeout
		gcfg.Replica = n.isReplica
	}
	if n.guard, err = access.New(gcfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// loadReplicaIdentities compiles --replica-identity. Without it, the
// replicas are recognised by this replica's own identity, which must then
// be a SPIFFE ID in a cluster: a DNS SAN or a CommonName never names a
// replica (a CA that signs any name a service asks for would make it one).
func (n *Node) loadReplicaIdentities() error {
	for _, p := range n.cfg.ReplicaIdentities {
		pat, err := authz.ParsePattern(p)
		if err != nil {
			return fmt.Errorf("node: --replica-identity: %w", err)
		}
		n.replicaIDs = append(n.replicaIDs, pat)
	}
	if len(n.replicaIDs) > 0 || n.cfg.DevMode() || n.cfg.Standalone {
		return nil
	}
	own, err := tlsfiles.Identity(n.tls.Certificate())
	if err != nil {
		return fmt.Errorf("node: --tls-cert-file %s: %w", n.cfg.TLSCertFile, err)
	}
	if !tlsfiles.IsSPIFFE(own) {
		return fmt.Errorf("node: --tls-cert-file %s: its identity %q is not a SPIFFE ID: replicas of a cluster recognise each other "+
			"by a SPIFFE URI SAN (spiffe://TRUST_DOMAIN/PATH); issue the certificate one, or name the replicas' SPIFFE IDs with --replica-identity",
			n.cfg.TLSCertFile, own)
	}
	return nil
}

// isReplica reports whether identity is a replica's: a SPIFFE ID (from a
// URI SAN; no other kind of identity ever is) that matches
// --replica-identity or, without that flag, is this replica's own
// certificate's identity.
func (n *Node) isReplica(identity string) bool {
	if !tlsfiles.IsSPIFFE(identity) {
		return false
	}
	if len(n.replicaIDs) > 0 {
		for _, p := range n.replicaIDs {
			if p.Match(identity) {
				return true
			}
		}
		return false
	}
	own, err := tlsfiles.Identity(n.tls.Certificate())
	return err == nil && tlsfiles.IsSPIFFE(own) && own == identity
}

// verifyReplica checks that a replica relayed to presents a replica's
// identity.
func (n *Node) verifyReplica(leaf *x509.Certificate) error {
	id, err := tlsfiles.Identity(leaf)
	if err != nil {
		return err
	}
	if !n.isReplica(id) {
		return fmt.Errorf("peer identity %q is not a replica's (--replica-identity)", id)
	}
	return nil
}

// agentConfig is the config of the replica's cluster agent: alone in dev
// mode and with --standalone, else a member of the cluster of the
// replicas sharing its etcd prefix (docs/design.md, "The cluster"), at
// the addresses derived from the flags and the bound listeners.
func (n *Node) agentConfig() shard.AgentConfig {
	c := shard.DefaultAgentConfig()
	c.Alone = n.cfg.DevMode() || n.cfg.Standalone
	c.Membership.Name = n.cfg.Name
	c.Membership.Client = n.client
	c.Membership.Prefix = n.cfg.EtcdPrefix
	c.Membership.Logger = n.log
	c.Membership.Registerer = n.reg
	c.Membership.GossipKeyFile = n.cfg.GossipKeyFile
	if !c.Alone {
		c.Membership.SetReplicaAddrs(shard.ReplicaAddrs{
			Gossip:    n.cfg.GossipAddr,
			Advertise: n.cfg.AdvertiseAddr,
			XDS:       n.cfg.XDSAddr,
			XDSBound:  n.XDSAddr(),
			HTTPBound: n.HTTPAddr(),
			Join:      n.cfg.Join,
		})
	}
	c.Ready = n.ready
	c.ReadyChanged = n.readyChanged // watchReadiness tells it of each change
	c.Rebalance = n.rebalance
	return c
}

// rebalance closes the streams whose node's home moved away from this
// replica (shard.AgentConfig.Rebalance: called once the cluster agent has
// joined).
func (n *Node) rebalance(ctx context.Context) {
	n.rebalancing.Store(true)
	n.ringChanged.Store(time.Now().UnixNano())
	defer func() {
		n.ringChanged.Store(time.Now().UnixNano())
		n.rebalancing.Store(false)
	}()
	home := func(nodeID string) (string, bool) {
		name, _, self := n.cluster.Home(nodeID)
		return name, self
	}
	if moved := n.relay.Rebalance(ctx, home); moved > 0 {
		n.log.Info("rebalanced streams after a membership change", "closed", moved, "members", n.cluster.Membership().Ring().Len())
	}
}

// XDSAddr is the bound address of the gRPC listener.
func (n *Node) XDSAddr() string { return n.xdsLis.Addr().String() }

// HTTPAddr is the bound address of the HTTP listener.
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// Close releases the listeners and the etcd client of a Node whose Run was
// not called. After Run has started it does nothing: Run releases
// everything when its ctx ends. It is safe to call more than once.
func (n *Node) Close() error {
	if !n.started.CompareAndSwap(false, true) {
		return nil
	}
	return n.release()
}

// release closes the listeners and the etcd client.
func (n *Node) release() error {
	err := errors.Join(n.xdsLis.Close(), n.httpLis.Close())
	if n.probeLis != nil {
		err = errors.Join(err, n.probeLis.Close())
	}
	if n.client != nil {
		if cerr := n.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// Run serves until ctx ends, then shuts down gracefully and returns nil. It
// returns an error if the embedded etcd cannot start or fails, or a server
// stops on its own; everything it started is stopped first. In dev mode it
// starts the embedded etcd; otherwise the etcd client connects to
// EtcdEndpoints, and until etcd answers the node runs, not ready. Call it
// once.
//
// On shutdown it stops being ready (/readyz 503, gRPC health
// NOT_SERVING), leaves the cluster, closes its xDS streams spread over
// DrainPeriod (refusing new ones), stops the gRPC and HTTP servers
// gracefully within ShutdownTimeout and cuts what is left, then stops the view, the
// lease tracker, the status writer and the cluster agent, closes the etcd
// client and the embedded etcd, waiting for every goroutine it started.
func (n *Node) Run(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("node: Run called twice, or after Close")
	}
	mode := "etcd"
	if n.cfg.DevMode() {
		mode = "dev"
	}
	n.log.Info("xds-node starting", "name", n.cfg.Name, "mode", mode,
		"xds_addr", n.XDSAddr(), "http_addr", n.HTTPAddr(), "etcd_prefix", n.cfg.EtcdPrefix,
		"tls", n.tls != nil, "mtls", n.cfg.MTLS())
	n.warnInsecure()
	n.warnEtcdInsecure()
	if n.cfg.StreamRate > 0 && n.cfg.RebalanceRate > n.cfg.StreamRate {
		n.log.Warn("--rebalance-rate is above --stream-rate: after a membership change the replicas close streams faster than they admit the reconnects, which are refused and back off",
			"rebalance_rate", n.cfg.RebalanceRate, "stream_rate", n.cfg.StreamRate)
	}
	if n.cluster.Clustered() && n.cfg.GossipKeyFile == "" {
		// Once per process: the risk is the configuration's, not an event.
		n.log.Warn("gossip is unencrypted and unauthenticated (no --gossip-key-file): any host that reaches the gossip port can join the ring, "+
			"be made the home of Envoy nodes and be relayed their streams, and reads every replica's record; see README, \"Gossip encryption\"",
			"gossip_addr", n.cfg.GossipAddr)
	}

	// Closes the connections of streams drained, shed, or refused
	// because the replica is full, until the gRPC server has stopped.
	closerCtx, stopCloser := context.WithCancel(context.Background())
	closerDone := make(chan struct{})
	go func() {
		defer close(closerDone)
		n.xdsConns.run(closerCtx)
	}()

	// The servers come first so that /healthz answers, and /readyz says
	// why not ready, while etcd starts.
	var servers sync.WaitGroup
	serveErr := make(chan error, 3) // one per server: never blocks
	servers.Add(3)
	go func() {
		defer servers.Done()
		n.serveProbe(serveErr) // returns at once without --probe-addr
	}()
	go func() {
		defer servers.Done()
		if err := n.grpcSrv.Serve(n.xdsLis); err != nil {
			serveErr <- fmt.Errorf("node: gRPC server on %s: %w", n.XDSAddr(), err)
		}
	}()
	go func() {
		defer servers.Done()
		serve := n.httpSrv.Serve
		if n.tls != nil {
			serve = func(l net.Listener) error { return n.httpSrv.ServeTLS(l, "", "") }
		}
		// Within --http-max-conns and --http-max-conns-per-ip, idle
		// connections closed to make room.
		if err := serve(n.httpConns); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("node: HTTP server on %s: %w", n.HTTPAddr(), err)
		}
	}()

	// The parts run until partsCtx ends, after the drain: the view keeps
	// serving draining streams, and the status writer keeps their records.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	var parts sync.WaitGroup
	etcd, err := n.startEtcd(ctx)
	if err == nil {
		var fatal <-chan error // nil blocks
		if etcd != nil {
			fatal = etcd.Err()
		}
		n.runParts(partsCtx, &parts)
		select {
		case <-ctx.Done():
		case err = <-serveErr:
		case err = <-fatal:
			err = fmt.Errorf("node: embedded etcd: %w", err)
		}
	} else if ctx.Err() != nil {
		err = nil // stopped while starting
	}
	// An error is returned, not logged: the caller reports it.
	n.log.Info("xds-node shutting down", "after_error", err != nil,
		"drain_period", n.cfg.DrainPeriod.String(), "shutdown_timeout", n.cfg.ShutdownTimeout.String())

	n.stopping.Store(true)
	n.health.Shutdown() // NOT_SERVING now, and SERVING is never set again
	// Peers re-home this replica's nodes at once; its streams drain.
	if err := n.cluster.Leave(2 * time.Second); err != nil {
		n.log.Warn("leaving the cluster", "err", err)
	}
	n.drainStreams()
	n.drain()
	stopCloser() // the gRPC server closed every connection
	<-closerDone
	servers.Wait()
	stopParts()
	parts.Wait()
	if err := n.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Warn("closing the etcd client", "err", err)
	}
	if etcd != nil {
		etcd.Close() // always nil
	}
	n.relay.Close() // always nil
	n.log.Info("xds-node stopped")
	return err
}

// startEtcd starts the embedded etcd in dev mode, where the client points;
// it returns nil otherwise.
func (n *Node) startEtcd(ctx context.Context) (*devetcd.Server, error) {
	if !n.cfg.DevMode() {
		return nil, nil
	}
	n.log.Info("dev mode: starting an embedded etcd", "client_addr", n.cfg.DevEtcdAddr, "data_dir", n.cfg.DataDir)
	srv, err := devetcd.Start(ctx, devetcd.Config{
		Dir:        n.cfg.DataDir,
		ClientAddr: n.devEtcdAddr,
		Logger:     n.log,
	})
	if err != nil {
		return nil, fmt.Errorf("node: dev mode (move the embedded etcd with --dev-etcd-addr, or use a real one with --etcd-endpoints): %w", err)
	}
	n.devEtcdUp.Store(true)
	return srv, nil
}

// runParts starts the view, the lease tracker, the status writer, the
// LRS window publisher, the cluster agent and the readiness watcher, each
// until ctx ends, counted in wg.
func (n *Node) runParts(ctx context.Context, wg *sync.WaitGroup) {
	// Each returns nil once ctx ends.
	runs := []func(context.Context) error{
		n.view.Run,
		n.leases.Run,
		n.status.Run, // records of the nodes served here; revoked when ctx ends
		n.csds.Run,   // the cluster's records, from the first CSDS call on
		n.lrs.Run,    // load windows of the nodes served here
		n.cluster.Run,
	}
	if n.tls != nil {
		runs = append(runs, n.tls.Run) // reloads the files when they change
	}
	if n.rules != nil {
		runs = append(runs, n.rules.Run)
	}
	for _, run := range runs {
		wg.Go(func() { run(ctx) }) //nolint:errcheck // nil once ctx ends
	}
	if n.cfg.MaxStreamsShare > 0 && n.cluster.Clustered() {
		wg.Go(func() { n.shedLoop(ctx) })
	}
	if n.quietGC != nil {
		wg.Go(func() { n.quietGC.Run(ctx, n.view) })
	}
	if n.pushes != nil {
		wg.Go(func() { n.pushes.Run(ctx, n.view) })
	}
	wg.Go(func() {
		start := time.Now()
		select {
		case <-n.view.Ready():
		case <-ctx.Done():
			return
		}
		s := n.view.Snapshot()
		n.log.Info("xds-node loaded the view", "revision", s.Revision, "resources", s.Len(),
			"etcd", n.client.Endpoints(), "load_time", time.Since(start).Round(time.Millisecond).String())
		n.watchReadiness(ctx)
	})
}

// drainStreams closes the xDS streams the relay's interceptor has seen,
// local and relayed, spread over DrainPeriod (relay.Drain), and refuses
// new ones from its start, closing the connection of each shortly after
// (connTracker): their clients reconnect, through the load balancer that
// sees /readyz 503, to the other replicas, a few at a time rather than
// all at once. The HTTP server keeps serving meanwhile, so
// that health checks see 503. The pacer's jitter may go a little past
// the period: what is left then is closed at once.
func (n *Node) drainStreams() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainPeriod+n.cfg.DrainPeriod/10)
	defer cancel()
	n.warnDrainRate()
	began := time.Now()
	closed := n.relay.Drain(ctx, n.cfg.DrainPeriod)
	if ctx.Err() != nil {
		closed += n.relay.Drain(context.Background(), 0)
	}
	n.log.Info("drained the xDS streams", "closed", closed, "took", time.Since(began).Round(time.Millisecond).String())
}

// warnDrainRate warns when the drain is about to close this replica's
// clients' streams faster than its peers admit new ones (--stream-rate
// each, assuming theirs is this one's): the excess is refused and retries
// after a back-off, so the drain is a storm after all. It counts the
// streams whose clients connected here; peers are the ring's other
// members.
func (n *Node) warnDrainRate() {
	m := n.cluster.Membership()
	if n.cfg.StreamRate <= 0 || n.cfg.DrainPeriod <= 0 || m == nil {
		return
	}
	peers := 0
	for _, p := range m.Ring().Members() {
		if p.Name != n.cfg.Name {
			peers++
		}
	}
	edge := 0
	for _, s := range n.relay.Streams() {
		if s.RelayedBy == "" {
			edge++
		}
	}
	if peers == 0 || edge == 0 {
		return
	}
	if rate := float64(edge) / n.cfg.DrainPeriod.Seconds(); rate > n.cfg.StreamRate*float64(peers) {
		n.log.Warn("the drain closes streams faster than the other replicas admit them: raise --drain-period",
			"streams", edge, "drain_period", n.cfg.DrainPeriod.String(), "closes_per_second", math.Round(rate),
			"peers", peers, "stream_rate", n.cfg.StreamRate,
			"drain_period_needed", (time.Duration(float64(edge) / (n.cfg.StreamRate * float64(peers)) * float64(time.Second))).Round(time.Second).String())
	}
}

// drain stops the gRPC and HTTP servers, each given ShutdownTimeout to let
// what is in flight finish before it is cut. It returns once both are
// stopped.
func (n *Node) drain() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() {
			n.grpcSrv.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(n.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			n.log.Warn("gRPC drain timed out; closing the remaining streams", "timeout", n.cfg.ShutdownTimeout.String())
			n.grpcSrv.Stop()
			<-done
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	if err := n.httpSrv.Shutdown(ctx); err != nil {
		n.log.Warn("HTTP drain timed out; closing the remaining connections", "timeout", n.cfg.ShutdownTimeout.String())
		n.httpSrv.Close() // only the listener's error, already closed
	}
	n.shutdownProbe(ctx)
	wg.Wait()
}

// readiness says whether the node is ready and, if not, why.
func (n *Node) readiness() (bool, string) {
	if n.stopping.Load() {
		return false, "shutting down"
	}
	select {
	case <-n.view.Ready():
	default:
		if n.cfg.DevMode() && !n.devEtcdUp.Load() {
			return false, "starting the embedded etcd"
		}
		return false, "loading the view from etcd"
	}
	select {
	case <-n.view.HistoryRead():
	default:
		// A client reconnecting now would be resent what it holds.
		return false, "reading etcd's recent history, to know what changed since the versions clients present"
	}
	if n.rules != nil {
		select {
		case <-n.rules.Ready():
		default:
			return false, "loading the authorization rules from etcd"
		}
		if err := n.rules.Fresh(); err != nil {
			return false, fmt.Sprintf("refusing streams: the authorization rules are stale (%v; --authz-stale-after)", err)
		}
	}
	if r := n.view.RevisionReset(); r != nil {
		return false, fmt.Sprintf("%s; serving the view at revision %d until etcd's revision passes it", r, r.View)
	}
	if quiet := time.Since(n.view.LastHeard()); quiet > n.cfg.EtcdStaleAfter {
		return false, fmt.Sprintf("etcd unreachable: nothing heard from it for %s; serving the view at revision %d meanwhile",
			quiet.Round(time.Second), n.view.Snapshot().Revision)
	}
	return true, ""
}

func (n *Node) ready() bool {
	ok, _ := n.readiness()
	return ok
}

// Readiness is read every notReadyPoll while the replica is not ready
// (starting, or etcd lost) and every readyPoll while it is ready, and also
// when etcd turns stale (EtcdStaleAfter after the view last heard from it),
// the only timed way a ready replica turns not ready: a revision reset is
// the other, a shutdown tells the health service itself (health.Shutdown).
const (
	notReadyPoll = 250 * time.Millisecond
	readyPoll    = time.Second
)

// watchReadiness keeps the gRPC health status in step with readiness
// (the view current, etcd heard from lately) until ctx ends, and tells the
// cluster agent of each change (readyChanged).
func (n *Node) watchReadiness(ctx context.Context) {
	check := time.NewTimer(notReadyPoll)
	defer check.Stop()
	last := false
	history := n.view.HistoryRead() // nil once seen closed: wakes at once, not at the next tick
	for {
		n.readinessChecks.Add(1)
		if ok, why := n.readiness(); ok != last {
			last = ok
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				st = healthpb.HealthCheckResponse_SERVING
				n.log.Info("ready", "revision", n.view.Snapshot().Revision)
			} else {
				n.log.Warn("not ready", "why", why)
			}
			// After a shutdown began this is ignored (health.Shutdown).
			n.health.SetServingStatus("", st)
			select {
			case n.readyChanged <- struct{}{}:
			default: // one is pending: the agent reads readiness afresh
			}
		}
		wait := notReadyPoll
		if last {
			stale := time.Until(n.view.LastHeard().Add(n.cfg.EtcdStaleAfter))
			wait = max(time.Millisecond, min(readyPoll, stale+time.Millisecond))
		}
		check.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-check.C:
		case <-history:
			history = nil
		}
	}
}

// serveHealthz answers 200 while the process runs: liveness only.
func (n *Node) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// serveReadyz answers 200 once the view is loaded and until shutdown
// begins, else 503 with the reason.
func (n *Node) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok, why := n.readiness(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", why)
		n.writeEtcdWarning(w)
		return
	}
	fmt.Fprintln(w, "ok")
	n.writeEtcdWarning(w)
}

// knownCluster says whether a node of group sees cluster in the view
// (its group's scope or the default one): LRS skips the reports of
// clusters it does not. Before the view is loaded every cluster is.
func (n *Node) knownCluster(group, cluster string) bool {
	snap := n.view.Snapshot()
	if snap == nil {
		return true
	}
	return scope.Visible(snap, resource.Cluster, group, cluster) != nil
}

// statusSource is the status writer's view of the node's SotW and delta
// streams.
type statusSource struct{ n *Node }

func (s statusSource) Stamps(fn func(node string, stream, changes uint64)) {
	s.n.sotw.Stamps(fn)
	// The two servers number their streams each from 1: the top bit
	// keeps a node's SotW and delta streams apart.
	s.n.delta.Stamps(func(node string, stream, changes uint64) { fn(node, stream|1<<63, changes) })
}

func (s statusSource) Records(want func(node string) bool) []status.NodeStatus {
	return status.FromStreams(s.n.cfg.Name, s.n.sotw.SummariesOf(want), s.n.delta.SummariesOf(want))
}

// statusGeneration changes whenever statusSource's answers may have: the sum
// of the servers' generations, each only growing.
func (n *Node) statusGeneration() uint64 {
	return n.sotw.StatusGeneration() + n.delta.StatusGeneration()
}

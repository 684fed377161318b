package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/delta"
	"github.com/legation-io/legation/internal/devetcd"
	"github.com/legation-io/legation/internal/grpcapi"
	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/relay"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/shard"
	"github.com/legation-io/legation/internal/status"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/xdsstream"
)

// Node is one xds-node replica. New binds its listeners; Run does the rest.
// XDSAddr, HTTPAddr and the HTTP handlers may be used from any goroutine.
type Node struct {
	cfg      Config
	log      *slog.Logger
	reg      prometheus.Registerer
	xdsLis   net.Listener
	httpLis  net.Listener
	grpcSrv  *grpc.Server
	health   *health.Server
	httpSrv  *http.Server
	started  atomic.Bool // set by the first Run or Close
	stopping atomic.Bool // set when Run's ctx ends: no longer ready
	// view is nil until Run has connected to etcd.
	view atomic.Pointer[store.View]
	// leases is nil until Run has connected to etcd; it is set before
	// view, and streams are served only once the view is ready.
	leases atomic.Pointer[lease.Tracker]
	// member is nil until Run has joined the cluster (and in dev mode).
	member atomic.Pointer[shard.Membership]
	// csds is nil until Run has connected to etcd.
	csds  atomic.Pointer[status.CSDS]
	relay *relay.Relay
	sotw  *ads.Server
	delta *delta.Server
}

// viewSource is the ads.Source of a node: its view once Run made it.
type viewSource struct{ n *Node }

func (v viewSource) Snapshot() *store.Snapshot {
	if view := v.n.view.Load(); view != nil {
		return view.Snapshot()
	}
	return nil
}

func (v viewSource) WaitRevision(ctx context.Context, rev int64) (*store.Snapshot, error) {
	view := v.n.view.Load()
	if view == nil {
		return nil, errors.New("node: no view yet")
	}
	return view.WaitRevision(ctx, rev)
}

// leaseSource is the ads.Leases and delta.Leases of a node: its lease
// tracker once Run made it.
type leaseSource struct{ n *Node }

// never is the notice of a node without a tracker: never done.
var never = lease.Notice{}

func (l leaseSource) Expiry(ctx context.Context, e *store.Entry) time.Time {
	if t := l.n.leases.Load(); t != nil {
		return t.Expiry(ctx, e)
	}
	return time.Now() // unreachable while serving: the shortest TTL
}

func (l leaseSource) Notice() *lease.Notice {
	if t := l.n.leases.Load(); t != nil {
		return t.Notice()
	}
	return &never
}

func (l leaseSource) NextCheck(id int64) time.Time {
	if t := l.n.leases.Load(); t != nil {
		return t.NextCheck(id)
	}
	return time.Time{}
}

// New checks cfg and binds the xDS and HTTP listeners; it does no other
// I/O. Call Run, or Close if Run will not be called.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
	if n.xdsLis, err = net.Listen("tcp", cfg.XDSAddr); err != nil {
		return nil, fmt.Errorf("node: --xds-addr: %w", err)
	}
	if n.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		n.xdsLis.Close()
		return nil, fmt.Errorf("node: --http-addr: %w", err)
	}
	if err := newMetrics(n.reg, n.ready); err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, err
	}

	groupBy, err := scope.ParseGroupBy(cfg.GroupBy)
	if err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, err
	}
	xcfg := xdsstream.Config{
		Source:         viewSource{n},
		GroupBy:        groupBy,
		CatchupTimeout: cfg.CatchupTimeout,
		Leases:         leaseSource{n},
		Logger:         n.log,
		Registerer:     n.reg,
	}
	n.delta, err = delta.New(delta.Config{Config: xcfg})
	if err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, fmt.Errorf("node: %w", err)
	}
	n.sotw, err = ads.New(ads.Config{Config: xcfg, TrustVersion: cfg.SotwTrustVersion})
	if err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, fmt.Errorf("node: %w", err)
	}
	rcfg := relay.DefaultConfig()
	rcfg.Self = cfg.Name
	rcfg.Home = n.home
	rcfg.Next = n.next
	rcfg.Rate = cfg.RebalanceRate
	rcfg.Burst = max(1, int(cfg.RebalanceRate/5))
	rcfg.Logger = n.log
	rcfg.Registerer = n.reg
	if n.relay, err = relay.New(rcfg); err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return nil, fmt.Errorf("node: %w", err)
	}
	n.grpcSrv = grpc.NewServer(append(grpcapi.ServerOptions(),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.StreamInterceptor(n.relay.StreamInterceptor()))...)
	n.health = health.NewServer()
	// health.NewServer reports the server ("") SERVING; it is not until
	// the view is loaded.
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	grpcapi.Register(n.grpcSrv, grpcapi.Services{SotW: n.sotw, Delta: n.delta, CSDS: csdsService{n: n}, Health: n.health})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.serveHealthz)
	mux.HandleFunc("GET /readyz", n.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.Handle("GET /debug/view", n.debugOnly(http.HandlerFunc(n.serveDebugView)))
	mux.Handle("GET /debug/streams", n.debugOnly(http.HandlerFunc(n.serveDebugStreams)))
	mux.Handle("GET /debug/cluster", n.debugOnly(http.HandlerFunc(n.serveDebugCluster)))
	mux.Handle(ads.RESTPattern, n.sotw.RESTHandler())
	n.httpSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
	return n, nil
}

// XDSAddr is the bound address of the gRPC listener.
func (n *Node) XDSAddr() string { return n.xdsLis.Addr().String() }

// HTTPAddr is the bound address of the HTTP listener.
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// Close releases the listeners of a Node whose Run was not called. After
// Run has started it does nothing: Run releases everything when its ctx
// ends. It is safe to call more than once.
func (n *Node) Close() error {
	if !n.started.CompareAndSwap(false, true) {
		return nil
	}
	return errors.Join(n.xdsLis.Close(), n.httpLis.Close())
}

// backend is what Run starts for the data: the embedded etcd (dev mode),
// the etcd client and the view with its goroutines.
type backend struct {
	etcd     *devetcd.Server // nil unless dev mode
	client   *clientv3.Client
	cancel   context.CancelFunc // stops the view's goroutines
	wg       sync.WaitGroup     // the view's goroutines
	fatal    <-chan error       // the embedded etcd's fatal errors; nil blocks
	endpoint []string
}

// Run serves until ctx ends, then shuts down gracefully and returns nil. It
// returns an error if the embedded etcd cannot start or fails, or a server
// stops on its own; everything it started is stopped first. In dev mode it
// starts the embedded etcd; otherwise it connects to EtcdEndpoints, and
// until etcd answers the node runs, not ready. Call it once.
//
// On shutdown it stops being ready (/readyz 503, gRPC health
// NOT_SERVING), drains the gRPC and HTTP servers within ShutdownTimeout
// and cuts what is left, then stops the view, the etcd client and the
// embedded etcd, waiting for every goroutine it started.
func (n *Node) Run(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("node: Run called twice, or after Close")
	}
	mode := "etcd"
	if n.cfg.DevMode() {
		mode = "dev"
	}
	n.log.Info("xds-node starting", "name", n.cfg.Name, "mode", mode,
		"xds_addr", n.XDSAddr(), "http_addr", n.HTTPAddr(), "etcd_prefix", n.cfg.EtcdPrefix)

	// The servers come first so that /healthz answers, and /readyz says
	// why not ready, while etcd starts.
	var servers sync.WaitGroup
	serveErr := make(chan error, 2) // one per server: never blocks
	servers.Add(2)
	go func() {
		defer servers.Done()
		if err := n.grpcSrv.Serve(n.xdsLis); err != nil {
			serveErr <- fmt.Errorf("node: gRPC server on %s: %w", n.XDSAddr(), err)
		}
	}()
	go func() {
		defer servers.Done()
		if err := n.httpSrv.Serve(n.httpLis); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("node: HTTP server on %s: %w", n.HTTPAddr(), err)
		}
	}()

	b := &backend{}
	err := n.startBackend(ctx, b)
	if err == nil {
		select {
		case <-ctx.Done():
		case err = <-serveErr:
		case err = <-b.fatal:
			err = fmt.Errorf("node: embedded etcd: %w", err)
		}
	} else if ctx.Err() != nil {
		err = nil // stopped while starting
	}
	// An error is returned, not logged: the caller reports it.
	n.log.Info("xds-node shutting down", "after_error", err != nil, "drain_timeout", n.cfg.ShutdownTimeout.String())

	n.stopping.Store(true)
	n.health.Shutdown() // NOT_SERVING now, and SERVING is never set again
	// Peers re-home this replica's nodes at once; its streams drain.
	n.leave()
	n.drain()
	servers.Wait()
	b.close(n.log)
	n.relay.Close() //nolint:errcheck // always nil
	n.log.Info("xds-node stopped")
	return err
}

// startBackend starts the embedded etcd (dev mode), the etcd client and
// the view. What it started is in b, for b.close, even on error.
func (n *Node) startBackend(ctx context.Context, b *backend) error {
	b.endpoint = n.cfg.EtcdEndpoints
	if n.cfg.DevMode() {
		n.log.Info("dev mode: starting an embedded etcd", "client_addr", n.cfg.DevEtcdAddr, "data_dir", n.cfg.DataDir)
		srv, err := devetcd.Start(ctx, devetcd.Config{
			Dir:        n.cfg.DataDir,
			ClientAddr: n.cfg.DevEtcdAddr,
			Logger:     n.log,
		})
		if err != nil {
			return fmt.Errorf("node: dev mode (move the embedded etcd with --dev-etcd-addr, or use a real one with --etcd-endpoints): %w", err)
		}
		b.etcd = srv
		b.fatal = srv.Err()
		b.endpoint = []string{srv.Endpoint()}
	}
	// clientv3.New does not wait for a connection: the view retries until
	// etcd answers.
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   b.endpoint,
		DialTimeout: n.cfg.DialTimeout,
		// Keepalive pings find a member that stopped answering (frozen,
		// or cut off): the client then uses the others.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("node: etcd client for %v: %w", b.endpoint, err)
	}
	b.client = client
	view, err := store.NewView(store.ViewConfig{
		Client:     client,
		Prefix:     n.cfg.EtcdPrefix,
		Logger:     n.log,
		Registerer: n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	tracker, err := lease.New(lease.Config{
		Client:     client,
		Prefix:     n.cfg.EtcdPrefix,
		Logger:     n.log,
		Registerer: n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	writer, err := status.NewWriter(status.Config{
		Client:     client,
		Prefix:     n.cfg.EtcdPrefix,
		Replica:    n.cfg.Name,
		Source:     n.nodeStatus,
		Logger:     n.log,
		Registerer: n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	csds, err := status.NewCSDS(status.CSDSConfig{Client: client, Prefix: n.cfg.EtcdPrefix, Logger: n.log})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.csds.Store(csds)
	n.leases.Store(tracker)
	n.view.Store(view)

	vctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	if n.clustered() {
		// A bad cluster setting fails the start, not a retry loop.
		if err := n.shardConfig(client).Validate(); err != nil {
			return fmt.Errorf("node: cluster membership (--gossip-addr, --advertise-addr, --join, --name): %w", err)
		}
	}
	b.wg.Add(4)
	go func() {
		defer b.wg.Done()
		// Records of the nodes served here; revoked when vctx ends.
		writer.Run(vctx) //nolint:errcheck // it returns nil once vctx ends
	}()
	if n.clustered() {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			n.runCluster(vctx, client)
		}()
	}
	go func() {
		defer b.wg.Done()
		view.Run(vctx) //nolint:errcheck // it returns nil once vctx ends
	}()
	go func() {
		defer b.wg.Done()
		tracker.Run(vctx) //nolint:errcheck // it returns nil once vctx ends
	}()
	go func() {
		defer b.wg.Done()
		start := time.Now()
		select {
		case <-view.Ready():
		case <-vctx.Done():
			return
		}
		s := view.Snapshot()
		n.log.Info("xds-node loaded the view", "revision", s.Revision, "resources", s.Len(),
			"etcd", b.endpoint, "load_time", time.Since(start).Round(time.Millisecond).String())
		n.watchReadiness(vctx)
	}()
	return nil
}

// close stops what startBackend started, in reverse order.
func (b *backend) close(log *slog.Logger) {
	if b.cancel != nil {
		b.cancel()
		b.wg.Wait()
	}
	if b.client != nil {
		if err := b.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("closing the etcd client", "err", err)
		}
	}
	if b.etcd != nil {
		b.etcd.Close() //nolint:errcheck // always nil
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
		n.httpSrv.Close() //nolint:errcheck // only the listener's error, already closed
	}
	wg.Wait()
}

// readiness says whether the node is ready and, if not, why.
func (n *Node) readiness() (bool, string) {
	if n.stopping.Load() {
		return false, "shutting down"
	}
	v := n.view.Load()
	if v == nil {
		if n.cfg.DevMode() {
			return false, "starting the embedded etcd"
		}
		return false, "connecting to etcd"
	}
	select {
	case <-v.Ready():
	default:
		return false, "loading the view from etcd"
	}
	if quiet := time.Since(v.LastHeard()); quiet > n.cfg.EtcdStaleAfter {
		return false, fmt.Sprintf("etcd unreachable: nothing heard from it for %s; serving the view at revision %d meanwhile",
			quiet.Round(time.Second), v.Snapshot().Revision)
	}
	return true, ""
}

func (n *Node) ready() bool {
	ok, _ := n.readiness()
	return ok
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
		return
	}
	fmt.Fprintln(w, "ok")
}

// viewStatus is the body of /debug/view.
type viewStatus struct {
	// Loaded is false until the view's first load; the other fields are
	// then zero and Reason says why.
	Loaded bool   `json:"loaded"`
	Reason string `json:"reason,omitempty"`
	// Revision is the etcd revision of the latest snapshot.
	Revision int64 `json:"revision"`
	// Resources counts the resources held, and Types per type name.
	Resources int            `json:"resources"`
	Types     map[string]int `json:"types,omitempty"`
	// Malformed counts the etcd keys skipped because their values do
	// not decode.
	Malformed int `json:"malformed"`
	// HistoryFrom is the oldest revision from which the view knows every
	// change.
	HistoryFrom int64 `json:"history_from"`
}

// serveDebugStreams lists every open xDS stream, SotW and delta, as JSON.
func (n *Node) serveDebugStreams(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	var leases []lease.Info
	if t := n.leases.Load(); t != nil {
		leases = t.Tracked()
	}
	enc.Encode(struct { //nolint:errcheck // the client went away
		Streams      []ads.StreamStatus   `json:"streams"`
		DeltaStreams []delta.StreamStatus `json:"delta_streams"`
		Leases       []lease.Info         `json:"leases,omitempty"`
		Relay        []relay.StreamInfo   `json:"relay"`
	}{n.sotw.Streams(), n.delta.Streams(), leases, n.relayStreams()})
}

// debugOnly lets only loopback clients reach h, unless DebugOpen.
func (n *Node) debugOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.cfg.DebugOpen {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			ip := net.ParseIP(host)
			if err != nil || ip == nil || !ip.IsLoopback() {
				http.Error(w, "debug endpoints answer loopback clients only (see --debug-open)", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// serveDebugView reports the view's latest snapshot as JSON; 503 before
// the first load.
func (n *Node) serveDebugView(w http.ResponseWriter, _ *http.Request) {
	var st viewStatus
	var s *store.Snapshot
	if v := n.view.Load(); v != nil {
		s = v.Snapshot()
	}
	code := http.StatusOK
	if s == nil {
		_, st.Reason = n.readiness()
		code = http.StatusServiceUnavailable
	} else {
		st = viewStatus{Loaded: true, Revision: s.Revision, Resources: s.Len(),
			Malformed: s.Malformed, HistoryFrom: s.HistoryFrom, Types: map[string]int{}}
		for _, t := range resource.All() {
			c := 0
			s.Walk(t, "", func(*store.Entry) bool { c++; return true })
			if c > 0 {
				st.Types[t.Name] = c
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(st) //nolint:errcheck // the client went away
}

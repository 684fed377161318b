package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// Run runs the scenario: it writes the fixture, opens the streams and
// waits for every client to hold it, measures the server idle, then makes
// the updates one after the other, each waited for, and returns what it
// measured. An update not received by every client within UpdateTimeout
// is recorded as such, not an error; a sync that does not complete within
// SyncTimeout is an error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := newScenario(ctx, cfg)
	if err := s.scrapeBefore(); err != nil {
		return nil, err
	}
	s.setPhase("seed")
	seed, err := cfg.Target.Seed(ctx, s.fx)
	if err != nil {
		return nil, fmt.Errorf("seed the fixture: %w", err)
	}
	s.res.Sync.Version = seed.Version
	if s.set, err = newClientSet(ctx, cfg, s.fx); err != nil {
		return nil, err
	}
	defer s.set.close()
	defer cancel() // the clients end before their connections close
	if err := s.set.open(ctx); err != nil {
		return nil, err
	}
	stopProgress := progress(cfg, s.set, s.getPhase)
	defer stopProgress()

	s.setPhase("sync")
	if err := s.sync(seed.Version); err != nil {
		return nil, err
	}
	if cfg.Idle > 0 && cfg.MetricsURL != "" {
		s.setPhase("idle")
		if err := s.idle(); err != nil {
			return nil, err
		}
	}
	if cfg.During != nil {
		s.setPhase("during")
		if err := cfg.During(ctx); err != nil {
			return nil, err
		}
	}
	s.setPhase("updates")
	if err := s.updates(); err != nil {
		return nil, err
	}
	return s.result()
}

// newClientSet is the run's clients: in this process, or over
// cfg.Processes workers.
func newClientSet(ctx context.Context, cfg Config, fx fixture.Set) (clientSet, error) {
	if cfg.Processes > 1 {
		return newProcessSet(ctx, cfg)
	}
	return &localSet{f: newFleet(cfg, fx)}, nil
}

// scenario is one Run: its fleet, the result it fills phase by phase,
// and the server samples the result's figures are differences of.
type scenario struct {
	ctx   context.Context
	cfg   Config
	fx    fixture.Set
	set   clientSet
	res   *Result
	etcd  *EtcdResult // nil without EtcdMetricsURL
	hc    *http.Client
	phase atomic.Pointer[string] // for the progress lines

	// The server's samples, nil without MetricsURL.
	before, afterSync, beforeUpdates, afterUpdates *ServerSample
	// all is every receipt's latency, over every update.
	all []float64
}

func newScenario(ctx context.Context, cfg Config) *scenario {
	res := &Result{
		Target: cfg.TargetName, Mode: "sotw", Streams: cfg.Streams, Conns: cfg.Conns,
		Clusters: cfg.Clusters, Endpoints: cfg.Endpoints, Listeners: cfg.Listeners, NackRatio: cfg.NackRatio, Started: time.Now().UTC(),
	}
	if cfg.Delta {
		res.Mode = "delta"
	}
	fx := fixture.NewSet(cfg.Clusters, cfg.Endpoints, cfg.Listeners, seedPort)
	s := &scenario{ctx: ctx, cfg: cfg, fx: fx, res: res, hc: &http.Client{Timeout: 10 * time.Second}}
	if cfg.EtcdMetricsURL != "" {
		s.etcd = &EtcdResult{}
	}
	return s
}

func (s *scenario) setPhase(p string) { s.phase.Store(&p) }

func (s *scenario) getPhase() string { return *s.phase.Load() }

// scrape samples the server's /metrics (the sum of its replicas', given
// several); nil without MetricsURL.
func (s *scenario) scrape() (*ServerSample, error) {
	if s.cfg.MetricsURL == "" {
		return nil, nil
	}
	sample, err := scrapeSum(s.ctx, s.hc, strings.Split(s.cfg.MetricsURL, ","))
	if err != nil {
		return nil, err
	}
	return &sample, nil
}

// scrapeEtcd samples etcd's /metrics; nil without EtcdMetricsURL.
func (s *scenario) scrapeEtcd() (*ServerSample, error) {
	if s.cfg.EtcdMetricsURL == "" {
		return nil, nil
	}
	sample, err := scrapeSum(s.ctx, s.hc, strings.Split(s.cfg.EtcdMetricsURL, ","))
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return &sample, nil
}

// scrapeBefore samples the server before the fixture is written, and
// scrapes etcd once so that a wrong URL fails before the run.
func (s *scenario) scrapeBefore() error {
	var err error
	if s.before, err = s.scrape(); err != nil {
		return err
	}
	_, err = s.scrapeEtcd()
	return err
}

// dial opens the client connections: Conns of them (0: one per stream),
// spread over XDSAddr's addresses in turn from the first'th on (a
// worker's share goes on where the last worker's ended).
func dial(cfg Config, first int) ([]*grpc.ClientConn, error) {
	nconn := cfg.Conns
	if nconn == 0 {
		nconn = cfg.Streams
	}
	conns := make([]*grpc.ClientConn, 0, nconn)
	addrs := cfg.addrs()
	for i := range nconn {
		addr := addrs[(first+i)%len(addrs)]
		conn, err := grpc.NewClient(addr, cfg.dialOptions()...)
		if err != nil {
			closeConns(conns)
			return nil, fmt.Errorf("--xds-addr %s: %w", addr, err)
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

// envoyWindow is Envoy's HTTP/2 stream and connection window.
const envoyWindow = 256 << 20

// dialOptions are the options of each connection: plain text, Envoy's
// HTTP/2 windows (256 MiB, static: a grpc-go client left to its defaults
// would also probe the bandwidth with a ping on every burst of responses,
// which Envoy never sends), and the keepalive pings of the bootstraps.
func (c *Config) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256 << 20)),
	}
	if c.KeepaliveTime > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout,
		}))
	}
	if c.TCPKeepalive > 0 {
		d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: c.TCPKeepalive, Interval: tcpKeepaliveInterval, Count: tcpKeepaliveProbes,
		}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}))
	}
	return opts
}

// tcpKeepaliveInterval and tcpKeepaliveProbes are those of the
// bootstraps in deploy/envoy (tcp_keepalive keepalive_interval and
// keepalive_probes).
const (
	tcpKeepaliveInterval = 5 * time.Second
	tcpKeepaliveProbes   = 3
)

// closeConns closes conns, the last opened first.
func closeConns(conns []*grpc.ClientConn) {
	for i := len(conns) - 1; i >= 0; i-- {
		conns[i].Close()
	}
}

// sync starts the streams and waits for every client to hold the
// fixture at version, every cluster and route held.
func (s *scenario) sync(version int64) error {
	start := time.Now()
	t0, err := s.set.tally(s.ctx)
	if err != nil {
		return err
	}
	if err := s.set.start(s.ctx); err != nil {
		return err
	}
	g := goalSpec{Version: version, NeedHeld: int32(s.cfg.Clusters), NeedRoutes: int32(s.cfg.Listeners)}
	if err := s.set.reach(s.ctx, g, s.cfg.SyncTimeout); err != nil {
		t, _ := s.set.tally(s.ctx)
		return fmt.Errorf("initial sync: %w (stream errors: %d, %v)", err, t.StreamErrors, t.ErrorKinds)
	}
	s.res.Sync.Seconds = time.Since(start).Seconds()
	t1, err := s.set.tally(s.ctx)
	if err != nil {
		return err
	}
	s.res.Loadgen.SyncCPUSeconds = (t1.CPU - t0.CPU).Seconds()
	b, r, err := s.set.sums(s.ctx)
	if err != nil {
		return err
	}
	streams := float64(s.cfg.Streams)
	s.res.Sync.BytesPerClient, s.res.Sync.ResourcesPerClient = float64(b)/streams, float64(r)/streams
	s.afterSync, err = s.scrape()
	return err
}

// idle measures the server, and etcd, over Idle with every client synced
// and nothing written.
func (s *scenario) idle() error {
	// Let the sync's last ACKs and garbage collections settle, and a
	// Legation replica write the status of the nodes that synced: its
	// write budget spreads 10,000 records over about 8 s, work the
	// sync caused, not the idle streams.
	if err := settle(s.ctx, s.scrape, time.Minute); err != nil {
		return err
	}
	if err := sleep(s.ctx, time.Second); err != nil {
		return err
	}
	a, err := s.scrape()
	if err != nil {
		return err
	}
	ea, err := s.scrapeEtcd()
	if err != nil {
		return err
	}
	b0, _, err := s.set.sums(s.ctx)
	if err != nil {
		return err
	}
	if err := sleep(s.ctx, s.cfg.Idle); err != nil {
		return err
	}
	b, err := s.scrape()
	if err != nil {
		return err
	}
	if eb, err := s.scrapeEtcd(); err != nil {
		return err
	} else if eb != nil {
		s.etcd.IdleCPUMillisPerSecond = 1000 * (eb.CPUSeconds - ea.CPUSeconds) / eb.At.Sub(ea.At).Seconds()
	}
	b1, _, err := s.set.sums(s.ctx)
	if err != nil {
		return err
	}
	idle := &IdleResult{Seconds: b.At.Sub(a.At).Seconds(), CPUSeconds: b.CPUSeconds - a.CPUSeconds,
		BytesPerClient: float64(b1-b0) / float64(s.cfg.Streams)}
	idle.CPUMillisPerSecond = 1000 * idle.CPUSeconds / idle.Seconds
	s.res.Idle = idle
	return nil
}

// updates makes the updates, Interval apart, each waited for, and
// measures the server, etcd and the load generator itself over them.
func (s *scenario) updates() error {
	var err error
	if s.beforeUpdates, err = s.scrape(); err != nil {
		return err
	}
	etcdBefore, err := s.scrapeEtcd()
	if err != nil {
		return err
	}
	var next time.Time
	between := quietgc.New(quietgc.Config{})
	gcs := automaticGCs()
	t0, err := s.set.tally(s.ctx)
	if err != nil {
		return err
	}
	for k := range s.cfg.Updates {
		if err := sleep(s.ctx, time.Until(next)); err != nil {
			return err
		}
		next = time.Now().Add(s.cfg.Interval)
		s.setPhase(fmt.Sprintf("update %d/%d", k+1, s.cfg.Updates))
		if err := s.update(k); err != nil {
			return err
		}
		// The tool's own collection, run inside a fan-out, would delay
		// the receipts it measures (10,000 clients: some 200 ms of
		// assists); every client has this update, so now is the moment,
		// if it is due.
		if k+1 < s.cfg.Updates && between.CollectIfDue() {
			s.res.Loadgen.CollectionsBetween++
		}
	}
	t1, err := s.set.tally(s.ctx)
	if err != nil {
		return err
	}
	l := &s.res.Loadgen
	l.UpdatesCPUSeconds = (t1.CPU - t0.CPU).Seconds()
	l.CollectionsBetween += t1.CollectionsBetween - t0.CollectionsBetween
	l.CollectionsIn = int(automaticGCs()-gcs) + t1.Collections - t0.Collections
	if s.afterUpdates, err = s.scrape(); err != nil {
		return err
	}
	if e, err := s.scrapeEtcd(); err != nil {
		return err
	} else if e != nil {
		s.etcd.UpdatesCPUSeconds = e.CPUSeconds - etcdBefore.CPUSeconds
		s.res.Etcd = s.etcd
	}
	return nil
}

// update makes update k (from 0), a new port for the endpoints of
// cluster k modulo Clusters, and waits up to UpdateTimeout for every
// client to receive it.
func (s *scenario) update(k int) error {
	set := fixture.Endpoints(k%s.cfg.Clusters, s.cfg.Endpoints, seedPort+1+uint32(k))
	b0, r0, err := s.set.sums(s.ctx)
	if err != nil {
		return err
	}
	c, err := s.cfg.Target.SetEndpoints(s.ctx, set)
	if err != nil {
		return fmt.Errorf("update %d: %w", k+1, err)
	}
	werr := s.set.reach(s.ctx, goalSpec{Idx: int64(k + 1), Version: c.Version}, s.cfg.UpdateTimeout)
	if s.ctx.Err() != nil {
		return context.Cause(s.ctx)
	}
	b1, r1, err := s.set.sums(s.ctx)
	if err != nil {
		return err
	}
	u := UpdateResult{Index: k + 1, Cluster: set.Cluster, Version: c.Version, Sent: c.Sent.UTC(), WriteSeconds: c.At.Sub(c.Sent).Seconds()}
	lat, missing, err := s.set.receipts(s.ctx, c.Version, c.Sent)
	if err != nil {
		return err
	}
	u.Received, u.Missing = len(lat), missing
	u.Latency = summarize(lat)
	if werr != nil {
		u.Error = werr.Error()
	}
	u.BytesPerClient = float64(b1-b0) / float64(s.cfg.Streams)
	u.ResourcesPerClient = float64(r1-r0) / float64(s.cfg.Streams)
	s.all = append(s.all, lat...)
	s.res.Updates = append(s.res.Updates, u)
	return nil
}

// result completes the Result with the clients' counts and the server's
// figures.
func (s *scenario) result() (*Result, error) {
	res := s.res
	t, err := s.set.tally(s.ctx)
	if err != nil {
		return nil, err
	}
	res.Overall = overall(res.Updates, s.all)
	res.StreamErrors, res.Reconnects, res.Nacks, res.Responses = t.StreamErrors, t.Reconnects, t.Nacks, t.Responses
	res.ErrorKinds = t.ErrorKinds
	if s.before != nil {
		res.Server = s.server()
		res.PerEnvoy = res.perEnvoy()
	}
	res.Seconds = time.Since(res.Started).Seconds()
	s.setPhase("done")
	return res, nil
}

// server is the server's figures, from its samples.
func (s *scenario) server() *ServerResult {
	r := &ServerResult{
		RSSBytesBefore:    s.before.RSSBytes,
		RSSBytesAfterSync: s.afterSync.RSSBytes,
		RSSBytesAfter:     s.afterUpdates.RSSBytes,
		SyncCPUSeconds:    s.afterSync.CPUSeconds - s.before.CPUSeconds,
		UpdatesCPUSeconds: s.afterUpdates.CPUSeconds - s.beforeUpdates.CPUSeconds,
		UpdatesSeconds:    s.afterUpdates.At.Sub(s.beforeUpdates.At).Seconds(),
	}
	if s.cfg.Updates > 0 {
		r.CPUSecondsPerUpdatePerClient = r.UpdatesCPUSeconds / float64(s.cfg.Updates) / float64(s.cfg.Streams)
	}
	r.RSSBytesPerStream = (r.RSSBytesAfterSync - r.RSSBytesBefore) / float64(s.cfg.Streams)
	return r
}

// seedPort is the endpoints' port in the fixture; update k writes
// seedPort+k, so that every update changes something, run after run.
const seedPort = 10000

// settle waits, for up to limit, until the server owes etcd no status
// writes (legation_status_records_dirty is 0, or the server has no such
// metric).
func settle(ctx context.Context, scrape func() (*ServerSample, error), limit time.Duration) error {
	for end := time.Now().Add(limit); time.Now().Before(end); {
		s, err := scrape()
		if err != nil || s == nil || s.StatusDirty <= 0 {
			return err
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// automaticGCs is how many collections the Go runtime has started on its
// own (runtime.GC's not counted).
func automaticGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/automatic:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

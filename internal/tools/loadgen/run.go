package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/procstat"
)

// goal is what the clients are waited for: an EDS version, and for the
// initial sync every cluster held.
type goal struct {
	idx      int64 // 0: the initial sync; k: update k
	version  int64
	needHeld int32 // EDS resources
	// needRoutes is the route configurations (with listeners).
	needRoutes int32
	reached    atomic.Int64 // clients that reached it
}

// fleet is the clients of one run and what they count together.
type fleet struct {
	cfg   Config
	names []string       // the fixture's cluster names, by index
	index map[string]int // names' inverse; read only
	// routes and routeIndex are the same for route configurations.
	routes     []string
	routeIndex map[string]int

	clients []*client
	goal    atomic.Pointer[goal]

	streamErrors, reconnects, nacks, responses atomic.Int64

	errMu  sync.Mutex
	errors map[string]int // guarded by errMu: stream end errors by text, at most maxErrorKinds
}

const maxErrorKinds = 10

func (f *fleet) noteError(err error) {
	if err == nil {
		return
	}
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if _, ok := f.errors[err.Error()]; ok || len(f.errors) < maxErrorKinds {
		f.errors[err.Error()]++
	}
}

// reach counts c as having reached the current goal, once.
func (f *fleet) reach(c *client) {
	g := f.goal.Load()
	if g == nil || c.edsVersion.Load() < g.version || c.heldN.Load() < g.needHeld || c.rdsHeldN.Load() < g.needRoutes {
		return
	}
	for {
		old := c.counted.Load()
		if old > g.idx {
			return
		}
		if c.counted.CompareAndSwap(old, g.idx+1) {
			// Counted on the goal loaded: a client late for the last
			// goal does not count towards the next.
			g.reached.Add(1)
			return
		}
	}
}

// setGoal starts waiting for g; clients already there count at once.
func (f *fleet) setGoal(g *goal) {
	f.goal.Store(g)
	for _, c := range f.clients {
		f.reach(c)
	}
}

// reached is the number of clients that reached the current goal.
func (f *fleet) reached() int64 {
	if g := f.goal.Load(); g != nil {
		return g.reached.Load()
	}
	return 0
}

// wait polls until every client reached the goal, or timeout.
func (f *fleet) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for f.reached() < int64(len(f.clients)) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return fmt.Errorf("%d of %d clients after %s", f.reached(), len(f.clients), timeout)
		case <-tick.C:
		}
	}
	return nil
}

func (f *fleet) sums() (bytes, resources int64) {
	for _, c := range f.clients {
		bytes += c.bytes.Load()
		resources += c.resources.Load()
	}
	return bytes, resources
}

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
	res := &Result{
		Target: cfg.TargetName, Mode: "sotw", Streams: cfg.Streams, Conns: cfg.Conns,
		Clusters: cfg.Clusters, Endpoints: cfg.Endpoints, Listeners: cfg.Listeners, NackRatio: cfg.NackRatio, Started: time.Now().UTC(),
	}
	if cfg.Delta {
		res.Mode = "delta"
	}
	f := &fleet{cfg: cfg, index: make(map[string]int, cfg.Clusters), routeIndex: make(map[string]int, cfg.Listeners), errors: map[string]int{}}
	for i := range cfg.Listeners {
		f.routes = append(f.routes, fixture.RouteName(i))
		f.routeIndex[f.routes[i]] = i
	}
	fx := fixture.NewSet(cfg.Clusters, cfg.Endpoints, cfg.Listeners, seedPort)
	for i, name := range fx.Clusters {
		f.names = append(f.names, name)
		f.index[name] = i
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	scrape := func() (*ServerSample, error) {
		if cfg.MetricsURL == "" {
			return nil, nil
		}
		s, err := Scrape(ctx, hc, cfg.MetricsURL)
		if err != nil {
			return nil, err
		}
		return &s, nil
	}
	scrapeEtcd := func() (*ServerSample, error) {
		if cfg.EtcdMetricsURL == "" {
			return nil, nil
		}
		s, err := Scrape(ctx, hc, cfg.EtcdMetricsURL)
		if err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		return &s, nil
	}
	before, err := scrape()
	if err != nil {
		return nil, err
	}
	if _, err := scrapeEtcd(); err != nil {
		return nil, err // early: a wrong URL fails before the run
	}
	var etcdRes *EtcdResult
	if cfg.EtcdMetricsURL != "" {
		etcdRes = &EtcdResult{}
	}

	phase := atomic.Pointer[string]{}
	setPhase := func(p string) { phase.Store(&p) }
	setPhase("seed")

	seed, err := cfg.Target.Seed(ctx, fx)
	if err != nil {
		return nil, fmt.Errorf("seed the fixture: %w", err)
	}
	res.Sync.Version = seed.Version

	const envoyWindow = 256 << 20
	nconn := cfg.Conns
	if nconn == 0 {
		nconn = cfg.Streams
	}
	conns := make([]*grpc.ClientConn, nconn)
	addrs := cfg.addrs()
	for i := range conns {
		addr := addrs[i%len(addrs)]
		// Envoy's HTTP/2 windows (256 MiB, static): a grpc-go client
		// left to its defaults would also probe the bandwidth with a
		// ping on every burst of responses, which Envoy never sends.
		conns[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			return nil, fmt.Errorf("--xds-addr %s: %w", addr, err)
		}
		defer conns[i].Close()
	}
	for i := range cfg.Streams {
		f.clients = append(f.clients, newClient(f, i, conns[i%nconn]))
	}
	f.setGoal(&goal{idx: 0, version: seed.Version, needHeld: int32(cfg.Clusters), needRoutes: int32(cfg.Listeners)})
	stopProgress := f.progress(&phase)
	defer stopProgress()

	setPhase("sync")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	syncStart := time.Now()
	syncCPU := procstat.CPU()
	for i, c := range f.clients {
		if cfg.OpenRate > 0 {
			at := syncStart.Add(time.Duration(float64(i) / cfg.OpenRate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				case <-time.After(d):
				}
			}
		}
		wg.Go(func() { c.run(ctx) })
	}
	if err := f.wait(ctx, cfg.SyncTimeout); err != nil {
		return nil, fmt.Errorf("initial sync: %w (stream errors: %d, %v)", err, f.streamErrors.Load(), f.errorKinds())
	}
	res.Sync.Seconds = time.Since(syncStart).Seconds()
	res.Loadgen.SyncCPUSeconds = (procstat.CPU() - syncCPU).Seconds()
	b, r := f.sums()
	res.Sync.BytesPerClient, res.Sync.ResourcesPerClient = float64(b)/float64(cfg.Streams), float64(r)/float64(cfg.Streams)
	afterSync, err := scrape()
	if err != nil {
		return nil, err
	}

	if cfg.Idle > 0 && cfg.MetricsURL != "" {
		setPhase("idle")
		// Let the sync's last ACKs and garbage collections settle, and a
		// Legation replica write the status of the nodes that synced: its
		// write budget spreads 10,000 records over about 8 s, work the
		// sync caused, not the idle streams.
		if err := settle(ctx, scrape, time.Minute); err != nil {
			return nil, err
		}
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		a, err := scrape()
		if err != nil {
			return nil, err
		}
		ea, err := scrapeEtcd()
		if err != nil {
			return nil, err
		}
		b0, _ := f.sums()
		if err := sleep(ctx, cfg.Idle); err != nil {
			return nil, err
		}
		b, err := scrape()
		if err != nil {
			return nil, err
		}
		if eb, err := scrapeEtcd(); err != nil {
			return nil, err
		} else if eb != nil {
			etcdRes.IdleCPUMillisPerSecond = 1000 * (eb.CPUSeconds - ea.CPUSeconds) / eb.At.Sub(ea.At).Seconds()
		}
		b1, _ := f.sums()
		res.Idle = &IdleResult{Seconds: b.At.Sub(a.At).Seconds(), CPUSeconds: b.CPUSeconds - a.CPUSeconds,
			BytesPerClient: float64(b1-b0) / float64(cfg.Streams)}
		res.Idle.CPUMillisPerSecond = 1000 * res.Idle.CPUSeconds / res.Idle.Seconds
	}

	if cfg.During != nil {
		setPhase("during")
		if err := cfg.During(ctx); err != nil {
			return nil, err
		}
	}

	setPhase("updates")
	beforeUpdates, err := scrape()
	if err != nil {
		return nil, err
	}
	etcdBeforeUpdates, err := scrapeEtcd()
	if err != nil {
		return nil, err
	}
	var all []float64
	var next time.Time
	between := quietgc.New(quietgc.Config{})
	updatesGCs := automaticGCs()
	updatesCPU := procstat.CPU()
	for k := range cfg.Updates {
		if err := sleep(ctx, time.Until(next)); err != nil {
			return nil, err
		}
		next = time.Now().Add(cfg.Interval)
		setPhase(fmt.Sprintf("update %d/%d", k+1, cfg.Updates))
		i := k % cfg.Clusters
		set := fixture.Endpoints(i, cfg.Endpoints, seedPort+1+uint32(k))
		b0, r0 := f.sums()
		c, err := cfg.Target.SetEndpoints(ctx, set)
		if err != nil {
			return nil, fmt.Errorf("update %d: %w", k+1, err)
		}
		f.setGoal(&goal{idx: int64(k + 1), version: c.Version})
		werr := f.wait(ctx, cfg.UpdateTimeout)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		b1, r1 := f.sums()
		u := UpdateResult{Index: k + 1, Cluster: set.Cluster, Version: c.Version, Sent: c.Sent.UTC(), WriteSeconds: c.At.Sub(c.Sent).Seconds()}
		lat := make([]float64, 0, cfg.Streams)
		for _, cl := range f.clients {
			at, ok := cl.firstAt(c.Version)
			if !ok {
				u.Missing++
				continue
			}
			lat = append(lat, max(0, at.Sub(c.Sent).Seconds()))
		}
		u.Received = len(lat)
		u.Latency = summarize(lat)
		if werr != nil {
			u.Error = werr.Error()
		}
		u.BytesPerClient = float64(b1-b0) / float64(cfg.Streams)
		u.ResourcesPerClient = float64(r1-r0) / float64(cfg.Streams)
		all = append(all, lat...)
		res.Updates = append(res.Updates, u)
		if k+1 < cfg.Updates {
			// The tool's own collection, run inside a fan-out, would
			// delay the receipts it measures (10,000 clients: some
			// 200 ms of assists); every client has this update, so now
			// is the moment, if it is due.
			if between.CollectIfDue() {
				res.Loadgen.CollectionsBetween++
			}
		}
	}
	res.Loadgen.UpdatesCPUSeconds = (procstat.CPU() - updatesCPU).Seconds()
	res.Loadgen.CollectionsIn = int(automaticGCs() - updatesGCs)
	afterUpdates, err := scrape()
	if err != nil {
		return nil, err
	}
	if e, err := scrapeEtcd(); err != nil {
		return nil, err
	} else if e != nil {
		etcdRes.UpdatesCPUSeconds = e.CPUSeconds - etcdBeforeUpdates.CPUSeconds
		res.Etcd = etcdRes
	}
	res.Overall = overall(res.Updates, all)
	res.StreamErrors = f.streamErrors.Load()
	res.Reconnects = f.reconnects.Load()
	res.Nacks = f.nacks.Load()
	res.Responses = f.responses.Load()
	res.ErrorKinds = f.errorKinds()
	if before != nil {
		s := &ServerResult{
			RSSBytesBefore:    before.RSSBytes,
			RSSBytesAfterSync: afterSync.RSSBytes,
			RSSBytesAfter:     afterUpdates.RSSBytes,
			SyncCPUSeconds:    afterSync.CPUSeconds - before.CPUSeconds,
			UpdatesCPUSeconds: afterUpdates.CPUSeconds - beforeUpdates.CPUSeconds,
			UpdatesSeconds:    afterUpdates.At.Sub(beforeUpdates.At).Seconds(),
		}
		if cfg.Updates > 0 {
			s.CPUSecondsPerUpdatePerClient = s.UpdatesCPUSeconds / float64(cfg.Updates) / float64(cfg.Streams)
		}
		s.RSSBytesPerStream = (s.RSSBytesAfterSync - s.RSSBytesBefore) / float64(cfg.Streams)
		res.Server = s
	}
	res.Seconds = time.Since(res.Started).Seconds()
	setPhase("done")
	return res, nil
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

func (f *fleet) errorKinds() map[string]int {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if len(f.errors) == 0 {
		return nil
	}
	out := make(map[string]int, len(f.errors))
	for k, v := range f.errors {
		out[k] = v
	}
	return out
}

// progress writes a progress line every ProgressEvery until the returned
// func is called.
func (f *fleet) progress(phase *atomic.Pointer[string]) func() {
	if f.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(f.cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			fmt.Fprintf(f.cfg.Progress, "xds-loadgen: %5.0fs %-14s %d/%d clients there, %d responses, %d NACKs, %d stream errors\n",
				time.Since(start).Seconds(), *phase.Load(), f.reached(), len(f.clients),
				f.responses.Load(), f.nacks.Load(), f.streamErrors.Load())
		}
	})
	return func() { close(done); wg.Wait() }
}

// automaticGCs is how many collections the Go runtime has started on its
// own (runtime.GC's not counted).
func automaticGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/automatic:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

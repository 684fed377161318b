package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/tools/chaos"
	"github.com/legation-io/legation/internal/tools/chaos/faults"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/loadgen"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// seedRun is one seed's run: the parts it starts one after the other,
// each closed, the last started first, when the run ends.
type seedRun struct {
	cfg    Config
	logger *slog.Logger
	sum    *Summary
	closes []func() // in the order the parts started

	c       *localcluster.Cluster
	cli     *clientv3.Client // straight to the etcd members
	st      *store.Store
	hist    *chaos.HistoryRecorder
	histF   *os.File
	stopH   func() error // stops hist, once, and returns its error
	seeded  loadgen.Commit
	addrs   []string // the fronts' addresses
	w       *record.Writer
	rec     *lastRecorder
	ex      *faults.Executor
	app     *applier
	healed  time.Time // when the heal returned
	clients *clientRuns
}

// onClose has f called when the run ends, before what started earlier.
func (s *seedRun) onClose(f func()) { s.closes = append(s.closes, f) }

// close closes what the run started, the last started first.
func (s *seedRun) close() {
	for i := len(s.closes) - 1; i >= 0; i-- {
		s.closes[i]()
	}
}

// keepOrRemove ends a seed's run: removes its directory after a clean
// seed (unless Keep), or keeps it with the summary Recheck needs.
func keepOrRemove(sum *Summary, cfg Config, err error, start time.Time) {
	sum.Elapsed = time.Since(start)
	if err == nil && sum.OK() && !cfg.Keep {
		os.RemoveAll(cfg.Dir)
		return
	}
	sum.Kept = cfg.Dir
	// What Recheck needs besides the recording and the history.
	if b, jerr := json.MarshalIndent(sum, "", "  "); jerr == nil {
		_ = os.WriteFile(filepath.Join(cfg.Dir, summaryFile), b, 0o644)
	}
}

// start brings up what the faults are injected into and what watches
// them: the cluster, an etcd client and store, etcd's history, the
// fixture, the fronts and the recording.
func (s *seedRun) start(ctx context.Context) error {
	if err := s.startCluster(ctx); err != nil {
		return err
	}
	if err := s.connectEtcd(); err != nil {
		return err
	}
	if err := s.recordHistory(ctx); err != nil {
		return err
	}
	fx := fixture.NewSet(s.cfg.Clusters, s.cfg.Endpoints, s.cfg.Listeners, 10000)
	seeded, err := (&loadgen.StoreTarget{Store: s.st}).Seed(ctx, fx)
	if err != nil {
		return fmt.Errorf("chaos: seed the fixture: %w", err)
	}
	s.seeded = seeded
	if err := s.startFronts(); err != nil {
		return err
	}
	w, err := record.Create(filepath.Join(s.cfg.Dir, recordingFile))
	if err != nil {
		return err
	}
	s.onClose(func() { w.Close() })
	s.w, s.rec = w, &lastRecorder{w: w}
	return nil
}

// startCluster starts the local cluster, 3 etcd members and 3 replicas
// behind fault proxies, on a network of its own, and waits for the
// replicas' ring.
func (s *seedRun) startCluster(ctx context.Context) error {
	ccfg := localcluster.Config{
		Dir: filepath.Join(s.cfg.Dir, "cluster"), EtcdMembers: 3, Replicas: 3, EtcdProxies: true, GossipProxies: true,
		EtcdBin: s.cfg.Binaries.Etcd, XDSNodeBin: s.cfg.Binaries.XDSNode, Env: s.cfg.Env,
		Timeout: 60 * time.Second, Grace: 25 * time.Second, Logger: s.logger,
	}
	prefix, claim, err := localcluster.PickNet(ccfg)
	if err != nil {
		return err
	}
	s.onClose(func() { claim.Close() })
	ccfg.Net = prefix
	c, err := localcluster.New(ccfg)
	if err != nil {
		return err
	}
	s.onClose(func() { c.Close() })
	s.c = c
	if err := c.Up(ctx); err != nil {
		return err
	}
	return c.WaitRing(ctx)
}

// connectEtcd opens the run's etcd client and store.
func (s *seedRun) connectEtcd() error {
	var members []string
	for _, m := range s.c.Etcd() {
		members = append(members, m.ClientAddr)
	}
	// Straight to the members, not through a replica's proxies. Keepalive
	// leaves a frozen member for another.
	cli, err := clientv3.New(clientv3.Config{Endpoints: members, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("chaos: etcd: %w", err)
	}
	s.onClose(func() { cli.Close() })
	s.cli = cli
	s.st, err = store.New(store.Config{Client: cli, Writer: fmt.Sprintf("chaos-seed-%d", s.cfg.Seed)})
	return err
}

// recordHistory starts recording etcd's history of the run, from before
// the fixture, and waits until the recorder watches.
func (s *seedRun) recordHistory(ctx context.Context) error {
	hf, err := os.Create(filepath.Join(s.cfg.Dir, historyFile))
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	s.onClose(func() { hf.Close() })
	s.histF = hf
	hr, err := chaos.NewHistoryRecorder(s.cli, s.st.Prefix(), hf)
	if err != nil {
		return err
	}
	s.hist = hr
	hctx, hcancel := context.WithCancel(ctx)
	hdone := make(chan error, 1)
	go func() { hdone <- hr.Run(hctx) }()
	s.stopH = sync.OnceValue(func() error { hcancel(); return <-hdone })
	s.onClose(func() { _ = s.stopH() })
	select {
	case <-hr.Ready():
		return nil
	case err := <-hdone:
		return fmt.Errorf("chaos: history: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startFronts starts three fronts, front k preferring replica k of the
// moment.
func (s *seedRun) startFronts() error {
	for k := range 3 {
		f, err := newFront("127.0.0.1:0", func() []string { return liveReplicas(s.c, k) })
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		s.onClose(f.Close)
		s.addrs = append(s.addrs, f.Addr())
	}
	return nil
}

// exercise runs the clients through the fault schedule: synced first,
// faults with applies all along, heal, settle; then the check.
func (s *seedRun) exercise(ctx context.Context, sched []faults.Fault) error {
	s.clients = s.startClients(ctx)
	s.onClose(s.clients.stop)
	if err := s.clients.waitSynced(ctx); err != nil {
		return err
	}
	s.logger.Info("clients synced", "clients", s.cfg.Clients, "revision", s.seeded.Version)
	if err := s.inject(ctx, sched); err != nil {
		return err
	}
	if err := s.settle(ctx); err != nil {
		return err
	}
	if err := s.clients.finish(); err != nil {
		return err
	}
	if err := s.w.Close(); err != nil {
		return err
	}
	if err := s.finishHistory(ctx); err != nil {
		return err
	}
	s.sum.Crashes = append(s.c.BadExits(), s.c.LogProblems()...)
	return s.check()
}

// inject runs the fault schedule with applies all along, then heals
// every fault.
func (s *seedRun) inject(ctx context.Context, sched []faults.Fault) error {
	actx, acancel := context.WithCancel(ctx)
	s.app = newApplier(s.st, s.cfg.Seed, s.cfg.Clusters, s.cfg.Endpoints, s.cfg.Listeners)
	if s.cfg.Rollouts {
		s.app.ro = newRollouts(rollout.NewStore(s.st, s.cli, s.st.Writer()), s.cfg.Seed)
	}
	adone := make(chan struct{})
	go func() { defer close(adone); s.app.run(actx, s.cfg.ApplyEvery) }()
	s.ex = faults.NewExecutor(s.c, s.logger)
	if err := s.ex.Run(ctx, sched); err != nil {
		if ctx.Err() != nil {
			acancel()
			<-adone
			return ctx.Err()
		}
		for _, e := range unjoin(err) {
			s.sum.FaultErrors = append(s.sum.FaultErrors, e.Error())
		}
	}
	heal := time.Now()
	s.sum.HealAt = heal
	acancel()
	<-adone
	s.sum.Applies, s.sum.ApplyFailures = s.app.applies, s.app.failed
	if ro := s.app.ro; ro != nil {
		s.sum.Rollouts, s.sum.Promoted, s.sum.Aborted = ro.ids, ro.promoted, ro.aborted
	}
	if err := s.ex.Heal(ctx); err != nil {
		s.sum.HealError = err.Error()
	}
	s.healed = time.Now()
	s.sum.HealTook = s.healed.Sub(heal)
	s.sum.FaultsApplied = s.ex.Stats().Applied
	s.logger.Info("healed", "took", s.sum.HealTook, "applies", s.app.applies, "apply_failures", s.app.failed)
	return nil
}

// settle waits until no client received anything for Quiet (from the
// end of the heal at least), or the bound passed.
func (s *seedRun) settle(ctx context.Context) error {
	for limit := s.sum.HealAt.Add(s.cfg.ConvergeWithin + s.cfg.Quiet); time.Now().Before(limit); {
		if time.Since(s.healed) >= s.cfg.Quiet && time.Since(s.rec.last()) >= s.cfg.Quiet {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// finishHistory waits for the history to reach etcd's last revision,
// then stops the recorder and closes its file.
func (s *seedRun) finishHistory(ctx context.Context) error {
	resp, err := s.cli.Get(ctx, s.st.Prefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("chaos: etcd: %w", err)
	}
	for end := time.Now().Add(time.Minute); s.hist.Last() < resp.Header.Revision; {
		if time.Now().After(end) {
			return fmt.Errorf("chaos: history at %d after a minute, etcd at %d", s.hist.Last(), resp.Header.Revision)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err := s.stopH(); err != nil {
		return fmt.Errorf("chaos: history: %w", err)
	}
	if err := s.histF.Close(); err != nil {
		return fmt.Errorf("chaos: history: %w", err)
	}
	return nil
}

// check runs the checker over the history and the recording, and adds
// up what each fault class did.
func (s *seedRun) check() error {
	h, err := chaos.ReadHistoryFile(filepath.Join(s.cfg.Dir, historyFile))
	if err != nil {
		return err
	}
	events, err := record.ReadEventsFile(filepath.Join(s.cfg.Dir, recordingFile))
	if err != nil {
		return err
	}
	s.sum.check(h, events, s.cfg.ConvergeWithin)
	s.sum.Effects = effects(s.ex.Log(), s.app.commits, events, s.sum.HealAt)
	return nil
}

// clientRuns is the clients: two load tool runs, SotW and delta, whose
// During holds them synced until released (once the faults are healed
// and the clients quiet).
type clientRuns struct {
	synced      chan struct{}
	release     chan struct{}
	releaseOnce sync.Once
	results     chan clientResult
	cancel      context.CancelFunc
}

type clientResult struct {
	res *loadgen.Result
	err error
}

// startClients starts the two runs of the clients.
func (s *seedRun) startClients(ctx context.Context) *clientRuns {
	cr := &clientRuns{synced: make(chan struct{}, 2), release: make(chan struct{}), results: make(chan clientResult, 2)}
	lctx, lcancel := context.WithCancel(ctx)
	cr.cancel = lcancel
	for _, delta := range []bool{false, true} {
		lc := s.clientConfig(delta)
		lc.During = func(ctx context.Context) error {
			cr.synced <- struct{}{}
			select {
			case <-cr.release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		go func() {
			res, err := loadgen.Run(lctx, lc)
			cr.results <- clientResult{res, err}
		}()
	}
	return cr
}

// clientConfig is the load tool's run of the SotW or the delta clients:
// half the clients each, resuming as Envoy does, spread over the fronts,
// recording every response, making no updates.
func (s *seedRun) clientConfig(delta bool) loadgen.Config {
	cfg := s.cfg
	lc := loadgen.DefaultConfig()
	lc.Target = seededTarget{s.seeded}
	lc.TargetName = "legation"
	lc.XDSAddr = strings.Join(s.addrs, ",")
	lc.Delta = delta
	lc.Streams = cfg.Clients / 2
	lc.NodePrefix = "chaos-sotw"
	if delta {
		lc.Streams = cfg.Clients - cfg.Clients/2
		lc.NodePrefix = "chaos-delta"
	}
	lc.Clusters, lc.Endpoints, lc.Listeners = cfg.Clusters, cfg.Endpoints, cfg.Listeners
	lc.Updates, lc.Idle = 0, 0
	lc.SyncTimeout = 2 * time.Minute
	lc.Resume = true
	lc.Recorder = s.rec
	lc.Seed = cfg.Seed
	return lc
}

// waitSynced waits until both runs hold the fixture.
func (cr *clientRuns) waitSynced(ctx context.Context) error {
	for n := 0; n < 2; {
		select {
		case <-cr.synced:
			n++
		case r := <-cr.results:
			return fmt.Errorf("chaos: clients: %w", r.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// finish releases the runs and waits for them to end.
func (cr *clientRuns) finish() error {
	cr.releaseOnce.Do(func() { close(cr.release) })
	for range 2 {
		if r := <-cr.results; r.err != nil {
			return fmt.Errorf("chaos: clients: %w", r.err)
		}
	}
	return nil
}

// stop ends the runs if they still run.
func (cr *clientRuns) stop() {
	cr.cancel()
	cr.releaseOnce.Do(func() { close(cr.release) })
}

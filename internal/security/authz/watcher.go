package authz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/state/keyspace"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Client is the etcd client. Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix, starting and ending with '/'. Empty:
	// keyspace.DefaultPrefix ("/legation/").
	Prefix string
	// Logger receives the watcher's logs. Nil: discard.
	Logger *slog.Logger
	// Registerer registers the watcher's metrics. Nil: none.
	Registerer prometheus.Registerer
	// DefaultTrustDomain is Options.DefaultTrustDomain of every table
	// (xds-node's --authz-default-trust-domain). Empty: identities
	// without a rule are denied.
	DefaultTrustDomain string
	// ProgressInterval is how long the watch may be quiet before the
	// watcher asks etcd for a progress notification. Zero: 1s.
	ProgressInterval time.Duration
	// Clock is the replica's awake clock, on which StallTimeout is
	// measured: a process starved of CPU does not take its own silence
	// for etcd's. Nil: the wall clock.
	Clock *awake.Clock
	// StallTimeout is how long the watch may hear nothing, progress
	// included, before the watcher gives it up and reloads (an etcd member
	// that froze keeps a watch open and silent). Zero: 5s.
	StallTimeout time.Duration
	// RetryInterval is the pause between failed loads. Zero: 1s.
	RetryInterval time.Duration
	// StaleAfter bounds how long the rules may go unconfirmed by etcd (no
	// watch response, progress notification or load): past it Fresh
	// reports them stale and the holders of the current table are woken
	// (Current's channel), so that they re-check and refuse rather than
	// judge clients on rules that may miss a revocation (xds-node's
	// --authz-stale-after). It must exceed ProgressInterval, the most a
	// healthy watch stays quiet. Zero: no bound.
	StaleAfter time.Duration
}

// DefaultWatcherConfig returns a WatcherConfig with the defaults; Client
// must be set.
func DefaultWatcherConfig() WatcherConfig {
	return WatcherConfig{
		Prefix:           keyspace.DefaultPrefix, // "/legation/"
		ProgressInterval: time.Second,            // as the view asks
		StallTimeout:     5 * time.Second,        // as the view gives up
		RetryInterval:    time.Second,
	}
}

// Validate checks the config, its zero fields taken as their defaults.
func (c WatcherConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("authz: WatcherConfig.Client is required")
	case c.Prefix != "" && checkPrefix(c.Prefix) != nil:
		return checkPrefix(c.Prefix)
	case c.ProgressInterval < 0, c.StallTimeout < 0, c.RetryInterval < 0, c.StaleAfter < 0:
		return errors.New("authz: WatcherConfig intervals must not be negative")
	case c.StaleAfter > 0 && c.StaleAfter <= cmp.Or(c.ProgressInterval, DefaultWatcherConfig().ProgressInterval):
		return fmt.Errorf("authz: WatcherConfig.StaleAfter %s must exceed the progress interval %s: a healthy watch is quiet that long",
			c.StaleAfter, cmp.Or(c.ProgressInterval, DefaultWatcherConfig().ProgressInterval))
	}
	return Options{DefaultTrustDomain: c.DefaultTrustDomain}.Validate()
}

func (c *WatcherConfig) setDefaults() {
	d := DefaultWatcherConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = d.StallTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Watcher keeps a Table equal to the rules in etcd: it reads them all,
// then follows a watch, and publishes a new Table for every change. Its
// methods may be called concurrently; Current, Ready never block.
type Watcher struct {
	cfg     WatcherConfig
	opts    Options
	metrics *metrics
	ready   chan struct{}
	cur     atomic.Pointer[published]
	// heard is when etcd last confirmed the rules, as nanoseconds since
	// epoch plus one (monotonic; 0 before the first load).
	heard atomic.Int64
	epoch time.Time

	// Owned by Run.
	rev     int64                // revision the rules are at
	good    map[string]*compiled // by etcd key
	bad     map[string]int64     // key -> mod revision of a malformed value
	logged  map[string]int64     // key -> mod revision last warned about
	streams uint64               // watches started
	checks  atomic.Uint64        // wakes of the watch loop's timer (tests)
}

// published is one table and the channel closed when a newer one
// replaces it.
type published struct {
	table *Table
	done  chan struct{}
}

// NewWatcher checks cfg and returns a Watcher; it does no I/O. Until Run
// has loaded the rules, Current is a table that denies everything (the
// default trust domain included).
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	w := &Watcher{
		cfg:     cfg,
		opts:    Options{DefaultTrustDomain: cfg.DefaultTrustDomain},
		metrics: newMetrics(cfg.Registerer),
		ready:   make(chan struct{}),
		good:    map[string]*compiled{},
		bad:     map[string]int64{},
		logged:  map[string]int64{},
		epoch:   time.Now(),
	}
	w.cur.Store(&published{table: &Table{}, done: make(chan struct{})})
	w.metrics.freshness(cfg.Registerer, w.age, cfg.StaleAfter)
	return w, nil
}

// Current returns the current table and a channel closed when a newer
// table replaces it. A holder that must follow revocations (an xDS stream)
// waits on the channel, then calls Current again and re-checks.
func (w *Watcher) Current() (*Table, <-chan struct{}) {
	p := w.cur.Load()
	return p.table, p.done
}

// Ready is closed once the rules were first loaded.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Run loads the rules and follows etcd until ctx ends; then it returns
// nil. It reads everything with a Get, then watches from the next
// revision; when the watch fails, stalls or was compacted, it reads
// everything again. Failures of etcd are retried forever, the last table
// staying current meanwhile. Call it once.
func (w *Watcher) Run(ctx context.Context) error {
	if w.cfg.StaleAfter > 0 {
		var wg sync.WaitGroup
		defer wg.Wait()
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		wg.Go(func() { w.watchFreshness(fctx) })
	}
	first := true
	for ctx.Err() == nil {
		if err := w.load(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.cfg.Logger.Warn("authz: reading the rules failed; retrying", "err", err)
			if !sleep(ctx, w.cfg.RetryInterval) {
				return nil
			}
			continue
		}
		if first {
			close(w.ready)
			first = false
		}
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.metrics.watchLosts.Inc()
		w.cfg.Logger.Warn("authz: watch of the rules ended; reloading", "revision", w.rev, "err", err)
	}
	return nil
}

// load reads every rule at one revision and publishes them.
func (w *Watcher) load(ctx context.Context) error {
	w.metrics.reloads.Inc()
	dir := Dir(w.cfg.Prefix)
	resp, err := w.cfg.Client.Get(clientv3.WithRequireLeader(ctx), dir, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("authz: read %s: %w", dir, err)
	}
	w.good = map[string]*compiled{}
	w.bad = map[string]int64{}
	for _, kv := range resp.Kvs {
		w.put(kv)
	}
	for k := range w.logged {
		if _, still := w.bad[k]; !still {
			delete(w.logged, k)
		}
	}
	w.rev = resp.Header.Revision
	w.publish()
	w.hear()
	return nil
}

// watchStreamKey gives each watch a gRPC stream of its own (the etcd
// client shares one among watches whose contexts carry the same
// metadata), so a watch restarted after a stall does not land on the
// stream that stalled.
const watchStreamKey = "legation-authz-watch"

// follow watches the rules from w.rev+1 until the watch fails, stalls,
// or ctx ends.
func (w *Watcher) follow(ctx context.Context) error {
	w.streams++
	sctx := clientv3.WithRequireLeader(metadata.AppendToOutgoingContext(ctx, watchStreamKey, strconv.FormatUint(w.streams, 10)))
	wctx, cancel := context.WithCancel(sctx)
	defer cancel()
	// Watch blocks until its stream is set up, which a frozen member
	// never answers: past StallTimeout the attempt is given up.
	giveUp := time.AfterFunc(w.cfg.StallTimeout, cancel)
	wch := w.cfg.Client.Watch(wctx, Dir(w.cfg.Prefix), clientv3.WithPrefix(), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify())
	if !giveUp.Stop() {
		return errors.New("watch not set up: etcd did not answer")
	}
	// The loop wakes when the watch has been quiet for ProgressInterval,
	// then every retry until etcd answers or StallTimeout passes; never
	// in between.
	retry := max(w.cfg.ProgressInterval/4, 10*time.Millisecond)
	check := time.NewTimer(w.cfg.ProgressInterval + time.Millisecond)
	defer check.Stop()
	heard := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			if err := w.checkProgress(sctx, heard, retry, check); err != nil {
				return err
			}
		case wr, ok := <-wch:
			if err := watchEnd(wr, ok); err != nil {
				return err
			}
			heard = time.Now()
			w.apply(wr)
		}
	}
}

// checkProgress is follow's check of a watch last heard from at heard:
// past StallTimeout the watch has stalled (the error); past
// ProgressInterval it asks etcd for a progress notification (within
// sctx) and sets check to look again after retry; else it sets check for
// when ProgressInterval will have passed.
func (w *Watcher) checkProgress(sctx context.Context, heard time.Time, retry time.Duration, check *time.Timer) error {
	w.checks.Add(1)
	switch quiet := w.cfg.Clock.Since(heard); {
	case quiet > w.cfg.StallTimeout:
		return fmt.Errorf("watch stalled: nothing from etcd for %s", quiet.Round(time.Millisecond))
	case quiet > w.cfg.ProgressInterval:
		// An error only delays the answer; the stall check
		// decides. Bounded: the watch's stream may be stuck
		// sending to a frozen member.
		pctx, cancelProgress := context.WithTimeout(sctx, retry)
		_ = w.cfg.Client.RequestProgress(pctx)
		cancelProgress()
		check.Reset(retry)
	default:
		check.Reset(w.cfg.ProgressInterval - quiet + time.Millisecond)
	}
	return nil
}

// watchEnd is why the watch that answered wr (ok false: its channel
// closed) must end; nil if it goes on.
func watchEnd(wr clientv3.WatchResponse, ok bool) error {
	switch {
	case !ok:
		return errors.New("watch channel closed")
	case wr.CompactRevision != 0:
		return fmt.Errorf("watch compacted at revision %d", wr.CompactRevision)
	}
	return wr.Err()
}

// apply notes that etcd answered, and folds in wr's events, if any (else
// it is a progress notification), publishing the rules at its revision.
func (w *Watcher) apply(wr clientv3.WatchResponse) {
	w.hear()
	if len(wr.Events) == 0 {
		return // progress
	}
	for _, ev := range wr.Events {
		switch ev.Type {
		case mvccpb.PUT:
			w.put(ev.Kv)
		case mvccpb.DELETE:
			k := string(ev.Kv.Key)
			delete(w.good, k)
			delete(w.bad, k)
			delete(w.logged, k)
		}
	}
	w.rev = wr.Header.Revision
	w.publish()
}

// put folds in one stored value: a valid rule, or a malformed value that
// is skipped, counted, and warned about once per key revision.
func (w *Watcher) put(kv *mvccpb.KeyValue) {
	k := string(kv.Key)
	r, err := Decode(w.cfg.Prefix, k, kv.Value)
	var c *compiled
	if err == nil {
		c, err = compile(r) // cannot fail: Decode validated r
	}
	if err != nil {
		delete(w.good, k)
		w.bad[k] = kv.ModRevision
		if w.logged[k] != kv.ModRevision {
			w.logged[k] = kv.ModRevision
			w.cfg.Logger.Warn("authz: skipping a malformed rule", "key", k, "mod_revision", kv.ModRevision, "err", err)
		}
		return
	}
	delete(w.bad, k)
	delete(w.logged, k)
	w.good[k] = c
}

// publish makes a table of the current rules current, and wakes the
// holders of the last one.
func (w *Watcher) publish() {
	t := newTableOf(w.good, w.opts, w.rev)
	old := w.cur.Swap(&published{table: t, done: make(chan struct{})})
	close(old.done)
	w.metrics.rules.Set(float64(len(w.good)))
	w.metrics.badRules.Set(float64(len(w.bad)))
	w.metrics.revision.Set(float64(w.rev))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ErrStale is matched (errors.Is) by the error Fresh returns.
var ErrStale = errors.New("authz: rules stale")

// Fresh returns nil while the rules may be trusted: StaleAfter is zero,
// they are not loaded yet (Ready says so), or etcd confirmed them within
// StaleAfter. Else an error matching ErrStale that says for how long etcd
// has been silent. It never blocks.
func (w *Watcher) Fresh() error {
	if w.cfg.StaleAfter <= 0 {
		return nil
	}
	if age, loaded := w.age(); loaded && age > w.cfg.StaleAfter {
		return fmt.Errorf("%w: nothing heard from etcd for %s, more than the bound of %s",
			ErrStale, age.Round(time.Millisecond), w.cfg.StaleAfter)
	}
	return nil
}

// age returns how long ago etcd last confirmed the rules, and false
// before the first load.
func (w *Watcher) age() (time.Duration, bool) {
	h := w.heard.Load()
	if h == 0 {
		return 0, false
	}
	return time.Since(w.epoch) - time.Duration(h-1), true
}

// hear records that etcd confirmed the rules now.
func (w *Watcher) hear() { w.heard.Store(int64(time.Since(w.epoch)) + 1) }

// watchFreshness wakes the holders of the current table each time the
// rules turn stale (StaleAfter without word from etcd), so that they
// re-check, find them stale (Fresh) and end, until ctx ends. It wakes
// once per StaleAfter while the rules are fresh, and every quarter of it
// (at most a second) while they are stale, to see them turn fresh.
func (w *Watcher) watchFreshness(ctx context.Context) {
	bound := w.cfg.StaleAfter
	t := time.NewTimer(bound)
	defer t.Stop()
	stale := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		age, loaded := w.age()
		switch {
		case !loaded:
			t.Reset(bound)
		case age > bound:
			if !stale {
				stale = true
				w.metrics.staleTurns.Inc()
				w.cfg.Logger.Warn("authz: the rules are stale: nothing heard from etcd within the bound; refusing streams until etcd answers",
					"quiet", age.Round(time.Millisecond).String(), "bound", bound.String(), "revision", w.cur.Load().table.Revision())
				w.wake()
			}
			t.Reset(min(bound/4, time.Second))
		default:
			if stale {
				stale = false
				w.cfg.Logger.Info("authz: the rules are fresh again", "revision", w.cur.Load().table.Revision())
			}
			t.Reset(bound - age + time.Millisecond)
		}
	}
}

// wake closes the current table's channel, putting the same table in its
// place, so that its holders re-check. If a newer table was published
// meanwhile, that publication woke them.
func (w *Watcher) wake() {
	p := w.cur.Load()
	if w.cur.CompareAndSwap(p, &published{table: p.table, done: make(chan struct{})}) {
		close(p.done)
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/resource"
)

// ViewConfig configures a View.
type ViewConfig struct {
	// Client is the etcd client. Required; the View does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix. Empty means DefaultPrefix.
	Prefix string
	// PageSize is the number of keys per range request of a load. Zero:
	// 1000.
	PageSize int64
	// HistoryWindow is how many revisions before the start-up revision the
	// view reads from etcd's history, to learn which sets changed (and
	// which keys were deleted) recently: a client presenting a version in
	// that window is answered exactly. Zero: 10000. Negative: none.
	HistoryWindow int64
	// CatchUpEvery is how often, at most, while changes are published,
	// the view wakes the readers none of them concerned (store.Interest),
	// so that they let go of the snapshots published since. Zero: 10s.
	CatchUpEvery time.Duration
	// MaxTombstones bounds the deletions remembered; the oldest are
	// forgotten first. Zero: 100000.
	MaxTombstones int
	// RetryInterval is the pause between attempts when etcd fails. Zero:
	// 500ms.
	RetryInterval time.Duration
	// ProgressInterval is how long the watch may be quiet before the view
	// asks etcd for a progress notification, so that LastHeard stays
	// fresh while etcd answers. Zero: 1s.
	ProgressInterval time.Duration
	// StallTimeout ends a watch that heard nothing (not even progress) for
	// that long, and starts another: the etcd client may then reach a
	// member that answers. Zero: 5s.
	StallTimeout time.Duration
	// Logger gets warnings (malformed values, lost watches); nil discards.
	Logger *slog.Logger
	// Registerer gets the view's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// DefaultViewConfig returns a ViewConfig with every default filled in
// except Client.
func DefaultViewConfig() ViewConfig {
	return ViewConfig{
		Prefix:        DefaultPrefix,
		PageSize:      1000,
		HistoryWindow: 10000,
		CatchUpEvery:  defaultCatchUpEvery,
		MaxTombstones: 100000,
		RetryInterval: 500 * time.Millisecond,

		ProgressInterval: time.Second,
		StallTimeout:     5 * time.Second,
	}
}

// Validate checks the config.
func (c *ViewConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("store: view: Client is required")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("store: view: prefix %q must start and end with '/'", c.Prefix)
	case c.PageSize < 1:
		return fmt.Errorf("store: view: PageSize %d must be positive", c.PageSize)
	case c.MaxTombstones < 1:
		return fmt.Errorf("store: view: MaxTombstones %d must be positive", c.MaxTombstones)
	case c.ProgressInterval < 0 || c.StallTimeout < 0:
		return fmt.Errorf("store: view: ProgressInterval %s and StallTimeout %s must not be negative", c.ProgressInterval, c.StallTimeout)
	case c.StallTimeout > 0 && c.StallTimeout <= c.ProgressInterval:
		return fmt.Errorf("store: view: StallTimeout %s must be longer than ProgressInterval %s", c.StallTimeout, c.ProgressInterval)
	}
	return nil
}

func (c *ViewConfig) fill() {
	d := DefaultViewConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.PageSize == 0 {
		c.PageSize = d.PageSize
	}
	if c.HistoryWindow == 0 {
		c.HistoryWindow = d.HistoryWindow
	}
	if c.MaxTombstones == 0 {
		c.MaxTombstones = d.MaxTombstones
	}
	if c.CatchUpEvery == 0 {
		c.CatchUpEvery = d.CatchUpEvery
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = d.StallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// View holds etcd's resources in memory, always exactly as they were at one
// etcd revision, and publishes an immutable Snapshot per change. It loads
// the whole state at one revision R with a paginated range, then follows
// one watch from R+1, applying whole revisions in order (promise 1 of
// docs/design.md). After a compaction it reloads; its revision never goes
// backwards.
//
// Run does the work; Snapshot, Ready and WaitRevision may be called from
// any goroutine.
type View struct {
	cfg     ViewConfig
	root    string
	metrics *viewMetrics
	ready   chan struct{}
	cur     atomic.Pointer[Snapshot]
	// interests are the readers to wake on the changes they can see.
	interests interests

	progressMu   sync.Mutex // guards lastProgress
	lastProgress time.Time
	checks       atomic.Uint64 // wakes of the watch loop's timer (tests)
	// stream names the etcd client's gRPC watch stream of the current
	// watch (see streamCtx); nil before the first.
	stream  atomic.Pointer[string]
	streams uint64 // owned by the Run goroutine: streams made so far
	// heard is when etcd last answered the view (a load, a watch
	// response or progress notification), in Unix nanoseconds.
	heard atomic.Int64

	// reset is set while etcd's revision is behind the view's.
	reset atomic.Pointer[RevisionReset]

	// Owned by the Run goroutine.
	malformed map[string]int64 // etcd key -> mod revision of its bad value
	tombFIFO  []tomb
	// historyTo is the start-up revision while history before it is
	// still being read from the watch, 0 once done; historyStart is the
	// revision that history is read from.
	historyTo    int64
	historyStart int64
	// historyRead is closed once no history is left to read (historyOnce
	// closes it): read to the start-up revision, given up after a
	// compaction, or none asked for.
	historyRead chan struct{}
	historyOnce sync.Once
}

type tomb struct {
	path string
	rev  int64
}

// NewView returns a View. It does no I/O; call Run.
func NewView(cfg ViewConfig) (*View, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &View{
		cfg:         cfg,
		root:        cfg.Prefix + resourcesDir,
		ready:       make(chan struct{}),
		historyRead: make(chan struct{}),
		malformed:   map[string]int64{},
	}
	v.interests.every, v.interests.lastSweep = cfg.CatchUpEvery, time.Now()
	v.metrics = newViewMetrics(cfg.Registerer, &v.interests, v.LastHeard)
	return v, nil
}

// HistoryRead returns a channel closed once the view has read the history
// it reads after its first load (ViewConfig.HistoryWindow), and published
// a snapshot whose HistoryFrom reaches back over it. Before that, every
// version a reconnecting client presents from before the first load looks
// changed and is answered in full: a replica is not ready until then.
func (v *View) HistoryRead() <-chan struct{} { return v.historyRead }

func (v *View) endHistoryRead() { v.historyOnce.Do(func() { close(v.historyRead) }) }

// Ready returns a channel closed once the first load is published.
func (v *View) Ready() <-chan struct{} { return v.ready }

// Snapshot returns the latest snapshot, nil before the first load.
func (v *View) Snapshot() *Snapshot { return v.cur.Load() }

// WaitRevision returns the first snapshot whose revision is at least rev,
// waiting for the view to catch up until ctx ends. It asks etcd for a
// progress notification, so an idle view advances to etcd's revision
// without a change to the resources.
func (v *View) WaitRevision(ctx context.Context, rev int64) (*Snapshot, error) {
	select {
	case <-v.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s := v.cur.Load()
	asked := false
	for s.Revision < rev {
		if !asked {
			v.requestProgress(ctx)
			asked = true
		}
		select {
		case <-s.done:
			s = s.next
		case <-ctx.Done():
			return nil, fmt.Errorf("store: view at revision %d did not reach %d: %w", s.Revision, rev, ctx.Err())
		case <-time.After(200 * time.Millisecond):
			asked = false // etcd drops requests while the watch catches up: ask again
		}
	}
	return s, nil
}

// RevisionReset says that etcd's revision went behind the view's: etcd was
// restored from an older snapshot without --bump-revision. The view keeps
// serving its last snapshot until etcd's revision passes it.
type RevisionReset struct {
	// Etcd is etcd's revision when last asked.
	Etcd int64
	// View is the revision of the snapshot the view keeps serving.
	View int64
	// Since is when the view found it.
	Since time.Time
}

// String is the reason readiness gives.
func (r *RevisionReset) String() string {
	return fmt.Sprintf("etcd revision reset: etcd at %d < view at %d", r.Etcd, r.View)
}

// RevisionReset returns the revision reset the view is holding through,
// nil if none.
func (v *View) RevisionReset() *RevisionReset { return v.reset.Load() }

// LastHeard returns when etcd last answered the view: the view is etcd's
// state as of then at least. Zero before the first load.
func (v *View) LastHeard() time.Time {
	n := v.heard.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// progressRetry is how often the view asks etcd for progress again while
// an answer is awaited (etcd drops a request while the watch catches up).
const progressRetry = 100 * time.Millisecond

// requestProgress asks etcd to tell the view's watch the current revision,
// at most every progressRetry.
func (v *View) requestProgress(ctx context.Context) {
	v.progressMu.Lock()
	if time.Since(v.lastProgress) < progressRetry {
		v.progressMu.Unlock()
		return
	}
	v.lastProgress = time.Now()
	v.progressMu.Unlock()
	id := v.stream.Load()
	if id == nil {
		return // no watch yet
	}
	// The request goes to the current watch's stream.
	_ = v.cfg.Client.RequestProgress(streamCtx(ctx, *id)) // an error only delays the wait
}

// streamKey is the outgoing metadata key that gives each watch of the view
// a gRPC stream of its own: the etcd client shares one stream between the
// watches whose contexts carry the same metadata, so without it a watch
// restarted after a stall would land on the very stream that stalled, kept
// open by other watches of the same client (the lease tracker's).
const streamKey = "legation-view-watch"

// streamCtx is ctx for the view's watch stream id, requiring a leader.
func streamCtx(ctx context.Context, id string) context.Context {
	return clientv3.WithRequireLeader(metadata.AppendToOutgoingContext(ctx, streamKey, id))
}

// Run loads the state and follows etcd until ctx ends; then it returns nil.
// Failures of etcd are retried forever, the view keeping its last snapshot
// meanwhile. Call it once.
func (v *View) Run(ctx context.Context) error {
	for {
		if err := v.load(ctx, false); err == nil {
			break
		} else if ctx.Err() != nil {
			return nil
		} else {
			v.cfg.Logger.Warn("view: load failed; retrying", "err", err)
		}
		if !sleep(ctx, v.cfg.RetryInterval) {
			return nil
		}
	}
	close(v.ready)
	start := v.cur.Load().Revision
	from := start + 1
	if v.cfg.HistoryWindow > 0 {
		v.historyTo = start
		from = max(1, start-v.cfg.HistoryWindow+1)
	} else {
		v.endHistoryRead()
	}
	for ctx.Err() == nil {
		err := v.follow(ctx, from)
		if ctx.Err() != nil {
			return nil
		}
		v.metrics.watchLosts.Inc()
		var compacted *compactedError
		var reset *resetError
		switch {
		case errors.As(err, &reset):
			if v.hold(ctx) {
				v.historyTo = 0
				if !v.reload(ctx, true) {
					return nil
				}
			}
		case errors.As(err, &compacted):
			if v.historyTo != 0 && compacted.rev <= v.cur.Load().Revision+1 {
				// Only history was lost: read what is left of it.
				from = compacted.rev
				continue
			}
			// Events the view needs are gone: reload. What history was
			// read stays; the rest is not needed any more. After a restore
			// with --bump-revision --mark-compacted this is the way back.
			v.historyTo = 0
			v.endHistoryRead()
			v.cfg.Logger.Warn("view: watch compacted; reloading", "revision", v.cur.Load().Revision, "compacted", compacted.rev)
			if !v.reload(ctx, false) {
				return nil
			}
		default:
			v.cfg.Logger.Warn("view: watch ended; resuming", "revision", v.cur.Load().Revision, "err", err)
			if !sleep(ctx, v.cfg.RetryInterval) {
				return nil
			}
			// etcd sends a watch from a revision it has not reached
			// nothing, not even progress: after a restore that took its
			// revision back, the watch stalls. Ask where etcd is.
			if v.hold(ctx) {
				v.historyTo = 0
				if !v.reload(ctx, true) {
					return nil
				}
			}
		}
		if v.historyTo == 0 {
			from = v.cur.Load().Revision + 1
		}
	}
	return nil
}

// reload loads the whole state again, retrying until it succeeds; if etcd
// turns out to be behind the view it holds first (see hold). afterReset
// says etcd went back since the view last loaded: every key is then taken
// as changed, since a revision at or below the view's may now name other
// data. It returns false if ctx ended first.
func (v *View) reload(ctx context.Context, afterReset bool) bool {
	for {
		err := v.load(ctx, afterReset)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var reset *resetError
		if errors.As(err, &reset) {
			if v.hold(ctx) {
				afterReset = true
			}
			continue
		}
		v.cfg.Logger.Warn("view: reload failed; retrying", "err", err)
		if !sleep(ctx, v.cfg.RetryInterval) {
			return false
		}
	}
}

// hold is called when etcd answered at a revision behind the view's. It
// asks etcd for its revision with a linearizable read: if etcd is not
// behind after all (a member lagging the others answered), it returns
// false at once. Otherwise etcd went back to older data (restored from a
// snapshot without --bump-revision): hold reports it (RevisionReset, a
// log, the metrics) and keeps the view's last snapshot, so that no client
// is sent a version lower than one it was sent, until etcd's revision
// passes the view's; then it returns true and the view must reload. It
// also returns, true, if ctx ends.
func (v *View) hold(ctx context.Context) bool {
	view := v.cur.Load().Revision
	var r *RevisionReset
	for {
		etcd, err := v.etcdRevision(ctx)
		switch {
		case ctx.Err() != nil:
			return true
		case err != nil:
			v.cfg.Logger.Debug("view: read etcd's revision", "err", err)
		case r == nil && etcd >= view:
			return false
		case etcd > view:
			v.cfg.Logger.Info("view: etcd's revision passed the view's again; reloading every resource",
				"etcd_revision", etcd, "view_revision", view, "held_for", time.Since(r.Since).Round(time.Millisecond))
			v.reset.Store(nil)
			v.metrics.resetHeld.Set(0)
			return true
		default:
			v.heard.Store(time.Now().UnixNano()) // etcd answers: not stale
			if r == nil {
				r = &RevisionReset{Etcd: etcd, View: view, Since: time.Now()}
				v.metrics.resets.Inc()
				v.metrics.resetHeld.Set(1)
				v.cfg.Logger.Warn("view: etcd's revision is behind the view's: etcd was restored from an older snapshot; "+
					"serving the view's last snapshot until etcd's revision passes it (restore with --bump-revision to avoid this)",
					"etcd_revision", etcd, "view_revision", view)
			} else {
				r = &RevisionReset{Etcd: etcd, View: view, Since: r.Since}
			}
			v.reset.Store(r)
		}
		if !sleep(ctx, v.cfg.RetryInterval) {
			return true
		}
	}
}

// etcdRevision returns etcd's current revision, read linearizably.
func (v *View) etcdRevision(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, max(v.cfg.StallTimeout, time.Second))
	defer cancel()
	resp, err := v.cfg.Client.Get(rctx, v.root, clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// resetError is etcd answering at a revision behind the view's.
type resetError struct{ etcd, view int64 }

func (e *resetError) Error() string {
	return fmt.Sprintf("etcd answered at revision %d, behind the view's %d", e.etcd, e.view)
}

type compactedError struct{ rev int64 }

func (e *compactedError) Error() string { return fmt.Sprintf("compacted at revision %d", e.rev) }

// follow runs one watch from revision from until it fails or ctx ends.
func (v *View) follow(ctx context.Context, from int64) error {
	v.streams++
	id := strconv.FormatUint(v.streams, 10)
	v.stream.Store(&id)
	wctx, cancel := context.WithCancel(streamCtx(ctx, id))
	defer cancel()
	wch := v.cfg.Client.Watch(wctx, v.root, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	if v.historyTo != 0 {
		v.historyStart = from
	}
	// While history is read, ask etcd where it is until it says: that
	// marks the end of the history even if no resource changes after
	// start-up. etcd drops a progress request while the watch is still
	// catching up, hence the repeats. Otherwise the timer fires only when
	// the watch has been quiet for ProgressInterval, then every
	// progressRetry until etcd answers or StallTimeout passes; each
	// response sets it a ProgressInterval ahead again. An idle view wakes
	// twice per ProgressInterval (the timer, the answer), not ten times a
	// second.
	check := time.NewTimer(progressRetry)
	defer check.Stop()
	started := time.Now()
	for {
		select {
		case <-check.C:
			v.checks.Add(1)
			last := v.LastHeard()
			if last.Before(started) {
				last = started
			}
			quiet := time.Since(last)
			switch {
			case quiet > v.cfg.StallTimeout:
				v.metrics.stalls.Inc()
				return fmt.Errorf("watch stalled: nothing from etcd for %s", quiet.Round(time.Millisecond))
			case v.historyTo != 0 || quiet > v.cfg.ProgressInterval:
				v.requestProgress(ctx)
				check.Reset(progressRetry)
			default:
				// Just past ProgressInterval since etcd was last heard;
				// a response meanwhile moves that, and this wake then
				// only waits again.
				check.Reset(v.cfg.ProgressInterval - quiet + time.Millisecond)
			}
		case wr, ok := <-wch:
			if !ok {
				return errors.New("watch channel closed")
			}
			if wr.CompactRevision != 0 {
				return &compactedError{rev: wr.CompactRevision}
			}
			if err := wr.Err(); err != nil {
				return err
			}
			if cur := v.cur.Load().Revision; wr.Header.Revision != 0 && wr.Header.Revision < cur {
				return &resetError{etcd: wr.Header.Revision, view: cur}
			}
			v.cfg.Logger.Debug("view: watch response", "header", wr.Header.Revision, "events", len(wr.Events), "progress", wr.IsProgressNotify())
			v.heard.Store(time.Now().UnixNano())
			v.handle(wr)
			if v.historyTo == 0 {
				// Heard: the next request for progress is due a
				// ProgressInterval from now, and the wake the timer
				// would make to see this answer is saved.
				check.Reset(v.cfg.ProgressInterval + time.Millisecond)
			}
		}
	}
}

// handle applies one watch response: whole revisions, published as one
// snapshot at the last of them.
func (v *View) handle(wr clientv3.WatchResponse) {
	prev := v.cur.Load()
	b := newBuilder(prev)
	for _, e := range wr.Events {
		rev := e.Kv.ModRevision
		if rev <= prev.Revision {
			b.history(v, e)
			continue
		}
		v.endHistory(b)
		b.apply(v, e)
		b.rev = rev
	}
	if wr.IsProgressNotify() && wr.Header.Revision >= prev.Revision {
		v.endHistory(b)
		if wr.Header.Revision > b.rev {
			b.rev = wr.Header.Revision
		}
	}
	if b.rev == prev.Revision && !b.touched {
		return
	}
	v.metrics.events.Add(float64(len(wr.Events)))
	v.publish(b.build(v))
	if v.historyTo == 0 {
		v.endHistoryRead()
	}
}

// endHistory marks the history read: from now on LastChange is exact from
// the revision the history was read from.
func (v *View) endHistory(b *builder) {
	if v.historyTo == 0 {
		return
	}
	v.historyTo = 0
	b.historyFrom = v.historyStart
	b.touched = true
}

func (v *View) publish(s *Snapshot) {
	prev := v.cur.Load()
	v.cur.Store(s)
	if prev != nil {
		prev.next = s
		close(prev.done)
	}
	v.interests.notify(s, time.Now())
	v.metrics.snapshots.Inc()
	v.metrics.revision.Set(float64(s.Revision))
	v.metrics.resources.Set(float64(s.Len()))
	v.metrics.skipped.Set(float64(len(v.malformed)))
}

// load reads the whole state at one revision and publishes it. On a reload
// the new snapshot records, as its changes, how it differs from the last.
// A key changed since the last snapshot whose mod revision is not above
// the last snapshot's (etcd went back to older data) is given the reload's
// revision as its ModRevision, so that the versions served never go back
// and clients holding the newer data are sent the older. afterReset takes
// every key as changed (see reload). It refuses, with a *resetError, a
// revision behind the last snapshot's, or equal to it after a reset.
func (v *View) load(ctx context.Context, afterReset bool) error {
	prev := v.cur.Load()
	var b *builder
	if prev == nil {
		b = newBuilder(newSnapshot())
		b.initial = true
	} else {
		b = newBuilder(prev)
	}
	seen := map[string]bool{}
	st := &Store{cfg: Config{PageSize: v.cfg.PageSize}, kv: v.cfg.Client, root: v.root}
	var rev int64
	err := st.rangeAll(ctx, v.root, 0, func(r int64) {
		rev = r
		if prev != nil {
			b.raiseTo, b.raiseUpTo = r, prev.Revision
		}
	}, func(kv *mvccpb.KeyValue) {
		p := string(kv.Key[len(v.root):])
		seen[p] = true
		if prev != nil && !afterReset {
			if e, ok := prev.entries.Get([]byte(p)); ok && e.etcdModRevision() == kv.ModRevision {
				return // unchanged since the last snapshot
			}
		}
		b.put(v, kv, p)
	})
	if err != nil {
		return err
	}
	if prev != nil {
		if rev < prev.Revision || (afterReset && rev == prev.Revision) {
			return &resetError{etcd: rev, view: prev.Revision}
		}
		prev.entries.Root().Walk(func(k []byte, e *Entry) bool {
			if !seen[string(k)] {
				b.remove(v, string(k), rev)
			}
			return false
		})
		// Keys that were malformed and are now gone.
		for key := range v.malformed {
			if !seen[strings.TrimPrefix(key, v.root)] {
				delete(v.malformed, key)
			}
		}
	} else {
		b.historyFrom = rev + 1
	}
	b.rev = rev
	b.reloaded = true
	v.metrics.reloads.Inc()
	v.publish(b.build(v))
	v.heard.Store(time.Now().UnixNano())
	return nil
}

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

// builder makes the next snapshot from the previous one.
type builder struct {
	prev        *Snapshot
	entries     *iradix.Txn[*Entry]
	sets        *iradix.Txn[int64]
	tombs       *iradix.Txn[int64]
	changes     []EntryChange
	rev         int64
	historyFrom int64
	reloaded    bool
	touched     bool
	initial     bool // the first load: every entry is new, list no changes
	// seen is when the builder started: when the view received what it
	// applies. oldestWrite is the earliest written_at of its puts.
	seen, oldestWrite time.Time
	// On a reload, a key written at or before raiseUpTo (the last
	// snapshot's revision) that changed is presented as written at
	// raiseTo (the reload's revision).
	raiseTo, raiseUpTo int64
	// inlineKeys counts the entries carrying an inline private key.
	inlineKeys int
}

func newBuilder(prev *Snapshot) *builder {
	return &builder{
		inlineKeys:  prev.InlineKeys,
		prev:        prev,
		entries:     prev.entries.Txn(),
		sets:        prev.sets.Txn(),
		tombs:       prev.tombs.Txn(),
		rev:         prev.Revision,
		historyFrom: prev.HistoryFrom,
		seen:        time.Now(),
	}
}

func (b *builder) build(v *View) *Snapshot {
	s := &Snapshot{
		Revision:    b.rev,
		Changes:     b.changes,
		Reloaded:    b.reloaded,
		HistoryFrom: b.historyFrom,
		Malformed:   len(v.malformed),
		InlineKeys:  b.inlineKeys,
		Seen:        b.seen,
		entries:     b.entries.Commit(),
		sets:        b.sets.Commit(),
		tombs:       b.tombs.Commit(),
		done:        make(chan struct{}),
	}
	if !b.initial {
		s.Committed = b.seen
		if !b.oldestWrite.IsZero() && b.oldestWrite.Before(b.seen) {
			s.Committed = b.oldestWrite
		}
	}
	return s
}

// setKey is "type/scope" of a path "type/scope/name".
func setKey(p string) string {
	i := strings.IndexByte(p, '/')
	j := strings.IndexByte(p[i+1:], '/')
	return p[:i+1+j]
}

func (b *builder) bumpSet(p string, rev int64) {
	k := []byte(setKey(p))
	if old, ok := b.sets.Get(k); !ok || old < rev {
		b.sets.Insert(k, rev)
	}
}

// apply applies one event newer than the previous snapshot.
func (b *builder) apply(v *View, e *clientv3.Event) {
	b.touched = true
	p := string(e.Kv.Key[len(v.root):])
	if e.Type == clientv3.EventTypeDelete {
		delete(v.malformed, string(e.Kv.Key))
		b.remove(v, p, e.Kv.ModRevision)
		return
	}
	b.put(v, e.Kv, p)
}

// history records an event at or before the snapshot's revision, read from
// etcd's history at start-up: it tells which sets changed and what was
// deleted, not the state (which the load already has).
func (b *builder) history(v *View, e *clientv3.Event) {
	if v.historyTo == 0 {
		return // a resumed watch may repeat events; nothing to learn
	}
	p := string(e.Kv.Key[len(v.root):])
	if _, err := parsePath(p); err != nil {
		return
	}
	rev := e.Kv.ModRevision
	b.bumpSet(p, rev)
	b.touched = true
	if e.Type == clientv3.EventTypeDelete {
		if _, live := b.entries.Get([]byte(p)); !live {
			b.tomb(v, p, rev)
		}
	}
}

func (b *builder) put(v *View, kv *mvccpb.KeyValue, p string) {
	key := string(kv.Key)
	k, env, err := DecodeValue(p, kv.Value)
	if err != nil {
		if v.malformed[key] != kv.ModRevision {
			v.malformed[key] = kv.ModRevision
			v.metrics.malformed.Inc()
			v.cfg.Logger.Warn("view: skipping a value that does not decode", "key", key, "mod_revision", kv.ModRevision, "err", err)
		}
		// Skipped: to clients the key does not exist.
		if _, ok := b.entries.Get([]byte(p)); ok {
			b.remove(v, p, kv.ModRevision)
		}
		return
	}
	delete(v.malformed, key)
	body := env.GetBody()
	body.TypeUrl = k.Type.URL // share one string per type
	e := &Entry{Key: k, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Lease: kv.Lease, Body: body,
		InlineKey: resource.CarriesInlineKey(k.Type, body.GetValue())}
	if b.raiseTo != 0 && kv.ModRevision <= b.raiseUpTo {
		e.etcdRev, e.ModRevision = kv.ModRevision, b.raiseTo
	}
	if env.GetTtl() != nil {
		e.TTL = env.GetTtl().AsDuration()
	}
	if env.GetWrittenAt() != nil {
		e.WrittenAt = env.GetWrittenAt().AsTime()
	}
	if old, _ := b.entries.Insert([]byte(p), e); old != nil && old.InlineKey {
		b.inlineKeys--
	}
	if e.InlineKey {
		b.inlineKeys++
	}
	b.tombs.Delete([]byte(p))
	b.bumpSet(p, e.ModRevision)
	if !b.initial {
		b.changes = append(b.changes, EntryChange{Key: k, Kind: Upserted, Revision: e.ModRevision})
		if !e.WrittenAt.IsZero() && (b.oldestWrite.IsZero() || e.WrittenAt.Before(b.oldestWrite)) {
			b.oldestWrite = e.WrittenAt
		}
	}
	b.touched = true
}

func (b *builder) remove(v *View, p string, rev int64) {
	old, ok := b.entries.Delete([]byte(p))
	if !ok {
		return // never held (e.g. malformed, or deleted before start)
	}
	if old.InlineKey {
		b.inlineKeys--
	}
	b.tomb(v, p, rev)
	b.bumpSet(p, rev)
	b.changes = append(b.changes, EntryChange{Key: old.Key, Kind: Deleted, Revision: rev})
	b.touched = true
}

func (b *builder) tomb(v *View, p string, rev int64) {
	b.tombs.Insert([]byte(p), rev)
	v.tombFIFO = append(v.tombFIFO, tomb{path: p, rev: rev})
	for len(v.tombFIFO) > v.cfg.MaxTombstones {
		t := v.tombFIFO[0]
		v.tombFIFO = v.tombFIFO[1:]
		if r, ok := b.tombs.Get([]byte(t.path)); ok && r == t.rev {
			b.tombs.Delete([]byte(t.path))
		}
	}
}

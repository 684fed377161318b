package view

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// View holds etcd's resources in memory, always exactly as they were at one
// etcd revision, and publishes an immutable Snapshot per change. It loads
// the whole state at one revision R with a paginated range, then follows
// one watch from R+1, applying whole revisions in order (promise 1 of
// docs/concepts/design.md). After a compaction it reloads; its revision never goes
// backwards.
//
// Run does the work; Snapshot, Ready and WaitRevision may be called from
// any goroutine.
type View struct {
	cfg     Config
	root    string
	metrics *metrics
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
	unserved  map[string]int64 // etcd key -> mod revision, of an authority not served
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

// New returns a View. It does no I/O; call Run.
func New(cfg Config) (*View, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &View{
		cfg:         cfg,
		root:        keyspace.Resources.Prefix(cfg.Prefix),
		ready:       make(chan struct{}),
		historyRead: make(chan struct{}),
		malformed:   map[string]int64{},
		unserved:    map[string]int64{},
	}
	v.interests.every, v.interests.lastSweep = cfg.CatchUpEvery, time.Now()
	v.metrics = newMetrics(cfg.Registerer, &v.interests, v.LastHeard)
	return v, nil
}

// HistoryRead returns a channel closed once the view has read the history
// it reads after its first load (Config.HistoryWindow), and published
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
			return nil, fmt.Errorf("view: at revision %d, did not reach %d: %w", s.Revision, rev, ctx.Err())
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

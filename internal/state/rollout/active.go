package rollout

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
)

// A Set is the running rollouts at one etcd revision. It is immutable;
// the Changed of a Watcher's Current is closed when a newer one replaces
// it.
type Set struct {
	// Revision is the etcd revision the set was read at; LastChange that
	// of the latest write to a rollout record at or before it (one began
	// or ended).
	Revision   int64
	LastChange int64
	running    []*Rollout // by id
	changed    chan struct{}
}

// Empty is the set of no rollout.
func Empty() *Set { return &Set{changed: make(chan struct{})} }

// Changed is closed when a newer set is published, if s is a Watcher's
// Current.
func (s *Set) Changed() <-chan struct{} { return s.changed }

// Running is the running rollouts, by id. Do not modify them.
func (s *Set) Running() []*Rollout { return s.running }

// Chain is the scopes a node of id and group sees: the overlays of the
// running rollouts that select it, over its group's resources for those
// of its group's scope and over the default scope's for those of the
// default scope (a rollout of another group's scope changes nothing it
// sees).
func (s *Set) Chain(id, group string) scope.Chain {
	var overGroup, overDefault []string
	for _, r := range s.running {
		switch {
		case r.Scope == store.DefaultScope && r.Matches(id, group):
			overDefault = append(overDefault, r.Overlay())
		case group != "" && r.Scope == group && r.Matches(id, group):
			overGroup = append(overGroup, r.Overlay())
		}
	}
	return scope.Layered(group, overGroup, overDefault)
}

// Rollout returns the running rollout whose overlay is scope.
func (s *Set) Rollout(overlay string) *Rollout {
	for _, r := range s.running {
		if r.Overlay() == overlay {
			return r
		}
	}
	return nil
}

// A Watcher keeps the running rollouts a replica's streams need: the
// latest (Current, whose Changed wakes them when one begins or ends) and
// those at any recent revision (At). A stream answers for the running
// set at its snapshot's revision, never a newer or an older one: a set
// from another revision could put a canary node on the scope's side at a
// version that holds its overlay (or the reverse). Every write that
// begins or ends a rollout writes its overlay in the same transaction,
// so the set at a snapshot's revision is the set at its OverlaysAt; when
// the watch has not reached that revision (etcd slow or cut off), the
// set is read from etcd at it (Resolve).
type Watcher struct {
	cur atomic.Pointer[Set]
	kv  clientv3.KV
	w   clientv3.Watcher
	pfx string
	// viewAt waits until the replica's view holds revision rev: the
	// latest set is published only then, so that a stream woken by it
	// finds the overlays in the view.
	viewAt func(ctx context.Context, rev int64) error
	log    *slog.Logger

	mu sync.Mutex
	// known are the sets known over spans of revisions, oldest first, at
	// most maxSpans; watched is the span the watch extends (nil after
	// the watch broke, until it is read again).
	known   []*span
	watched *span
	// pending are the revisions asked for (Resolve) whose set is not
	// known yet, each with the channel closed once it is or cannot be;
	// lost are the revisions found past etcd's compaction, whose set is
	// never known.
	pending map[int64]chan struct{}
	lost    map[int64]bool
	kick    chan struct{}
}

// span is a set known to be the running one at every revision from
// from to to.
type span struct {
	set      *Set
	from, to int64
}

// maxSpans bounds the spans a Watcher keeps: a stream needs the set at
// its snapshot, which is at most a few rollout changes behind the latest.
const maxSpans = 32

// NewWatcher returns a Watcher of the rollouts under prefix, publishing
// each latest set once viewAt(rev) returned. Current is the empty set
// until Run read them.
func NewWatcher(c *clientv3.Client, prefix string, viewAt func(ctx context.Context, rev int64) error, log *slog.Logger) *Watcher {
	w := &Watcher{kv: c, w: c, pfx: prefix, viewAt: viewAt, log: log,
		pending: map[int64]chan struct{}{}, lost: map[int64]bool{}, kick: make(chan struct{}, 1)}
	w.cur.Store(Empty())
	return w
}

// Current is the latest set published.
func (w *Watcher) Current() *Set { return w.cur.Load() }

// At returns the set running at revision rev, if it is known.
func (w *Watcher) At(rev int64) (*Set, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at(rev)
}

func (w *Watcher) at(rev int64) (*Set, bool) {
	for i := len(w.known) - 1; i >= 0; i-- {
		if k := w.known[i]; k.from <= rev && rev <= k.to {
			return k.set, true
		}
	}
	return nil, false
}

// Resolve asks for the set at revision rev: it returns a channel closed
// once At(rev) knows it, or once it is found lost (past etcd's
// compaction, with rollouts changed since: the view moves past rev
// then). ok is false for a revision already found lost.
func (w *Watcher) Resolve(rev int64) (done <-chan struct{}, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.at(rev); known {
		return closed, true
	}
	if w.lost[rev] {
		return nil, false
	}
	ch := w.pending[rev]
	if ch == nil {
		ch = make(chan struct{})
		w.pending[rev] = ch
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return ch, true
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Run reads the rollouts, then follows them, until ctx ends; errors are
// logged and retried. It reads from etcd the sets Resolve is asked for.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { w.resolveLoop(ctx) })
	for ctx.Err() == nil {
		rev, err := w.load(ctx)
		if err == nil {
			err = w.follow(ctx, rev)
		}
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("rollouts: reading them again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// load reads every rollout and publishes the running ones.
func (w *Watcher) load(ctx context.Context) (int64, error) {
	w.mu.Lock()
	w.watched = nil
	w.mu.Unlock()
	all, rev, last, err := w.read(ctx, 0)
	if err != nil {
		return 0, err
	}
	return rev, w.publish(ctx, all, rev, last)
}

// read reads the rollouts at revision at (0: the latest): the running
// ones, the revision read at and the latest write to a record then.
func (w *Watcher) read(ctx context.Context, at int64) (all map[string]*Rollout, rev, last int64, err error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if at != 0 {
		opts = append(opts, clientv3.WithRev(at))
	}
	resp, err := w.kv.Get(ctx, keyspace.Rollouts.Prefix(w.pfx), opts...)
	if err != nil {
		return nil, 0, 0, err
	}
	all = map[string]*Rollout{}
	for _, kv := range resp.Kvs {
		w.put(all, kv)
		last = max(last, kv.ModRevision)
	}
	rev = resp.Header.Revision
	if at != 0 {
		rev = at
	}
	return all, rev, last, nil
}

// follow applies the changes after rev until the watch fails.
func (w *Watcher) follow(ctx context.Context, rev int64) error {
	all := map[string]*Rollout{}
	for _, r := range w.Current().running {
		all[r.ID] = r
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range w.w.Watch(wctx, keyspace.Rollouts.Prefix(w.pfx), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err // compacted or lost: load again
		}
		var last int64
		for _, ev := range wr.Events {
			// A response may carry several revisions (a watch catching
			// up): each is published on its own, so that the set known
			// at each revision between is the one running then.
			if rev := ev.Kv.ModRevision; last != 0 && rev != last {
				if err := w.publish(ctx, all, last, last); err != nil {
					return err
				}
			}
			last = ev.Kv.ModRevision
			if ev.Type == mvccpb.DELETE {
				id, _ := keyspace.Rollouts.Cut(w.pfx, string(ev.Kv.Key))
				delete(all, id)
				continue
			}
			w.put(all, ev.Kv)
		}
		if last > 0 {
			// Known up to the last event only: a response's header
			// may be ahead of events still to come.
			if err := w.publish(ctx, all, last, last); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// put takes a stored record into all: running ones in, ended or
// malformed ones out.
func (w *Watcher) put(all map[string]*Rollout, kv *mvccpb.KeyValue) {
	id, _ := keyspace.Rollouts.Cut(w.pfx, string(kv.Key))
	r, err := Parse(kv.Value, kv.CreateRevision)
	if err != nil {
		w.log.Warn("rollouts: a record does not decode; its nodes see no overlay", "key", string(kv.Key), "err", err)
		delete(all, id)
		return
	}
	if r.State != Running {
		delete(all, id)
		return
	}
	all[id] = r
}

// newSet is the set of all's rollouts at rev, the latest written at last.
func newSet(all map[string]*Rollout, rev, last int64) *Set {
	s := &Set{Revision: rev, LastChange: last, changed: make(chan struct{})}
	for _, r := range all {
		s.running = append(s.running, r)
	}
	sort.Slice(s.running, func(i, j int) bool { return s.running[i].ID < s.running[j].ID })
	return s
}

// publish makes all's rollouts, known from last to rev by the watch, the
// latest set once the view holds rev.
func (w *Watcher) publish(ctx context.Context, all map[string]*Rollout, rev, last int64) error {
	s := newSet(all, rev, last)
	w.mu.Lock()
	if w.watched != nil {
		w.watched.to = max(w.watched.to, last-1) // the watch saw nothing between
	}
	w.watched = &span{set: s, from: last, to: rev}
	w.learn(w.watched)
	w.mu.Unlock()
	if err := w.viewAt(ctx, rev); err != nil {
		return err
	}
	old := w.cur.Swap(s)
	close(old.changed)
	return nil
}

// learn keeps k and closes the pending revisions it covers. w.mu is held.
func (w *Watcher) learn(k *span) {
	w.known = append(w.known, k)
	if len(w.known) > maxSpans {
		w.known = append(w.known[:0], w.known[len(w.known)-maxSpans:]...)
	}
	for rev, ch := range w.pending {
		if _, ok := w.at(rev); ok {
			close(ch)
			delete(w.pending, rev)
		}
	}
}

// resolveWait is how long a revision asked for is left to the watch
// before it is read from etcd: the watch usually brings it within
// milliseconds, and a read then is one more request to etcd.
const resolveWait = 100 * time.Millisecond

// resolveLoop reads from etcd the sets asked for that the watch has not
// brought, until ctx ends.
func (w *Watcher) resolveLoop(ctx context.Context) {
	backoff := resolveWait
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(resolveWait):
		}
		for w.resolvePending(ctx) != nil {
			backoff = min(2*backoff, 2*time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		backoff = resolveWait
	}
}

// resolvePending reads the sets of the pending revisions: the latest,
// which covers every revision since the last rollout change, then each
// older one at its revision.
func (w *Watcher) resolvePending(ctx context.Context) error {
	revs := w.unresolved()
	if len(revs) == 0 {
		return nil
	}
	all, rev, last, err := w.read(ctx, 0)
	if err != nil {
		w.log.Warn("rollouts: reading the running set for a stream", "err", err)
		return err
	}
	w.mu.Lock()
	w.learn(&span{set: newSet(all, rev, last), from: last, to: rev})
	w.mu.Unlock()
	for _, at := range w.unresolved() {
		all, _, last, err := w.read(ctx, at)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted), errors.Is(err, rpctypes.ErrFutureRev):
			// Past the compaction, or ahead of an etcd restored from
			// older data: the view moves to a newer snapshot.
			w.mu.Lock()
			w.lose(at)
			w.mu.Unlock()
		case err != nil:
			w.log.Warn("rollouts: reading the running set at a revision", "revision", at, "err", err)
			return err
		default:
			w.mu.Lock()
			w.learn(&span{set: newSet(all, at, last), from: last, to: at})
			w.mu.Unlock()
		}
	}
	return nil
}

// unresolved is the pending revisions, in order.
func (w *Watcher) unresolved() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, 0, len(w.pending))
	for rev := range w.pending {
		out = append(out, rev)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// lose marks rev lost and closes its channel. w.mu is held.
func (w *Watcher) lose(rev int64) {
	if ch := w.pending[rev]; ch != nil {
		close(ch)
		delete(w.pending, rev)
	}
	if len(w.lost) >= maxSpans {
		clear(w.lost)
	}
	w.lost[rev] = true
}

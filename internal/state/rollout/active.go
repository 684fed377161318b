package rollout

import (
	"context"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
)

// A Set is the running rollouts a replica knows, at one revision. It is
// immutable; Changed is closed when a newer one replaces it.
type Set struct {
	// Revision is the etcd revision the set is at; LastChange that of
	// the latest write to a rollout record (one began or ended).
	Revision   int64
	LastChange int64
	running    []*Rollout // by id
	changed    chan struct{}
}

// Empty is the set of no rollout.
func Empty() *Set { return &Set{changed: make(chan struct{})} }

// Changed is closed when a newer set is published.
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

// A Watcher keeps a replica's Set current.
type Watcher struct {
	cur atomic.Pointer[Set]
	kv  clientv3.KV
	w   clientv3.Watcher
	pfx string
	// viewAt waits until the replica's view holds revision rev: a set is
	// published only then, so that a node put in a rollout finds its
	// overlay in the view.
	viewAt func(ctx context.Context, rev int64) error
	log    *slog.Logger
}

// NewWatcher returns a Watcher of the rollouts under prefix, publishing
// each set once viewAt(rev) returned. Current is the empty set until Run
// read them.
func NewWatcher(c *clientv3.Client, prefix string, viewAt func(ctx context.Context, rev int64) error, log *slog.Logger) *Watcher {
	w := &Watcher{kv: c, w: c, pfx: prefix, viewAt: viewAt, log: log}
	w.cur.Store(Empty())
	return w
}

// Current is the latest set published.
func (w *Watcher) Current() *Set { return w.cur.Load() }

// Run reads the rollouts, then follows them, until ctx ends; errors are
// logged and retried.
func (w *Watcher) Run(ctx context.Context) {
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
	resp, err := w.kv.Get(ctx, keyspace.Rollouts.Prefix(w.pfx), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	all := map[string]*Rollout{}
	var last int64
	for _, kv := range resp.Kvs {
		w.put(all, kv)
		last = max(last, kv.ModRevision)
	}
	return resp.Header.Revision, w.publish(ctx, all, resp.Header.Revision, last)
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
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				id, _ := keyspace.Rollouts.Cut(w.pfx, string(ev.Kv.Key))
				delete(all, id)
				continue
			}
			w.put(all, ev.Kv)
		}
		if len(wr.Events) > 0 {
			if err := w.publish(ctx, all, wr.Header.Revision, wr.Header.Revision); err != nil {
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

// publish replaces the current set by all's rollouts at rev, the latest
// written at last, once the view holds rev.
func (w *Watcher) publish(ctx context.Context, all map[string]*Rollout, rev, last int64) error {
	if err := w.viewAt(ctx, rev); err != nil {
		return err
	}
	s := &Set{Revision: rev, LastChange: last, changed: make(chan struct{})}
	for _, r := range all {
		s.running = append(s.running, r)
	}
	sort.Slice(s.running, func(i, j int) bool { return s.running[i].ID < s.running[j].ID })
	old := w.cur.Swap(s)
	close(old.changed)
	return nil
}

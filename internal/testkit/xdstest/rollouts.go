package xdstest

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/rollout"
)

// Rollouts runs a watcher of e's rollouts (under the default prefix),
// publishing as a replica's does once e's view holds a set's revision,
// until tb ends.
func (e *Env) Rollouts(tb testing.TB) *rollout.Watcher {
	tb.Helper()
	w := rollout.NewWatcher(e.Client, keyspace.DefaultPrefix, func(ctx context.Context, rev int64) error {
		_, err := e.View.WaitRevision(ctx, rev)
		return err
	}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return w
}

// RolloutStore is a rollout.Store writing through e's store as "test".
func (e *Env) RolloutStore() *rollout.Store { return rollout.NewStore(e.Store, e.Client, "test") }

// LateRollouts hands a server the rollouts of a watcher made after it
// (Set it before the first stream): a server is built with the env that
// the watcher needs.
type LateRollouts struct {
	w atomic.Pointer[rollout.Watcher]
}

// Set gives l its watcher.
func (l *LateRollouts) Set(w *rollout.Watcher) { l.w.Store(w) }

// Current is the watcher's Current.
func (l *LateRollouts) Current() *rollout.Set { return l.w.Load().Current() }

// At is the watcher's At.
func (l *LateRollouts) At(rev int64) (*rollout.Set, bool) { return l.w.Load().At(rev) }

// Resolve is the watcher's Resolve.
func (l *LateRollouts) Resolve(rev int64) (<-chan struct{}, bool) { return l.w.Load().Resolve(rev) }

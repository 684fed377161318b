package xdsstream

import (
	"time"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/view"
)

// rolloutsChanged is the channel closed when the running rollouts
// change; nil (never ready) without them or before the first request.
func (s *Stream[T]) rolloutsChanged() <-chan struct{} {
	if s.rollouts == nil {
		return nil
	}
	return s.rollouts.Changed()
}

// reroll moves the stream to the latest set of running rollouts: its
// Chain is made again, and the resources of each rollout whose overlay
// it gained or lost are told to the rules as changed, so that the flush
// sends the side of the rollout the node is now on. The set is published
// once the view holds its overlays, so the snapshot the stream advances
// to next has them.
func (s *Stream[T]) reroll() {
	old, cur := s.rollouts, s.core.Config.Rollouts.Current()
	s.rollouts = cur
	chain := cur.Chain(s.Node.GetId(), s.Group)
	if chain == s.Chain {
		return
	}
	was, is := map[string]bool{}, map[string]bool{}
	s.Chain.Each(func(sc string) bool { was[sc] = true; return true })
	chain.Each(func(sc string) bool { is[sc] = true; return true })
	s.Chain = chain
	for sc := range was {
		if !is[sc] {
			s.overlayMoved(old.Rollout(sc))
		}
	}
	for sc := range is {
		if !was[sc] {
			s.overlayMoved(cur.Rollout(sc))
		}
	}
}

// overlayMoved tells the rules that each resource of r changed, in r's
// scope (which the node sees).
func (s *Stream[T]) overlayMoved(r *rollout.Rollout) {
	if r == nil {
		return
	}
	for _, k := range r.Keys(r.Scope) {
		s.changed(view.EntryChange{Key: k, Kind: view.Upserted, Revision: s.Snap.Revision})
	}
}

// rolloutsWait bounds how long a flush waits for the set of running
// rollouts to reach a snapshot that began or ended one; the watcher
// publishes it once the view holds that snapshot, so the wait is short.
const rolloutsWait = 2 * time.Second

// syncRollouts moves the stream to the latest set of running rollouts
// before a flush, waiting (at most rolloutsWait) for one at least as
// recent as the latest snapshot it advanced to that began or ended a
// rollout: the flush then answers for the side of every rollout that
// snapshot holds, never a canary node with the scope's resources at a
// version that holds its overlay.
func (s *Stream[T]) syncRollouts() {
	if s.rollouts == nil {
		return
	}
	cur := s.core.Config.Rollouts.Current()
	if cur.Revision < s.rolloutsAt {
		deadline := time.NewTimer(rolloutsWait)
		defer deadline.Stop()
		for cur.Revision < s.rolloutsAt {
			select {
			case <-cur.Changed():
			case <-deadline.C:
				s.Log.Warn("the running rollouts did not reach the snapshot in time; flushing with the latest", "revision", s.rolloutsAt, "rollouts_at", cur.Revision)
				s.rolloutsAt = 0
			case <-s.Ctx.Done():
				return
			}
			cur = s.core.Config.Rollouts.Current()
			if s.rolloutsAt == 0 {
				break
			}
		}
	}
	if cur != s.rollouts {
		s.reroll()
	}
}

// RolloutsChangedSince reports whether a rollout began or ended after
// revision v: what a node received at v may then have been another
// side of it, whatever its scopes' changes say.
func (s *Stream[T]) RolloutsChangedSince(v int64) bool {
	return s.rollouts != nil && s.rollouts.LastChange > v
}

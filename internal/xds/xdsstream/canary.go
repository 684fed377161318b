package xdsstream

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/view"
)

// rolloutsChanged is the channel closed when a rollout begins or ends;
// nil (never ready) without rollouts or before the first request.
func (s *Stream[T]) rolloutsChanged() <-chan struct{} {
	if s.latest == nil {
		return nil
	}
	return s.latest.Changed()
}

// reroll moves the stream to the set of running rollouts cur: its
// Chain is made again, and the resources of each rollout whose overlay
// it gained or lost are told to the rules as changed, so that the flush
// sends the side of the rollout the node is now on.
func (s *Stream[T]) reroll(cur *rollout.Set) {
	old := s.rollouts
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

// syncRollouts moves the stream, before a flush, to the set of rollouts
// running at its snapshot's revision (the set at the snapshot's
// OverlaysAt), so that the flush answers for the side of each rollout
// that the snapshot holds: never a canary node with the scope's
// resources at a version that holds its overlay, nor any other node
// with the overlay. It reports false while that set is not known: the
// stream then holds its flush until it is (held), or until the next
// snapshot if it never will be.
func (s *Stream[T]) syncRollouts() bool {
	s.held = nil
	if s.rollouts == nil {
		return true
	}
	at := s.Snap.OverlaysAt
	if at == s.rolloutsAt {
		return true
	}
	ro := s.core.Config.Rollouts
	cur, ok := ro.At(at)
	if !ok {
		done, ok := ro.Resolve(at)
		if !ok {
			done = s.Snap.Done()
		}
		s.held = done
		return false
	}
	s.rolloutsAt = at
	s.reroll(cur)
	return true
}

// RolloutsChangedSince reports whether a rollout began or ended after
// revision v: what a node received at v may then have been another
// side of it, whatever its scopes' changes say.
func (s *Stream[T]) RolloutsChangedSince(v int64) bool {
	return s.rollouts != nil && s.rollouts.LastChange > v
}

// RolloutsAt is the set of rollouts running at snap (nil without
// Config.Rollouts), for a poll answered from it: waited for at most
// CatchupTimeout, else UNAVAILABLE, so that the client retries rather
// than being answered for another side of a rollout.
func (c *Core[T]) RolloutsAt(ctx context.Context, snap *view.Snapshot) (*rollout.Set, error) {
	ro := c.Config.Rollouts
	if ro == nil {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.Config.CatchupTimeout)
	defer cancel()
	for {
		if set, ok := ro.At(snap.OverlaysAt); ok {
			return set, nil
		}
		done, ok := ro.Resolve(snap.OverlaysAt)
		if !ok {
			break
		}
		select {
		case <-done:
			continue
		case <-wctx.Done():
		}
		break
	}
	return nil, status.Errorf(codes.Unavailable, "%s: the canary rollouts running at version %d are not known to this replica yet; retry", c.proto.Name, snap.Revision)
}

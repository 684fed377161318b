package runner

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
)

// canaryShare is the selector of the run's canary rollouts.
const canaryShare = "30%"

// canaryBuckets is canaryShare as rollout.Bucket's bound.
const canaryBuckets = 3000

// rollouts is the applier's canary rollouts: now and then, a change is
// begun as a rollout to canaryShare of the nodes instead of applied, and
// ended a few ticks later, promoted or aborted (a promotion over a
// change made since aborts instead). One runs at a time. Their draws
// come from a source of their own, so that the changes themselves are
// the seed's as before.
type rollouts struct {
	rs  *rollout.Store
	rng *rand.Rand
	cur *rollout.Rollout // running, nil for none
	// ticks left before cur ends.
	ticks int
	// ids are the rollouts begun, for the checker (Summary.Rollouts).
	ids               []string
	promoted, aborted int
}

func newRollouts(rs *rollout.Store, seed uint64) *rollouts {
	return &rollouts{rs: rs, rng: rand.New(rand.NewPCG(seed, 0xca9a))}
}

// due reports whether the running rollout is to end on this tick.
func (r *rollouts) due() bool {
	if r.cur == nil {
		return false
	}
	r.ticks--
	return r.ticks <= 0
}

// wants reports whether req is to be begun as a rollout: one that only
// writes, while none runs, one change in five.
func (r *rollouts) wants(req store.PlanRequest) bool {
	return r.cur == nil && len(req.Deletes) == 0 && len(req.Puts) > 0 && r.rng.IntN(5) == 0
}

// begin begins req as a rollout.
func (r *rollouts) begin(ctx context.Context, req store.PlanRequest) error {
	ro, err := r.rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Puts: req.Puts, Selector: canaryShare, Promote: rollout.PromoteManual})
	if err != nil {
		return err
	}
	r.cur, r.ticks = ro, 2+r.rng.IntN(4)
	r.ids = append(r.ids, ro.ID)
	return nil
}

// end promotes or aborts the running rollout.
func (r *rollouts) end(ctx context.Context) error {
	id := r.cur.ID
	promote := r.rng.IntN(2) == 0
	var err error
	if promote {
		if _, err = r.rs.Promote(ctx, id, "chaos run"); err == nil {
			r.promoted++
		}
	}
	if !promote || errors.Is(err, rollout.ErrChanged) {
		if _, err = r.rs.Abort(ctx, id, "chaos run"); err == nil {
			r.aborted++
		}
	}
	if err == nil || errors.Is(err, rollout.ErrEnded) {
		r.cur = nil
		return nil
	}
	return err // tried again on a later tick
}

// overlays is the checker's Options.Overlays of the rollouts of ids: a
// client sees the overlay of every rollout that picked it.
func overlays(ids []string) func(client string) []string {
	return func(client string) []string {
		if rollout.Bucket(client) >= canaryBuckets {
			return nil
		}
		out := make([]string, 0, len(ids))
		for _, id := range ids {
			out = append(out, rollout.OverlayScope(id))
		}
		return out
	}
}

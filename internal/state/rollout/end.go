package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/store"
)

// ErrChanged is wrapped when a rollout's resource changed in its scope
// since the rollout began: it can no longer be promoted.
var ErrChanged = errors.New("changed since the rollout began")

// Promote ends running rollout id by applying its resources to its scope
// for every node, in one transaction that also removes its overlay and
// marks it promoted with reason: an ordinary apply (KindPromote) in the
// history. It is refused, writing nothing, when a resource of the rollout
// changed in its scope since the rollout began (abort it then), and when
// the rollout ended meanwhile.
func (s *Store) Promote(ctx context.Context, id, reason string) (*Rollout, error) {
	r, modRev, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State != Running {
		return nil, fmt.Errorf("rollout: promote %s: %w: it was %s (%s)", id, ErrEnded, r.State, r.Reason)
	}
	puts := make([]store.Put, 0, len(r.Resources))
	var ops []clientv3.Op
	for _, k := range r.Keys(r.Overlay()) {
		res, _, err := s.st.Get(ctx, k, 0)
		if err != nil {
			return nil, fmt.Errorf("rollout: promote %s: its overlay: %w", id, err)
		}
		puts = append(puts, store.Put{Key: store.Key{Type: k.Type, Scope: r.Scope, Name: k.Name}, Body: res.Envelope.GetBody()})
		ops = append(ops, clientv3.OpDelete(s.st.EtcdKey(k)))
	}
	plan, err := s.st.MakePlan(ctx, store.PlanRequest{Puts: puts})
	if err != nil {
		return nil, err
	}
	for _, c := range plan.Changes {
		var now int64
		if c.Old != nil {
			now = c.Old.ModRevision
		}
		if base := r.base(c.Type.Name, c.Name); now != base {
			return nil, fmt.Errorf("rollout: promote %s: %w: %s %q in scope %s (revision %d, now %d): promoting would overwrite that change; abort the rollout and begin another from the current config",
				id, ErrChanged, c.Type.Name, c.Name, r.Scope, base, now)
		}
	}
	applyID := store.NewApplyID(time.Now())
	r.PromotedBy = applyID
	msg := "promote rollout " + id
	if r.Message != "" {
		msg += ": " + r.Message
	}
	return r, s.end(ctx, r, modRev, Promoted, reason, plan, ops, store.ApplyOptions{ID: applyID, Kind: KindPromote, Message: msg})
}

// Abort ends running rollout id without applying it: its overlay is
// removed and it is marked aborted with reason, in one transaction, so
// its canary nodes return to their scope's resources. It is refused when
// the rollout ended meanwhile.
func (s *Store) Abort(ctx context.Context, id, reason string) (*Rollout, error) {
	r, modRev, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.State != Running {
		return nil, fmt.Errorf("rollout: abort %s: %w: it was %s (%s)", id, ErrEnded, r.State, r.Reason)
	}
	var ops []clientv3.Op
	for _, k := range r.Keys(r.Overlay()) {
		ops = append(ops, clientv3.OpDelete(s.st.EtcdKey(k)))
	}
	resp, err := s.kv.Get(ctx, keyspace.Rollouts.Key(s.prefix, id), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("rollout: abort %s: %w", id, err)
	}
	plan := &store.Plan{Revision: resp.Header.Revision}
	return r, s.end(ctx, r, modRev, Aborted, reason, plan, ops, store.ApplyOptions{Kind: KindAbort, Message: "abort rollout " + id + ": " + reason})
}

// end writes plan with ops and r's record, ended in state with reason, on
// the condition that the record is still at modRev.
func (s *Store) end(ctx context.Context, r *Rollout, modRev int64, state, reason string, plan *store.Plan, ops []clientv3.Op, opts store.ApplyOptions) error {
	now := time.Now().UTC()
	r.State, r.Reason, r.EndedAt = state, reason, &now
	rec, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("rollout: encode: %w", err)
	}
	key := keyspace.Rollouts.Key(s.prefix, r.ID)
	// The overlay's apply marker goes with the overlay, so that ended
	// rollouts leave no key behind but their records (pruned at Begin).
	ops = append(ops, clientv3.OpDelete(store.ApplyMarkerKey(s.prefix, r.Overlay())))
	opts.Also = &store.TxnAlso{
		Cmps:  []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)},
		Ops:   append(ops, clientv3.OpPut(key, string(rec))),
		Bytes: len(key) + len(rec) + 64 + 96*len(ops),
	}
	if _, err := s.st.Apply(ctx, plan, opts); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("rollout: %s %s: the rollout or its scope changed meanwhile; look again (xdsadmin rollout status %s): %w", state, r.ID, r.ID, err)
		}
		return fmt.Errorf("rollout: %s %s: %w", state, r.ID, err)
	}
	return nil
}

// base is the revision resource (type, name) of r had when r began.
func (r *Rollout) base(typ, name string) int64 {
	for _, t := range r.Resources {
		if t.Type == typ && t.Name == name {
			return t.Base
		}
	}
	return 0
}

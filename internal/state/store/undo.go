package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
)

// KindRollback marks a history record written by undoing an apply.
const KindRollback = "rollback"

// ErrNotInHistory is returned for an apply id the history does not hold.
var ErrNotInHistory = errors.New("store: not in the history")

// An Undo is what undoing one apply writes, as a new apply: each resource
// it changed or deleted back to its body from before, each it created
// deleted. Expect says, per resource, what it must still be for nothing
// to have changed it since the apply: the apply's revision, or 0 for "it
// does not exist" (one the apply deleted).
type Undo struct {
	ID       string
	Scope    string
	Revision int64 // the apply's last revision
	Request  PlanRequest
	Expect   map[Key]int64
}

// UndoOf is how to undo apply id, from the history records (History's).
// A record without the bodies from before (Undo false) takes them from
// etcd at the revision before its own, as long as etcd holds it; one
// that lists fewer changes than it made (Omitted) cannot be undone.
func (s *Store) UndoOf(ctx context.Context, records []HistoryRecord, id string) (*Undo, error) {
	var parts []HistoryRecord
	for _, r := range records {
		if r.ID == id {
			parts = append(parts, r)
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: apply %q (the history keeps the newest --history-keep applies: see xdsadmin history)", ErrNotInHistory, id)
	}
	switch parts[0].Kind {
	case KindRollout:
		return nil, fmt.Errorf("store: %s began a canary rollout, which changed no node's config outside its canary: abort the rollout (xdsadmin rollout abort %s), or roll back its promotion", id, id)
	case KindAbort:
		return nil, fmt.Errorf("store: %s aborted a canary rollout: begin it again with xdsadmin apply --canary", id)
	}
	slices.SortFunc(parts, func(a, b HistoryRecord) int { return a.Part - b.Part })
	if n := len(parts); n != parts[0].Parts {
		return nil, fmt.Errorf("store: apply %s was written in %d transactions and the history keeps %d of them: it cannot be undone whole", id, parts[0].Parts, n)
	}
	u := &Undo{ID: id, Revision: parts[len(parts)-1].Revision, Expect: map[Key]int64{}}
	for _, r := range parts {
		if r.Omitted > 0 {
			return nil, fmt.Errorf("store: the history record of apply %s lists %d of its changes (%d more had no room): it cannot be undone", id, len(r.Changes), r.Omitted)
		}
		for _, c := range r.Changes {
			if err := s.undoChange(ctx, u, r.Revision, c); err != nil {
				return nil, fmt.Errorf("store: undo apply %s: %w", id, err)
			}
		}
	}
	return u, nil
}

// undoChange adds the undoing of change c, written at revision rev, to u.
func (s *Store) undoChange(ctx context.Context, u *Undo, rev int64, c HistoryChange) error {
	t, ok := resource.ByName(c.Type)
	if !ok {
		return fmt.Errorf("%w: history: unknown type %q", ErrMalformed, c.Type)
	}
	k := Key{Type: t, Scope: c.Scope, Name: c.Name}
	if u.Scope == "" {
		u.Scope = c.Scope
	} else if u.Scope != c.Scope {
		return fmt.Errorf("it wrote to scopes %q and %q: undo one scope at a time", u.Scope, c.Scope)
	}
	switch c.Action {
	case Create.String():
		u.Request.Deletes = append(u.Request.Deletes, k)
		u.Expect[k] = rev
		return nil
	case Update.String(), Delete.String():
	default:
		return fmt.Errorf("%w: history: %s: unknown action %q", ErrMalformed, k, c.Action)
	}
	body, err := s.before(ctx, k, rev, c)
	if err != nil {
		return err
	}
	u.Request.Puts = append(u.Request.Puts, Put{Key: k, Body: body})
	if c.Action == Update.String() {
		u.Expect[k] = rev
	} else {
		u.Expect[k] = 0
	}
	return nil
}

// before is the body k had before change c, written at rev: the
// record's, or etcd's at the revision before rev.
func (s *Store) before(ctx context.Context, k Key, rev int64, c HistoryChange) (*anypb.Any, error) {
	if len(c.Before) > 0 {
		body := new(anypb.Any)
		if err := proto.Unmarshal(c.Before, body); err != nil {
			return nil, fmt.Errorf("%w: history: %s: the body from before: %v", ErrMalformed, k, err)
		}
		return body, nil
	}
	r, _, err := s.Get(ctx, k, rev-1)
	if err != nil {
		return nil, fmt.Errorf("%s: the history record has no body from before (it had no room) and etcd cannot give it: %w", k, err)
	}
	return r.Envelope.GetBody(), nil
}

// ErrHistoryTooShort is returned for a revision that etcd compacted and
// that the history kept does not reach back to.
var ErrHistoryTooShort = errors.New("store: the history kept does not reach back to that revision")

// ScopeAt is what scope held at revision rev, by key: read from etcd
// while it holds rev, else rebuilt from what scope holds now by undoing,
// newest first, every apply of records (History's) written after rev.
// The rebuild needs the history to reach back to rev (a record at or
// before it kept), and the bodies from before of every change after it
// (or etcd's, while it holds them).
func (s *Store) ScopeAt(ctx context.Context, records []HistoryRecord, scope string, rev int64) (map[Key]*anypb.Any, error) {
	at, err := s.scopeList(ctx, scope, rev)
	if err == nil || !errors.Is(err, rpctypes.ErrCompacted) {
		return at, err
	}
	if len(records) == 0 || records[len(records)-1].Revision > rev {
		oldest := "none"
		if len(records) > 0 {
			oldest = fmt.Sprintf("the oldest is at revision %d", records[len(records)-1].Revision)
		}
		return nil, fmt.Errorf("%w: etcd compacted revision %d, and the history kept (%s) does not reach back to it: raise --history-keep for the future", ErrHistoryTooShort, rev, oldest)
	}
	state, err := s.scopeList(ctx, scope, 0)
	if err != nil {
		return nil, err
	}
	for _, r := range records { // newest first
		if r.Revision <= rev {
			break
		}
		if r.Omitted > 0 {
			return nil, fmt.Errorf("store: to rebuild revision %d: the history record of apply %s lists %d of its changes (%d more had no room)", rev, r.ID, len(r.Changes), r.Omitted)
		}
		for _, c := range r.Changes {
			if c.Scope != scope {
				continue
			}
			if err := s.unapply(ctx, state, r.Revision, c); err != nil {
				return nil, fmt.Errorf("store: to rebuild revision %d: apply %s: %w", rev, r.ID, err)
			}
		}
	}
	return state, nil
}

// unapply undoes change c, written at rev, on state.
func (s *Store) unapply(ctx context.Context, state map[Key]*anypb.Any, rev int64, c HistoryChange) error {
	u := &Undo{Expect: map[Key]int64{}}
	if err := s.undoChange(ctx, u, rev, c); err != nil {
		return err
	}
	for _, k := range u.Request.Deletes {
		delete(state, k)
	}
	for _, p := range u.Request.Puts {
		state[p.Key] = p.Body
	}
	return nil
}

// scopeList is every resource of scope at rev (0: now), by key.
func (s *Store) scopeList(ctx context.Context, scope string, rev int64) (map[Key]*anypb.Any, error) {
	lr, err := s.List(ctx, ListOptions{Revision: rev})
	if err != nil {
		return nil, err
	}
	out := map[Key]*anypb.Any{}
	for _, r := range lr.Resources {
		if r.Scope == scope {
			out[r.Key] = r.Envelope.GetBody()
		}
	}
	return out, nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
)

// Action is what an apply does to one resource.
type Action int

// The actions of a plan.
const (
	Unchanged Action = iota
	Create
	Update
	Delete
)

func (a Action) String() string {
	return [...]string{"unchanged", "created", "changed", "deleted"}[a]
}

// Put is a resource to write.
type Put struct {
	Key
	Body *anypb.Any
}

// Change is one line of a plan or a diff.
type Change struct {
	Key
	Action Action
	// Old is the stored resource before the change (nil for Create).
	Old *Resource
	// New is the body written (nil for Delete); in a diff, the stored
	// resource after the change is in NewResource.
	New         *anypb.Any
	NewResource *Resource
}

// Plan is what an apply will do, computed against etcd at Revision.
type Plan struct {
	// Revision is the etcd revision the current state was read at.
	Revision int64
	// Changes lists every resource named or pruned, in key order,
	// Unchanged ones included.
	Changes []Change
	// TTL, when positive, puts every written resource under one new lease.
	TTL time.Duration
	// Prune holds the directories the plan prunes: one per type of
	// PruneTypes in PruneScope. Apply refuses to commit if any key in them
	// changed or appeared after Revision (see Apply).
	Prune      bool
	PruneScope string
	PruneTypes []*resource.Type
}

// PruneDirs returns the (type, scope) directories the plan prunes, as keys
// without a name.
func (p *Plan) PruneDirs() []Key {
	if !p.Prune {
		return nil
	}
	out := make([]Key, 0, len(p.PruneTypes))
	for _, t := range p.PruneTypes {
		out = append(out, Key{Type: t, Scope: p.PruneScope})
	}
	return out
}

// PlanRequest is the input of MakePlan.
type PlanRequest struct {
	// Puts are the resources to write.
	Puts []Put
	// Deletes are resources to delete; a missing one is an error.
	Deletes []Key
	// Prune deletes every resource of PruneScope whose type is in
	// PruneTypes that Puts does not name.
	Prune      bool
	PruneScope string
	// PruneTypes are the types Prune deletes; nil means every type.
	PruneTypes []*resource.Type
	// TTL, when positive, writes every put (changed or not) under one new
	// lease of that duration, so they expire together.
	TTL time.Duration
}

// MakePlan reads the current state of the keys concerned at one revision
// and works out what an apply of req does.
func (s *Store) MakePlan(ctx context.Context, req PlanRequest) (*Plan, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	dirs, pruned, err := planDirs(req)
	if err != nil {
		return nil, err
	}
	current, rev, err := s.readDirs(ctx, dirs)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Revision: rev, TTL: req.TTL}
	if req.Prune {
		plan.Prune, plan.PruneScope = true, req.PruneScope
		for _, t := range resource.All() {
			if pruned[t] {
				plan.PruneTypes = append(plan.PruneTypes, t)
			}
		}
	}
	if err := plan.addChanges(req, current, pruned); err != nil {
		return nil, err
	}
	sort.Slice(plan.Changes, func(i, j int) bool { return plan.Changes[i].path() < plan.Changes[j].path() })
	return plan, nil
}

// checkRequest checks what req asks for without reading etcd.
func checkRequest(req PlanRequest) error {
	if req.TTL < 0 || (req.TTL > 0 && req.TTL < time.Second) {
		return fmt.Errorf("store: ttl %s: must be at least 1s", req.TTL)
	}
	for _, p := range req.Puts {
		if err := checkPut(p); err != nil {
			return err
		}
	}
	for _, d := range req.Deletes {
		if d.Type == nil {
			return fmt.Errorf("store: delete of %q without a type", d.Name)
		}
	}
	return nil
}

// planDirs returns the (type, scope) directories req touches, as keys
// without a name in path order, and the types it prunes. Reading the
// whole resources directory for a prune or a large apply would be costly,
// so a plan reads only these.
func planDirs(req PlanRequest) ([]Key, map[*resource.Type]bool, error) {
	pruneTypes := req.PruneTypes
	if req.Prune && pruneTypes == nil {
		pruneTypes = resource.All()
	}
	dirs := map[Key]bool{}
	for _, p := range req.Puts {
		dirs[Key{Type: p.Type, Scope: p.Scope}] = true
	}
	for _, d := range req.Deletes {
		dirs[Key{Type: d.Type, Scope: d.Scope}] = true
	}
	pruned := map[*resource.Type]bool{}
	if req.Prune {
		for _, t := range pruneTypes {
			if t == nil {
				return nil, nil, errors.New("store: a prune type is nil")
			}
			pruned[t] = true
			dirs[Key{Type: t, Scope: req.PruneScope}] = true
		}
	}
	order := make([]Key, 0, len(dirs))
	for d := range dirs {
		order = append(order, d)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].path() < order[j].path() })
	return order, pruned, nil
}

// readDirs reads the resources of dirs at one revision, which it returns
// with them by path. A malformed value is kept with what its key says: it
// is overwritten or deleted like any other.
func (s *Store) readDirs(ctx context.Context, dirs []Key) (map[string]*Resource, int64, error) {
	current := map[string]*Resource{}
	var rev int64
	for _, dir := range dirs {
		if err := resource.ValidateStoredScope(dir.Scope); err != nil {
			return nil, 0, fmt.Errorf("store: %w", err)
		}
		err := s.rangeAll(ctx, s.root+dir.Type.Name+"/"+dir.Scope+"/", rev, func(r int64) { rev = r }, func(kv *mvccpb.KeyValue) {
			r, err := s.decode(kv)
			if err != nil {
				k, kerr := ParsePath(strings.TrimPrefix(string(kv.Key), s.root))
				if kerr != nil {
					return
				}
				r = &Resource{Key: k, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Lease: kv.Lease}
			}
			current[r.path()] = r
		})
		if err != nil {
			return nil, 0, err
		}
	}
	if rev == 0 {
		// Nothing to read (an empty request): still plan at a revision.
		resp, err := s.kv.Get(ctx, s.root, clientv3.WithCountOnly())
		if err != nil {
			return nil, 0, s.wrapErr("get revision", err)
		}
		rev = resp.Header.Revision
	}
	return current, rev, nil
}

// addChanges adds to p a change for every resource req names or prunes,
// given the current resources by path, in no order.
func (p *Plan) addChanges(req PlanRequest, current map[string]*Resource, pruned map[*resource.Type]bool) error {
	named := map[string]bool{}
	for _, put := range req.Puts {
		if named[put.path()] {
			return fmt.Errorf("store: %s named twice", put.Key)
		}
		named[put.path()] = true
		old := current[put.path()]
		c := Change{Key: put.Key, Old: old, New: put.Body}
		switch {
		case old == nil:
			c.Action = Create
		case old.Envelope != nil && sameBody(old.Envelope.GetBody(), put.Body) && req.TTL == 0 && old.Lease == 0:
			c.Action = Unchanged
		default:
			c.Action = Update
		}
		p.Changes = append(p.Changes, c)
	}
	for _, d := range req.Deletes {
		if named[d.path()] {
			return fmt.Errorf("store: %s is both written and deleted", d)
		}
		named[d.path()] = true
		old := current[d.path()]
		if old == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, d)
		}
		p.Changes = append(p.Changes, Change{Key: d, Action: Delete, Old: old})
	}
	if req.Prune {
		for path, old := range current {
			if old.Scope == req.PruneScope && pruned[old.Type] && !named[path] {
				p.Changes = append(p.Changes, Change{Key: old.Key, Action: Delete, Old: old})
			}
		}
	}
	return nil
}

// checkPut refuses a put that would store what DecodeValue rejects when
// it is read back: no name, a body of another type than the key's, or a
// body naming another resource than the key; and a body that breaks the
// Envoy protos' rules, in the resource or in any Any inside it
// (resource.Check).
func checkPut(p Put) error {
	if p.Type == nil {
		return fmt.Errorf("store: put of %q without a type", p.Name)
	}
	if norm, err := p.Type.CheckName(p.Name); err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	} else if norm != p.Name {
		return fmt.Errorf("store: %s: an xdstp name is stored in its normalized form, %q", p.Key, norm)
	}
	if p.Body.GetTypeUrl() != p.Type.URL {
		return fmt.Errorf("store: %s: body is %q, want %q", p.Key, p.Body.GetTypeUrl(), p.Type.URL)
	}
	msg, err := resource.Unmarshal(p.Type, p.Body.GetValue())
	if err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	}
	if got := p.Type.NameOf(msg); got != p.Name && !p.Type.Unnamed {
		return fmt.Errorf("store: %s: body names %q", p.Key, got)
	}
	// Every writer, not only xdsadmin's decoder, gets the same checks,
	// typed_config included: a resource Envoy would NACK is not stored.
	if err := resource.Check(msg); err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	}
	return nil
}

package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/store"
)

// ErrNotFound is wrapped by the errors about a rollout id that names no
// rollout.
var ErrNotFound = errors.New("no such rollout")

// ErrEnded is wrapped when a rollout to promote or abort has ended.
var ErrEnded = errors.New("rollout ended")

// Store reads and writes rollouts through a resource store.
type Store struct {
	st     *store.Store
	kv     clientv3.KV
	prefix string
	writer string
}

// NewStore returns a Store writing through st with client c, recording
// writer as who began, promoted or aborted a rollout.
func NewStore(st *store.Store, c clientv3.KV, writer string) *Store {
	return &Store{st: st, kv: c, prefix: st.Prefix(), writer: writer}
}

// Start asks for a rollout.
type Start struct {
	// Scope and Puts are the change: resources to write in Scope.
	Scope string
	Puts  []store.Put
	// Selector, Bake, MaxRejections and Promote as in Rollout.
	Selector      string
	Bake          time.Duration
	MaxRejections int
	Promote       string
	Message       string
	Traceparent   string
}

// Begin writes a rollout of req: its overlay and its record, in one
// transaction, on the conditions that no rollout began or ended since the
// running ones were read (none of which may touch req's resources) and
// that req's resources are as read. It refuses a change that changes
// nothing.
func (s *Store) Begin(ctx context.Context, req Start) (*Rollout, error) {
	if req.Promote == "" {
		req.Promote = PromoteAuto
	}
	now := time.Now().UTC()
	r := &Rollout{ID: store.NewApplyID(now), Scope: req.Scope, Selector: req.Selector, Bake: Duration(req.Bake),
		MaxRejections: req.MaxRejections, Promote: req.Promote, State: Running, By: s.writer, At: now, Message: req.Message}
	all, rev, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	running, prune := split(all)
	plan, err := s.st.MakePlan(ctx, store.PlanRequest{Puts: req.Puts})
	if err != nil {
		return nil, err
	}
	var cmps []clientv3.Cmp
	for _, c := range plan.Changes {
		if c.Action == store.Unchanged {
			continue
		}
		var base int64
		if c.Old != nil {
			base = c.Old.ModRevision
		}
		r.Resources = append(r.Resources, Target{Type: c.Type.Name, Name: c.Name, Base: base})
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.st.EtcdKey(c.Key)), "=", base))
	}
	if len(r.Resources) == 0 {
		return nil, errors.New("rollout: nothing to roll out: every resource is as stored")
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	if err := overlapping(running, r); err != nil {
		return nil, err
	}
	overlay := make([]store.Put, 0, len(r.Resources))
	for _, p := range req.Puts {
		for _, t := range r.Resources {
			if p.Type.Name == t.Type && p.Name == t.Name {
				overlay = append(overlay, store.Put{Key: store.Key{Type: p.Type, Scope: r.Overlay(), Name: p.Name}, Body: p.Body})
			}
		}
	}
	oplan, err := s.st.MakePlan(ctx, store.PlanRequest{Puts: overlay})
	if err != nil {
		return nil, err
	}
	rec, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("rollout: encode: %w", err)
	}
	key := keyspace.Rollouts.Key(s.prefix, r.ID)
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keyspace.Rollouts.Prefix(s.prefix)), "<", rev+1).WithPrefix())
	ops := []clientv3.Op{clientv3.OpPut(key, string(rec))}
	for _, old := range prune {
		ops = append(ops, clientv3.OpDelete(keyspace.Rollouts.Key(s.prefix, old.ID)))
	}
	res, err := s.st.Apply(ctx, oplan, store.ApplyOptions{ID: r.ID, Kind: KindRollout, Message: req.Message, Traceparent: req.Traceparent,
		Also: &store.TxnAlso{Cmps: cmps, Ops: ops, Bytes: len(key) + len(rec) + 64*len(cmps) + 96*len(prune)}})
	if err != nil {
		return nil, fmt.Errorf("rollout: begin: %w", err)
	}
	r.Revision = res.Revision
	return r, nil
}

// overlapping refuses r if a running rollout changes one of its
// resources, naming that rollout.
func overlapping(running []*Rollout, r *Rollout) error {
	mine := map[string]bool{}
	for _, t := range r.Resources {
		mine[t.Type+"/"+t.Name] = true
	}
	for _, o := range running {
		if o.Scope != r.Scope {
			continue
		}
		for _, t := range o.Resources {
			if mine[t.Type+"/"+t.Name] {
				return fmt.Errorf("rollout: %s %q in scope %s is in rollout %s (%s, begun by %s at %s), which is running: promote or abort it first",
					t.Type, t.Name, r.Scope, o.ID, o.Selector, o.By, o.At.Format(time.RFC3339))
			}
		}
	}
	return nil
}

// List reads every rollout, oldest first, at one revision, which it
// returns; a record that does not decode is an error naming its key.
func (s *Store) List(ctx context.Context) ([]*Rollout, int64, error) {
	resp, err := s.kv.Get(ctx, keyspace.Rollouts.Prefix(s.prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("rollout: list: %w", err)
	}
	out := make([]*Rollout, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := Parse(kv.Value, kv.CreateRevision)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, resp.Header.Revision, nil
}

// KeepEnded is how many ended rollouts are kept: each rollout begun
// deletes the oldest ended ones beyond it, in its own transaction.
const KeepEnded = 100

// split sorts all (oldest first) into the running rollouts and the ended
// ones a new rollout prunes: the oldest beyond KeepEnded, less one for
// the record the new rollout will end as.
func split(all []*Rollout) (running, prune []*Rollout) {
	var ended []*Rollout
	for _, r := range all {
		if r.State == Running {
			running = append(running, r)
		} else {
			ended = append(ended, r)
		}
	}
	if n := len(ended) - (KeepEnded - 1); n > 0 {
		prune = ended[:n]
	}
	return running, prune
}

// Get reads rollout id, with its record's mod revision.
func (s *Store) Get(ctx context.Context, id string) (*Rollout, int64, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, 0, fmt.Errorf("rollout: %w: %q", ErrNotFound, id)
	}
	resp, err := s.kv.Get(ctx, keyspace.Rollouts.Key(s.prefix, id))
	if err != nil {
		return nil, 0, fmt.Errorf("rollout: get %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("rollout: %w: %q (xdsadmin rollout list shows them)", ErrNotFound, id)
	}
	r, err := Parse(resp.Kvs[0].Value, resp.Kvs[0].CreateRevision)
	if err != nil {
		return nil, 0, err
	}
	return r, resp.Kvs[0].ModRevision, nil
}

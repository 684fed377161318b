package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/legation-io/legation/internal/state/resource"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// ApplyResult says what an apply wrote.
type ApplyResult struct {
	// Revision is the etcd revision of the (last) transaction; for an
	// apply with nothing to do, the plan's revision.
	Revision int64
	// Revisions lists the revision of each transaction of a chunked apply.
	Revisions []int64
	// Lease is the lease the resources were written under, 0 for none.
	Lease int64

	id string
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// Chunked splits an apply beyond etcd's limits into several
	// transactions in make-before-break order: clusters, endpoints,
	// listeners, routes, the other types, then the deletions, referring
	// types first. Clients may then see the apply in parts.
	Chunked bool
	// Traceparent, if not empty, is the W3C trace context of the apply,
	// stored in the apply marker of every scope written (ApplyMarker), in
	// the same transaction: a replica finds it for the revision.
	Traceparent string
	// Kind and Message go into the apply's history records: KindApply
	// (the default) or KindDelete, and what the author says the change
	// is for.
	Kind    string
	Message string
	// Also, if not nil, is written in the apply's one transaction, on
	// its conditions: a rollout's record beside the resources it
	// promotes, say. It cannot be Chunked, and the apply is sent even
	// when its plan changes nothing.
	Also *TxnAlso
	// ID, if not empty, is the apply's id (from NewApplyID), for a
	// caller that writes it in Also; else Apply makes one.
	ID string
}

// TxnAlso is what a caller adds to an apply's transaction: compares that
// must hold as well, and operations written with it.
type TxnAlso struct {
	Cmps []clientv3.Cmp
	Ops  []clientv3.Op
	// Bytes estimates what Cmps and Ops add to the request, for the
	// --max-request-bytes check.
	Bytes int
}

// ID names an apply in the history: one per Apply call, shared by its
// transactions.
func (r *ApplyResult) ID() string { return r.id }

// Apply writes a plan: one etcd transaction, so one revision, unless
// opts.Chunked. The transaction is conditional on the plan's whole
// declared set being as the plan saw it, with a number of compares that
// grows with the (type, scope) directories the plan touches, not with its
// keys:
//
//   - per directory it declares a key in (written, deleted or unchanged)
//     or prunes, every key under it has a mod_revision no later than the
//     plan's revision: no key there was created or changed since. This is
//     stricter than comparing the declared keys one by one: a change to a
//     key the plan does not declare, in a directory it does, conflicts too.
//   - per scope, the scope's apply marker (ApplyMarkerKey) was not written
//     since the plan's revision. Every transaction of the store that
//     writes a scope's resources puts its marker, so a deletion there
//     (which a compare over a directory cannot see) conflicts too.
//
// So an apply is serializable with every other write of a Store: if
// anything moved, nothing is written and the error wraps ErrConflict.
// Writers that bypass the Store (etcdctl) move no marker: a key they
// delete is not noticed (a put recreates it, a delete does nothing), and
// neither is a key whose lease expires. Chunked, the first transaction
// compares against the plan's revision and each later one against the
// revision of the one before it, so that a chunked apply also conflicts
// if another writer wrote between its parts (those before it being
// written, which the error says). Beyond etcd's limits (compares and
// operations count, as etcd counts them), and not chunked, the error
// wraps ErrLimit, names the limit, and nothing is written.
//
// A plan with nothing to write is not sent: its read, at one revision, is
// its linearization point.
func (s *Store) Apply(ctx context.Context, plan *Plan, opts ApplyOptions) (*ApplyResult, error) {
	res := &ApplyResult{Revision: plan.Revision}
	if !hasWork(plan) && opts.Also == nil {
		return res, nil
	}
	chunks, err := s.chunk(plan, opts.Chunked, opts.Also)
	if err != nil {
		return nil, err
	}
	// Taken before the lease is granted: written_at + the lease's TTL is
	// then never later than the lease's expiry, which is what TTLs on the
	// wire are computed from.
	now := timestamppb.Now()
	if plan.TTL > 0 {
		secs := LeaseSeconds(plan.TTL)
		lease, err := s.cfg.Client.Grant(ctx, secs)
		if err != nil {
			return nil, s.wrapErr("grant lease", err)
		}
		res.Lease = int64(lease.ID)
	}
	since := plan.Revision
	res.id = opts.ID
	if res.id == "" {
		res.id = NewApplyID(now.AsTime())
	}
	h := HistoryRecord{ID: res.id, Parts: len(chunks), Kind: opts.Kind, By: s.cfg.Writer, At: now.AsTime(), Message: opts.Message, Traceparent: opts.Traceparent}
	if h.Kind == "" {
		h.Kind = KindApply
	}
	for i, ch := range chunks {
		h.Part = i + 1
		rev, err := s.commit(ctx, plan, ch, since, clientv3.LeaseID(res.Lease), now, h, opts.Also)
		if err != nil {
			if i == 0 && res.Lease != 0 {
				s.cfg.Client.Revoke(context.WithoutCancel(ctx), clientv3.LeaseID(res.Lease)) //nolint:errcheck // best effort; it expires anyway
			}
			if i > 0 {
				return res, fmt.Errorf("store: chunk %d of %d (chunks before it are written, at revisions %v): %w", i+1, len(chunks), res.Revisions, err)
			}
			return nil, err
		}
		since = rev
		res.Revision = rev
		res.Revisions = append(res.Revisions, rev)
	}
	return res, nil
}

// CheckLimits returns the error Apply would return for plan beyond etcd's
// limits, without writing anything: for dry runs.
func (s *Store) CheckLimits(plan *Plan, opts ApplyOptions) error {
	if !hasWork(plan) {
		return nil
	}
	_, err := s.chunk(plan, opts.Chunked, opts.Also)
	return err
}

func hasWork(plan *Plan) bool {
	for _, c := range plan.Changes {
		if c.Action != Unchanged {
			return true
		}
	}
	return false
}

// prefixes of the (type, scope) directories the plan declares a key in or
// prunes, and the scopes of those, each sorted.
func (s *Store) guards(plan *Plan) (dirs, scopes []string) {
	seenDir, seenScope := map[string]bool{}, map[string]bool{}
	add := func(t *resource.Type, scope string) {
		if d := s.EtcdKey(Key{Type: t, Scope: scope}); !seenDir[d] {
			seenDir[d] = true
			dirs = append(dirs, d)
		}
		if !seenScope[scope] {
			seenScope[scope] = true
			scopes = append(scopes, scope)
		}
	}
	for _, c := range plan.Changes {
		add(c.Type, c.Scope)
	}
	for _, d := range plan.PruneDirs() {
		add(d.Type, d.Scope)
	}
	sort.Strings(dirs)
	sort.Strings(scopes)
	return dirs, scopes
}

// commit sends one transaction: the plan's guards, compared against
// revision since (nothing they cover was written after it), then the
// writes of changes, the apply markers of the scopes they write, and the
// transaction's history record h (its changes filled in here).
func (s *Store) commit(ctx context.Context, plan *Plan, changes []Change, since int64, lease clientv3.LeaseID, now *timestamppb.Timestamp, h HistoryRecord, also *TxnAlso) (int64, error) {
	dirs, scopes := s.guards(plan)
	cmps := make([]clientv3.Cmp, 0, len(dirs)+len(scopes))
	for _, d := range dirs {
		// An empty range compares true.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(d), "<", since+1).WithPrefix())
	}
	for _, sc := range scopes {
		// A marker never written has mod_revision 0.
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ApplyMarkerKey(s.cfg.Prefix, sc)), "<", since+1))
	}
	ops := make([]clientv3.Op, 0, len(changes)+len(scopes))
	written := map[string]bool{}
	for _, c := range changes {
		if c.Action == Unchanged {
			continue
		}
		written[c.Scope] = true
		key := s.EtcdKey(c.Key)
		if c.Action == Delete {
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		val, err := s.envelope(c.New, plan.TTL, now)
		if err != nil {
			return 0, err
		}
		var po []clientv3.OpOption
		if lease != 0 {
			po = append(po, clientv3.WithLease(lease))
		}
		ops = append(ops, clientv3.OpPut(key, string(val), po...))
	}
	marker, err := json.Marshal(ApplyMarker{By: s.cfg.Writer, At: now.AsTime(), Traceparent: h.Traceparent})
	if err != nil {
		return 0, fmt.Errorf("store: encode apply marker: %w", err)
	}
	for _, sc := range scopes {
		if written[sc] {
			// Never under the apply's lease: its expiry must not delete
			// the marker.
			ops = append(ops, clientv3.OpPut(ApplyMarkerKey(s.cfg.Prefix, sc), string(marker)))
		}
	}
	hops, err := s.history(ctx, plan, changes, h)
	if err != nil {
		return 0, err
	}
	ops = append(ops, hops...)
	if also != nil {
		cmps = append(cmps, also.Cmps...)
		ops = append(ops, also.Ops...)
	}
	resp, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, s.wrapErr("apply", err)
	}
	if !resp.Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
}

// history is the operations of the history of a transaction writing
// changes: its record, within the room the transaction leaves under
// --max-request-bytes, and the pruning of older records.
func (s *Store) history(ctx context.Context, plan *Plan, changes []Change, h HistoryRecord) ([]clientv3.Op, error) {
	used := s.fixedBytes(plan)
	for _, c := range changes {
		if c.Action != Unchanged {
			used += s.opBytes(c)
		}
	}
	key := historyKey(s.cfg.Prefix, h.ID, h.Part)
	room := min(historyRecordBytes, s.cfg.MaxRequestBytes-used-len(key)-historyFixedBytes/2)
	record, err := s.historyRecord(h, changes, max(room, historyFixedBytes/2))
	if err != nil {
		return nil, err
	}
	return s.historyOps(ctx, key, record)
}

func (s *Store) envelope(body *anypb.Any, ttl time.Duration, now *timestamppb.Timestamp) ([]byte, error) {
	env := &legationv1.Envelope{Body: body, WrittenBy: s.cfg.Writer, WrittenAt: now}
	if ttl > 0 {
		env.Ttl = durationpb.New(ttl)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("store: encode envelope: %w", err)
	}
	return b, nil
}

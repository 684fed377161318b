package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/legation-io/legation/internal/state/resource"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// Config configures a Store.
type Config struct {
	// Client is the etcd client. Required; the Store does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix, ending in '/'. Empty means DefaultPrefix.
	Prefix string
	// MaxTxnOps is the etcd servers' --max-txn-ops. An apply that needs
	// more operations fails before it is sent, unless chunked. Zero: 128,
	// etcd's default.
	MaxTxnOps int
	// MaxRequestBytes is the etcd servers' --max-request-bytes. Zero:
	// 1.5 MiB, etcd's default.
	MaxRequestBytes int
	// Writer is recorded in every envelope written ("who wrote it").
	Writer string
	// PageSize is the number of keys read per range request. Zero: 1000.
	PageSize int64
	// Logger receives warnings about malformed values; nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every default filled in except
// Client.
func DefaultConfig() Config {
	return Config{
		Prefix:          DefaultPrefix,
		MaxTxnOps:       128,                 // etcd's default --max-txn-ops
		MaxRequestBytes: 3 * 1024 * 1024 / 2, // etcd's default --max-request-bytes
		PageSize:        1000,
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = d.MaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.PageSize == 0 {
		c.PageSize = d.PageSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the fields against each other.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("store: Client is required")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("store: prefix %q must start and end with '/'", c.Prefix)
	case c.MaxTxnOps < 1:
		return fmt.Errorf("store: MaxTxnOps %d must be positive", c.MaxTxnOps)
	case c.MaxRequestBytes < 1024:
		return fmt.Errorf("store: MaxRequestBytes %d is below 1 KiB", c.MaxRequestBytes)
	case c.PageSize < 1:
		return fmt.Errorf("store: PageSize %d must be positive", c.PageSize)
	}
	return nil
}

// Store reads and writes resources in etcd. Its methods may be called
// concurrently.
type Store struct {
	cfg  Config
	kv   clientv3.KV
	root string // cfg.Prefix + resourcesDir
}

// New returns a Store. It does no I/O.
func New(cfg Config) (*Store, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, kv: cfg.Client, root: cfg.Prefix + resourcesDir}, nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// EtcdKey returns the etcd key of k.
func (s *Store) EtcdKey(k Key) string { return s.root + k.path() }

// ErrNotFound is returned by Get for a key that does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrConflict is returned by Apply when, after the plan was made, a
// resource was created or changed in a (type, scope) directory the plan
// declares a resource in (written, deleted or left unchanged) or prunes,
// or a Store wrote to one of its scopes (a deletion, say).
var ErrConflict = errors.New("store: resources changed since the plan was made; plan again")

// ErrLimit is wrapped by errors about an apply beyond etcd's limits.
var ErrLimit = errors.New("store: beyond etcd's transaction limits")

// Resource is a stored resource as read from etcd.
type Resource struct {
	Key
	Envelope       *legationv1.Envelope
	CreateRevision int64
	ModRevision    int64
	// Lease is the etcd lease attached to the key, 0 for none.
	Lease int64
}

// Malformed is a key whose value could not be decoded.
type Malformed struct {
	EtcdKey     string
	ModRevision int64
	Err         error
}

// ListOptions selects what List returns.
type ListOptions struct {
	// Type limits the list to one type; nil lists every type.
	Type *resource.Type
	// Scope limits the list to one scope; empty lists every scope. It
	// needs Type.
	Scope string
	// Revision reads at a past revision; zero reads now.
	Revision int64
}

// ListResult is what List returns.
type ListResult struct {
	// Revision is the etcd revision the list was read at.
	Revision  int64
	Resources []*Resource
	// Malformed are the values that did not decode; they are not in
	// Resources.
	Malformed []Malformed
}

func (s *Store) listPrefix(o ListOptions) (string, error) {
	switch {
	case o.Type == nil && o.Scope != "":
		return "", errors.New("store: a scope needs a type")
	case o.Type == nil:
		return s.root, nil
	case o.Scope == "":
		return s.root + o.Type.Name + "/", nil
	}
	if err := resource.ValidateScope(o.Scope); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	return s.root + o.Type.Name + "/" + o.Scope + "/", nil
}

// List reads resources at one revision with a paginated range, in key
// order.
func (s *Store) List(ctx context.Context, o ListOptions) (*ListResult, error) {
	prefix, err := s.listPrefix(o)
	if err != nil {
		return nil, err
	}
	res := &ListResult{Revision: o.Revision}
	err = s.rangeAll(ctx, prefix, o.Revision, func(rev int64) { res.Revision = rev }, func(kv *mvccpb.KeyValue) {
		r, err := s.decode(kv)
		if err != nil {
			res.Malformed = append(res.Malformed, Malformed{EtcdKey: string(kv.Key), ModRevision: kv.ModRevision, Err: err})
			return
		}
		res.Resources = append(res.Resources, r)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// rangeAll reads every key under prefix at one revision (rev, or the
// current one when zero), page by page. atRev is called once with the
// revision read at, before the first key.
func (s *Store) rangeAll(ctx context.Context, prefix string, rev int64, atRev func(int64), each func(*mvccpb.KeyValue)) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	first := true
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(s.cfg.PageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.kv.Get(ctx, key, opts...)
		if err != nil {
			return s.wrapErr("range "+prefix, err)
		}
		if first {
			// The header holds etcd's current revision, even for a read
			// at a past one: only a read at "now" takes it, so that every
			// page is read at the same revision.
			if rev == 0 {
				rev = resp.Header.Revision
			}
			atRev(rev)
			first = false
		}
		for _, kv := range resp.Kvs {
			each(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Get reads one resource, now (rev 0) or at a past revision.
func (s *Store) Get(ctx context.Context, k Key, rev int64) (*Resource, int64, error) {
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.kv.Get(ctx, s.EtcdKey(k), opts...)
	if err != nil {
		return nil, 0, s.wrapErr("get "+k.String(), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	r, err := s.decode(resp.Kvs[0])
	return r, resp.Header.Revision, err
}

func (s *Store) decode(kv *mvccpb.KeyValue) (*Resource, error) {
	p, ok := strings.CutPrefix(string(kv.Key), s.root)
	if !ok {
		return nil, fmt.Errorf("%w: key %q is outside %s", ErrMalformed, kv.Key, s.root)
	}
	k, env, err := DecodeValue(p, kv.Value)
	if err != nil {
		return nil, err
	}
	return &Resource{Key: k, Envelope: env, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}, nil
}

// wrapErr turns etcd errors into clear ones.
func (s *Store) wrapErr(what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("store: %s: revision compacted: etcd no longer holds that history: %w", what, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("store: %s: revision is newer than etcd's current one: %w", what, err)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w: %s: etcd refused more operations than its --max-txn-ops allows (xdsadmin assumed %d): use --chunked, or give the server's value with --max-txn-ops: %v", ErrLimit, what, s.cfg.MaxTxnOps, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), status.Code(err) == codes.ResourceExhausted:
		// ResourceExhausted: gRPC refused the message before etcd saw it,
		// beyond --max-request-bytes plus gRPC's allowance (or beyond the
		// client's own send limit).
		return fmt.Errorf("%w: %s: etcd refused a request larger than its --max-request-bytes (xdsadmin assumed %d): use --chunked, or give the server's value with --max-request-bytes: %v", ErrLimit, what, s.cfg.MaxRequestBytes, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("store: %s: etcd did not answer in time (is it running and reachable at the configured endpoints?): %w", what, err)
	}
	return fmt.Errorf("store: %s: %w", what, err)
}

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
	if req.TTL < 0 || (req.TTL > 0 && req.TTL < time.Second) {
		return nil, fmt.Errorf("store: ttl %s: must be at least 1s", req.TTL)
	}
	for _, p := range req.Puts {
		if err := checkPut(p); err != nil {
			return nil, err
		}
	}
	for _, d := range req.Deletes {
		if d.Type == nil {
			return nil, fmt.Errorf("store: delete of %q without a type", d.Name)
		}
	}
	pruneTypes := req.PruneTypes
	if req.Prune && pruneTypes == nil {
		pruneTypes = resource.All()
	}
	// One consistent read: the whole resources directory for a prune or a
	// large apply would be costly, so read per (type, scope) touched.
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
				return nil, errors.New("store: a prune type is nil")
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
	current := map[string]*Resource{}
	var rev int64
	for _, dir := range order {
		if err := resource.ValidateScope(dir.Scope); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		err := s.rangeAll(ctx, s.root+dir.Type.Name+"/"+dir.Scope+"/", rev, func(r int64) { rev = r }, func(kv *mvccpb.KeyValue) {
			r, err := s.decode(kv)
			if err != nil {
				// A malformed value is overwritten or deleted like
				// any other; keep what the key says.
				p := strings.TrimPrefix(string(kv.Key), s.root)
				k, kerr := parsePath(p)
				if kerr != nil {
					return
				}
				r = &Resource{Key: k, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Lease: kv.Lease}
			}
			current[r.path()] = r
		})
		if err != nil {
			return nil, err
		}
	}
	if rev == 0 {
		// Nothing to read (an empty request): still plan at a revision.
		resp, err := s.kv.Get(ctx, s.root, clientv3.WithCountOnly())
		if err != nil {
			return nil, s.wrapErr("get revision", err)
		}
		rev = resp.Header.Revision
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
	named := map[string]bool{}
	for _, p := range req.Puts {
		if named[p.path()] {
			return nil, fmt.Errorf("store: %s named twice", p.Key)
		}
		named[p.path()] = true
		old := current[p.path()]
		c := Change{Key: p.Key, Old: old, New: p.Body}
		switch {
		case old == nil:
			c.Action = Create
		case old.Envelope != nil && sameBody(old.Envelope.GetBody(), p.Body) && req.TTL == 0 && old.Lease == 0:
			c.Action = Unchanged
		default:
			c.Action = Update
		}
		plan.Changes = append(plan.Changes, c)
	}
	for _, d := range req.Deletes {
		if named[d.path()] {
			return nil, fmt.Errorf("store: %s is both written and deleted", d)
		}
		named[d.path()] = true
		old := current[d.path()]
		if old == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, d)
		}
		plan.Changes = append(plan.Changes, Change{Key: d, Action: Delete, Old: old})
	}
	if req.Prune {
		for p, old := range current {
			if old.Scope == req.PruneScope && pruned[old.Type] && !named[p] {
				plan.Changes = append(plan.Changes, Change{Key: old.Key, Action: Delete, Old: old})
			}
		}
	}
	sort.Slice(plan.Changes, func(i, j int) bool { return plan.Changes[i].path() < plan.Changes[j].path() })
	return plan, nil
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
	if err := resource.ValidateName(p.Name); err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	}
	if p.Body.GetTypeUrl() != p.Type.URL {
		return fmt.Errorf("store: %s: body is %q, want %q", p.Key, p.Body.GetTypeUrl(), p.Type.URL)
	}
	msg, err := resource.Unmarshal(p.Type, p.Body.GetValue())
	if err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	}
	if got := p.Type.NameOf(msg); got != p.Name {
		return fmt.Errorf("store: %s: body names %q", p.Key, got)
	}
	// Every writer, not only xdsadmin's decoder, gets the same checks,
	// typed_config included: a resource Envoy would NACK is not stored.
	if err := resource.Check(msg); err != nil {
		return fmt.Errorf("store: %s: %w", p.Key, err)
	}
	return nil
}

// ApplyResult says what an apply wrote.
type ApplyResult struct {
	// Revision is the etcd revision of the (last) transaction; for an
	// apply with nothing to do, the plan's revision.
	Revision int64
	// Revisions lists the revision of each transaction of a chunked apply.
	Revisions []int64
	// Lease is the lease the resources were written under, 0 for none.
	Lease int64
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
}

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
	if !hasWork(plan) {
		return res, nil
	}
	chunks, err := s.chunk(plan, opts.Chunked)
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
	for i, ch := range chunks {
		rev, err := s.commit(ctx, plan, ch, since, clientv3.LeaseID(res.Lease), now, opts.Traceparent)
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
	_, err := s.chunk(plan, opts.Chunked)
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

// ApplyMarker is the value of a scope's apply marker.
type ApplyMarker struct {
	// By names the writer (the store's Writer).
	By string `json:"by,omitempty"`
	// At is when the apply was sent.
	At time.Time `json:"at"`
	// Traceparent is the W3C trace context of the apply that wrote the
	// marker ("" when it was not traced, and in markers written before
	// traces were stored).
	Traceparent string `json:"traceparent,omitempty"`
}

// ParseApplyMarker decodes a marker's value. Fields it does not know are
// ignored, and those it knows may be missing (a marker written before
// they were): they are then zero.
func ParseApplyMarker(b []byte) (ApplyMarker, error) {
	var m ApplyMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return ApplyMarker{}, fmt.Errorf("%w: apply marker: %v", ErrMalformed, err)
	}
	return m, nil
}

// ApplyMarkersAt returns the apply markers written by the transaction of
// revision rev, by scope: those the store's applies put with the
// resources they wrote at rev. It reads etcd at rev (an error once rev is
// compacted away).
func ApplyMarkersAt(ctx context.Context, kv clientv3.KV, prefix string, rev int64) (map[string]ApplyMarker, error) {
	dir := prefix + appliesDir
	resp, err := kv.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read apply markers at revision %d: %w", rev, err)
	}
	out := map[string]ApplyMarker{}
	for _, k := range resp.Kvs {
		if k.ModRevision != rev {
			continue
		}
		m, err := ParseApplyMarker(k.Value)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", k.Key, err)
		}
		out[strings.TrimPrefix(string(k.Key), dir)] = m
	}
	return out, nil
}

// guards returns what every transaction of plan compares: the etcd
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
// writes of changes and the apply markers of the scopes they write.
func (s *Store) commit(ctx context.Context, plan *Plan, changes []Change, since int64, lease clientv3.LeaseID, now *timestamppb.Timestamp, traceparent string) (int64, error) {
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
	marker, err := json.Marshal(ApplyMarker{By: s.cfg.Writer, At: now.AsTime(), Traceparent: traceparent})
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
	resp, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, s.wrapErr("apply", err)
	}
	if !resp.Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
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

// opBytes estimates the bytes one write adds to a transaction request:
// key, value, and protobuf framing.
func (s *Store) opBytes(c Change) int {
	n := len(s.EtcdKey(c.Key)) + 32
	if c.New != nil {
		n += len(c.New.GetValue()) + len(c.New.GetTypeUrl()) + len(s.cfg.Writer) + 64
	}
	return n
}

// chunk checks the limits and splits the plan's writes into transactions.
// etcd counts the larger of a transaction's compares and its operations
// against --max-txn-ops. Every transaction has one compare per guarded
// directory and one per scope (see guards), and writes, besides its
// changes, one apply marker per scope: unchanged resources cost nothing.
func (s *Store) chunk(plan *Plan, chunked bool) ([][]Change, error) {
	var work []Change
	writes := map[string]bool{}
	for _, c := range plan.Changes {
		if c.Action != Unchanged {
			work = append(work, c)
			writes[c.Scope] = true
		}
	}
	dirs, scopes := s.guards(plan)
	ncmps := len(dirs) + len(scopes)
	// The compares, and the marker puts (a marker's value is small).
	fixed := 0
	for _, d := range dirs {
		fixed += len(d) + 16
	}
	for _, sc := range scopes {
		fixed += 2*len(ApplyMarkerKey(s.cfg.Prefix, sc)) + len(s.cfg.Writer) + 96 + 72 // 72: a traceparent
	}
	if ncmps > s.cfg.MaxTxnOps {
		return nil, fmt.Errorf("%w: the apply needs %d compares in every transaction (one per type and scope it declares or prunes, and one per scope), more than etcd's --max-txn-ops (%d): split it by scope, or raise --max-txn-ops on every etcd member and pass the same value to xdsadmin --max-txn-ops",
			ErrLimit, ncmps, s.cfg.MaxTxnOps)
	}
	if !chunked {
		nops := len(work) + len(writes)
		total := fixed
		for _, c := range work {
			total += s.opBytes(c)
		}
		switch {
		case nops > s.cfg.MaxTxnOps:
			markers := "its scope's apply marker"
			if len(writes) > 1 {
				markers = fmt.Sprintf("%d scopes' apply markers", len(writes))
			}
			return nil, fmt.Errorf("%w: the apply needs %d operations in one transaction (%d writes and %s), more than etcd's --max-txn-ops (%d): use --chunked to split it (clients may then see it in parts), or raise --max-txn-ops on every etcd member and pass the same value to xdsadmin --max-txn-ops",
				ErrLimit, nops, len(work), markers, s.cfg.MaxTxnOps)
		case total > s.cfg.MaxRequestBytes:
			return nil, fmt.Errorf("%w: the apply needs a transaction of about %d bytes, more than etcd's --max-request-bytes (%d): use --chunked to split it (clients may then see it in parts), or raise --max-request-bytes on every etcd member and pass the same value to xdsadmin --max-request-bytes",
				ErrLimit, total, s.cfg.MaxRequestBytes)
		}
		return [][]Change{work}, nil
	}
	// Room for changes in each transaction, the markers aside.
	room := s.cfg.MaxTxnOps - len(scopes)
	if room < 1 {
		return nil, fmt.Errorf("%w: the apply writes to %d scopes, which leaves no room for a change under etcd's --max-txn-ops (%d): split it by scope", ErrLimit, len(scopes), s.cfg.MaxTxnOps)
	}
	ordered := make([]Change, len(work))
	copy(ordered, work)
	rank := func(c Change) int {
		if c.Action == Delete {
			return 100 + resource.DeleteOrder(c.Type)
		}
		return c.Type.Order
	}
	sort.SliceStable(ordered, func(i, j int) bool { return rank(ordered[i]) < rank(ordered[j]) })
	var chunks [][]Change
	var cur []Change
	size := fixed
	for _, c := range ordered {
		b := s.opBytes(c)
		if fixed+b > s.cfg.MaxRequestBytes {
			return nil, fmt.Errorf("%w: %s alone needs about %d bytes, more than etcd's --max-request-bytes (%d)", ErrLimit, c.Key, fixed+b, s.cfg.MaxRequestBytes)
		}
		if len(cur) > 0 && (len(cur)+1 > room || size+b > s.cfg.MaxRequestBytes) {
			chunks = append(chunks, cur)
			cur, size = nil, fixed
		}
		cur = append(cur, c)
		size += b
	}
	return append(chunks, cur), nil
}

// Diff lists what changed between revisions r1 and r2 (r2 zero: now), in
// key order. Unchanged resources are not listed.
func (s *Store) Diff(ctx context.Context, r1, r2 int64) ([]Change, int64, error) {
	if r1 <= 0 {
		return nil, 0, fmt.Errorf("store: diff: revision %d must be positive", r1)
	}
	if r2 != 0 && r2 < r1 {
		return nil, 0, fmt.Errorf("store: diff: revision %d is before %d", r2, r1)
	}
	after, err := s.List(ctx, ListOptions{Revision: r2})
	if err != nil {
		return nil, 0, err
	}
	before, err := s.List(ctx, ListOptions{Revision: r1})
	if err != nil {
		return nil, 0, err
	}
	old := make(map[string]*Resource, len(before.Resources))
	for _, r := range before.Resources {
		old[r.path()] = r
	}
	var out []Change
	for _, r := range after.Resources {
		o := old[r.path()]
		delete(old, r.path())
		switch {
		case o == nil:
			out = append(out, Change{Key: r.Key, Action: Create, New: r.Envelope.GetBody(), NewResource: r})
		case o.ModRevision != r.ModRevision:
			out = append(out, Change{Key: r.Key, Action: Update, Old: o, New: r.Envelope.GetBody(), NewResource: r})
		}
	}
	for _, o := range old {
		out = append(out, Change{Key: o.Key, Action: Delete, Old: o})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path() < out[j].path() })
	return out, after.Revision, nil
}

// WatchEvent is one etcd revision's changes to resources.
type WatchEvent struct {
	Revision int64
	Changes  []Change
	// Malformed are values written in this revision that did not decode.
	Malformed []Malformed
}

// Watch streams resource changes after revision from (zero: from now), one
// WatchEvent per etcd revision, until ctx ends or an error, which is sent
// to errc before both channels close. Cancel ctx to stop it.
func (s *Store) Watch(ctx context.Context, from int64) (<-chan WatchEvent, <-chan error) {
	out := make(chan WatchEvent, 16)
	errc := make(chan error, 1)
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from+1))
	}
	wch := s.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), s.root, opts...)
	go func() {
		defer close(out)
		defer close(errc)
		for wr := range wch {
			if err := wr.Err(); err != nil {
				errc <- s.wrapErr("watch", err)
				return
			}
			for _, ev := range groupByRevision(wr.Events) {
				we := WatchEvent{Revision: ev.rev}
				for _, e := range ev.events {
					c, err := s.changeOf(e)
					if err != nil {
						we.Malformed = append(we.Malformed, Malformed{EtcdKey: string(e.Kv.Key), ModRevision: e.Kv.ModRevision, Err: err})
						continue
					}
					we.Changes = append(we.Changes, c)
				}
				select {
				case out <- we:
				case <-ctx.Done():
					return
				}
			}
		}
		if ctx.Err() == nil {
			errc <- errors.New("store: watch: closed by etcd")
		}
	}()
	return out, errc
}

func (s *Store) changeOf(e *clientv3.Event) (Change, error) {
	var old *Resource
	if e.PrevKv != nil {
		old, _ = s.decode(e.PrevKv)
	}
	if e.Type == clientv3.EventTypeDelete {
		k, err := parsePath(strings.TrimPrefix(string(e.Kv.Key), s.root))
		if err != nil {
			return Change{}, err
		}
		return Change{Key: k, Action: Delete, Old: old}, nil
	}
	r, err := s.decode(e.Kv)
	if err != nil {
		return Change{}, err
	}
	a := Update
	if e.IsCreate() {
		a = Create
	}
	return Change{Key: r.Key, Action: a, Old: old, New: r.Envelope.GetBody(), NewResource: r}, nil
}

type revEvents struct {
	rev    int64
	events []*clientv3.Event
}

// groupByRevision splits a watch response's events into whole revisions.
// etcd sends all events of one revision in one response (without
// WithFragment), possibly several revisions per response.
func groupByRevision(evs []*clientv3.Event) []revEvents {
	var out []revEvents
	for _, e := range evs {
		rev := e.Kv.ModRevision
		if n := len(out); n > 0 && out[n-1].rev == rev {
			out[n-1].events = append(out[n-1].events, e)
			continue
		}
		out = append(out, revEvents{rev: rev, events: []*clientv3.Event{e}})
	}
	return out
}

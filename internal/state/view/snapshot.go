package view

import (
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// Entry is one resource revision held by a View. It is immutable and shared
// by every snapshot and stream that holds it: never modify it.
type Entry struct {
	store.Key
	// ModRevision is the etcd revision that last wrote the key: the
	// resource's version in delta xDS.
	ModRevision    int64
	CreateRevision int64
	// Lease is the etcd lease on the key, 0 for none.
	Lease int64
	// TTL is the time to live asked for when written, 0 for none.
	TTL time.Duration
	// WrittenAt is when the writer started the write (the envelope's
	// written_at), zero if unknown. For a TTL'd resource it was taken
	// before the lease was granted, so WrittenAt plus the lease's TTL is
	// no later than the lease's expiry (clocks agreeing).
	WrittenAt time.Time
	// Body is the resource exactly as stored: its Value is the marshaled
	// resource, sent to clients as is. It is never re-marshaled.
	Body *anypb.Any
	// InlineKey: the resource is not an SDS secret but carries an inline
	// private key (resource.CarriesInlineKey), found once when the view
	// decodes this revision. It goes only to clients allowed the scope's
	// secrets.
	InlineKey bool

	// etcdRev is the key's etcd mod revision when ModRevision was raised
	// above it (a reload after etcd went back to older data), else 0.
	etcdRev int64
}

// etcdModRevision is the key's mod revision in etcd.
func (e *Entry) etcdModRevision() int64 {
	if e.etcdRev != 0 {
		return e.etcdRev
	}
	return e.ModRevision
}

// ChangeKind says how a resource changed between two snapshots.
type ChangeKind uint8

// The kinds of change.
const (
	Upserted ChangeKind = iota + 1
	Deleted
)

// EntryChange is one resource changed in a snapshot, relative to the
// snapshot before it.
type EntryChange struct {
	store.Key
	Kind ChangeKind
	// Revision is the etcd revision of the change.
	Revision int64
}

// Snapshot is a View's state at one etcd revision: exactly etcd's resources
// at Revision. It is immutable and safe for concurrent use; readers hold no
// lock.
type Snapshot struct {
	// Revision is the etcd revision the snapshot equals.
	Revision int64
	// Changes lists what differs from the previous snapshot, in the order
	// applied. Empty for the first snapshot and for snapshots that only
	// advance the revision.
	Changes []EntryChange
	// Reloaded is true when the snapshot comes from a full reload (after a
	// compaction or a lost watch) rather than from watch events.
	Reloaded bool
	// HistoryFrom is the oldest revision from which LastChange is exact: a
	// deletion before it may be unknown.
	HistoryFrom int64
	// Malformed counts the keys currently skipped because their values do
	// not decode.
	Malformed int
	// InlineKeys counts the entries carrying an inline private key
	// (Entry.InlineKey): while it is 0, no client need be asked whether
	// it may be sent them.
	InlineKeys int
	// OverlaysAt is the revision, at or before Revision, of the latest
	// change to a reserved scope (a canary rollout's overlay, written and
	// removed in the transactions that begin and end the rollout), or of
	// the latest load: the set of running rollouts at Revision is the
	// set at OverlaysAt.
	OverlaysAt int64
	// Seen is when the view received what the snapshot applies: the watch
	// response (or the start of the load) it was built from.
	Seen time.Time
	// Committed stamps when the oldest change the snapshot applies was
	// committed, as well as this replica can tell: etcd keeps no commit
	// wall time, so it is the earliest written_at of the envelopes the
	// snapshot puts (the writer's clock, taken by store.Store.Apply right
	// before its transaction, the instant the scope's apply marker records
	// too), never later than Seen (clocks that disagree cannot make it
	// later).
	// When the snapshot only deletes, or its writer (another tool) set no
	// written_at, it is Seen. Reading the stamp from the envelope the view
	// decodes anyway costs no etcd read or write and no extra decode; the
	// apply marker holds the same instant but lies outside the watched
	// resources, and watching it would cost every replica an event per
	// apply and per scope. Zero for the first load, which changes nothing.
	Committed time.Time

	entries *iradix.Tree[*Entry] // "type/scope/name" -> entry
	sets    *iradix.Tree[int64]  // "type/scope" -> revision of its last change
	tombs   *iradix.Tree[int64]  // "type/scope/name" -> deletion revision

	next *Snapshot     // set once, before done is closed
	done chan struct{} // closed when a newer snapshot is published
}

func newSnapshot() *Snapshot {
	return &Snapshot{
		entries: iradix.New[*Entry](),
		sets:    iradix.New[int64](),
		tombs:   iradix.New[int64](),
		done:    make(chan struct{}),
	}
}

// Len is the number of resources held.
func (s *Snapshot) Len() int { return s.entries.Len() }

// Get returns the resource of type t named name in scope, if present.
func (s *Snapshot) Get(t *resource.Type, scope, name string) (*Entry, bool) {
	var buf [keyBuf]byte
	return s.entries.Get(append(append(treeKey(buf[:0], t, scope), '/'), name...))
}

// keyBuf is the size of the buffer on the stack that the lookups build
// their tree keys in: a push looks up every resource it may send, so a
// key built on the heap was a tenth of the allocations of a push to
// 10,000 streams (a key longer than this still works, on the heap).
const keyBuf = 192

// treeKey appends "type/scope" to b.
func treeKey(b []byte, t *resource.Type, scope string) []byte {
	return append(append(append(b, t.Name...), '/'), scope...)
}

// Walk calls fn for each resource of type t in scope, in name order, until
// fn returns false. An empty scope walks every scope.
func (s *Snapshot) Walk(t *resource.Type, scope string, fn func(*Entry) bool) {
	prefix := t.Name + "/"
	if scope != "" {
		prefix += scope + "/"
	}
	s.entries.Root().WalkPrefix([]byte(prefix), func(_ []byte, e *Entry) bool { return !fn(e) })
}

// WalkNamePrefix calls fn for each resource of type t in scope whose name
// starts with prefix, in name order, until fn returns false: the
// members of a glob collection without a walk of the whole type.
func (s *Snapshot) WalkNamePrefix(t *resource.Type, scope, prefix string, fn func(*Entry) bool) {
	key := append(append(treeKey(make([]byte, 0, keyBuf), t, scope), '/'), prefix...)
	s.entries.Root().WalkPrefix(key, func(_ []byte, e *Entry) bool { return !fn(e) })
}

// LastChange returns the revision of the last put or delete of a resource
// of type t in scope that this view knows of, 0 if none. It is exact for
// changes at or after HistoryFrom.
func (s *Snapshot) LastChange(t *resource.Type, scope string) int64 {
	var buf [keyBuf]byte
	r, _ := s.sets.Get(treeKey(buf[:0], t, scope))
	return r
}

// DeletedAt returns the revision at which the resource was deleted, if it
// was deleted since the view started (and not re-created).
func (s *Snapshot) DeletedAt(t *resource.Type, scope, name string) (int64, bool) {
	var buf [keyBuf]byte
	return s.tombs.Get(append(append(treeKey(buf[:0], t, scope), '/'), name...))
}

// Done returns a channel closed when a newer snapshot is published.
func (s *Snapshot) Done() <-chan struct{} { return s.done }

// Next returns the snapshot published after s, or nil while s is the
// latest. Following Next from an older snapshot visits every published
// snapshot in order, so a reader can collect every Changes list.
func (s *Snapshot) Next() *Snapshot {
	select {
	case <-s.done:
		return s.next
	default:
		return nil
	}
}

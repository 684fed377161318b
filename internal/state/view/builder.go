package view

import (
	"strings"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// builder makes the next snapshot from the previous one.
type builder struct {
	prev        *Snapshot
	entries     *iradix.Txn[*Entry]
	sets        *iradix.Txn[int64]
	tombs       *iradix.Txn[int64]
	changes     []EntryChange
	rev         int64
	historyFrom int64
	reloaded    bool
	touched     bool
	initial     bool // the first load: every entry is new, list no changes
	// seen is when the builder started: when the view received what it
	// applies. oldestWrite is the earliest written_at of its puts.
	seen, oldestWrite time.Time
	// On a reload, a key written at or before raiseUpTo (the last
	// snapshot's revision) that changed is presented as written at
	// raiseTo (the reload's revision).
	raiseTo, raiseUpTo int64
	// inlineKeys counts the entries carrying an inline private key.
	inlineKeys int
	// overlaysAt is the revision of the latest change to a reserved
	// scope (Snapshot.OverlaysAt).
	overlaysAt int64
}

func newBuilder(prev *Snapshot) *builder {
	return &builder{
		inlineKeys:  prev.InlineKeys,
		overlaysAt:  prev.OverlaysAt,
		prev:        prev,
		entries:     prev.entries.Txn(),
		sets:        prev.sets.Txn(),
		tombs:       prev.tombs.Txn(),
		rev:         prev.Revision,
		historyFrom: prev.HistoryFrom,
		seen:        time.Now(),
	}
}

func (b *builder) build(v *View) *Snapshot {
	s := &Snapshot{
		Revision:    b.rev,
		Changes:     b.changes,
		Reloaded:    b.reloaded,
		HistoryFrom: b.historyFrom,
		Malformed:   len(v.malformed),
		InlineKeys:  b.inlineKeys,
		OverlaysAt:  b.overlaysAt,
		Seen:        b.seen,
		entries:     b.entries.Commit(),
		sets:        b.sets.Commit(),
		tombs:       b.tombs.Commit(),
		done:        make(chan struct{}),
	}
	if !b.initial {
		s.Committed = b.seen
		if !b.oldestWrite.IsZero() && b.oldestWrite.Before(b.seen) {
			s.Committed = b.oldestWrite
		}
	}
	return s
}

// setKey is "type/scope" of a path "type/scope/name".
func setKey(p string) string {
	i := strings.IndexByte(p, '/')
	j := strings.IndexByte(p[i+1:], '/')
	return p[:i+1+j]
}

func (b *builder) bumpSet(p string, rev int64) {
	k := []byte(setKey(p))
	if old, ok := b.sets.Get(k); !ok || old < rev {
		b.sets.Insert(k, rev)
	}
}

// apply applies one event newer than the previous snapshot.
func (b *builder) apply(v *View, e *clientv3.Event) {
	b.touched = true
	p := string(e.Kv.Key[len(v.root):])
	if e.Type == clientv3.EventTypeDelete {
		delete(v.malformed, string(e.Kv.Key))
		delete(v.unserved, string(e.Kv.Key))
		b.remove(v, p, e.Kv.ModRevision)
		return
	}
	b.put(v, e.Kv, p)
}

// history records an event at or before the snapshot's revision, read from
// etcd's history at start-up: it tells which sets changed and what was
// deleted, not the state (which the load already has).
func (b *builder) history(v *View, e *clientv3.Event) {
	if v.historyTo == 0 {
		return // a resumed watch may repeat events; nothing to learn
	}
	p := string(e.Kv.Key[len(v.root):])
	if _, err := store.ParsePath(p); err != nil {
		return
	}
	rev := e.Kv.ModRevision
	b.bumpSet(p, rev)
	b.touched = true
	if e.Type == clientv3.EventTypeDelete {
		if _, live := b.entries.Get([]byte(p)); !live {
			b.tomb(v, p, rev)
		}
	}
}

func (b *builder) put(v *View, kv *mvccpb.KeyValue, p string) {
	key := string(kv.Key)
	k, env, err := store.DecodeValue(p, kv.Value)
	if err != nil {
		if v.malformed[key] != kv.ModRevision {
			v.malformed[key] = kv.ModRevision
			v.metrics.malformed.Inc()
			v.cfg.Logger.Warn("view: skipping a value that does not decode", "key", key, "mod_revision", kv.ModRevision, "err", err)
		}
		// Skipped: to clients the key does not exist.
		if _, ok := b.entries.Get([]byte(p)); ok {
			b.remove(v, p, kv.ModRevision)
		}
		return
	}
	delete(v.malformed, key)
	if b.unserved(v, kv, p, k.Name) {
		return
	}
	body := env.GetBody()
	body.TypeUrl = k.Type.URL // share one string per type
	e := &Entry{Key: k, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Lease: kv.Lease, Body: body,
		InlineKey: resource.CarriesInlineKey(k.Type, body.GetValue())}
	if b.raiseTo != 0 && kv.ModRevision <= b.raiseUpTo {
		e.etcdRev, e.ModRevision = kv.ModRevision, b.raiseTo
	}
	if env.GetTtl() != nil {
		e.TTL = env.GetTtl().AsDuration()
	}
	if env.GetWrittenAt() != nil {
		e.WrittenAt = env.GetWrittenAt().AsTime()
	}
	if old, _ := b.entries.Insert([]byte(p), e); old != nil && old.InlineKey {
		b.inlineKeys--
	}
	if e.InlineKey {
		b.inlineKeys++
	}
	b.tombs.Delete([]byte(p))
	b.bumpSet(p, e.ModRevision)
	b.overlay(k.Scope, e.ModRevision)
	if !b.initial {
		b.changes = append(b.changes, EntryChange{Key: k, Kind: Upserted, Revision: e.ModRevision})
		if !e.WrittenAt.IsZero() && (b.oldestWrite.IsZero() || e.WrittenAt.Before(b.oldestWrite)) {
			b.oldestWrite = e.WrittenAt
		}
	}
	b.touched = true
}

func (b *builder) remove(v *View, p string, rev int64) {
	old, ok := b.entries.Delete([]byte(p))
	if !ok {
		return // never held (e.g. malformed, or deleted before start)
	}
	if old.InlineKey {
		b.inlineKeys--
	}
	b.tomb(v, p, rev)
	b.bumpSet(p, rev)
	b.overlay(old.Scope, rev)
	b.changes = append(b.changes, EntryChange{Key: old.Key, Kind: Deleted, Revision: rev})
	b.touched = true
}

// unserved reports whether the resource named name, at key p, is skipped
// because its xdstp name's authority is not one the replica serves
// (Config.Serves); to clients it then does not exist.
func (b *builder) unserved(v *View, kv *mvccpb.KeyValue, p, name string) bool {
	key := string(kv.Key)
	if v.cfg.Serves == nil || v.cfg.Serves(name) {
		delete(v.unserved, key)
		return false
	}
	if v.unserved[key] != kv.ModRevision {
		v.unserved[key] = kv.ModRevision
		v.cfg.Logger.Warn("view: skipping a resource of an authority this replica does not serve (--authority)", "key", key, "name", name)
	}
	if _, ok := b.entries.Get([]byte(p)); ok {
		b.remove(v, p, kv.ModRevision)
	}
	return true
}

// overlay notes a change at rev to scope, if it is a reserved one.
func (b *builder) overlay(scope string, rev int64) {
	if strings.HasPrefix(scope, resource.ReservedScopePrefix) && rev > b.overlaysAt {
		b.overlaysAt = rev
	}
}

func (b *builder) tomb(v *View, p string, rev int64) {
	b.tombs.Insert([]byte(p), rev)
	v.tombFIFO = append(v.tombFIFO, tomb{path: p, rev: rev})
	for len(v.tombFIFO) > v.cfg.MaxTombstones {
		t := v.tombFIFO[0]
		v.tombFIFO = v.tombFIFO[1:]
		if r, ok := b.tombs.Get([]byte(t.path)); ok && r == t.rev {
			b.tombs.Delete([]byte(t.path))
		}
	}
}

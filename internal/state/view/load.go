package view

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/legation-io/legation/internal/state/store"
)

// load reads the whole state at one revision and publishes it. On a reload
// the new snapshot records, as its changes, how it differs from the last.
// A key changed since the last snapshot whose mod revision is not above
// the last snapshot's (etcd went back to older data) is given the reload's
// revision as its ModRevision, so that the versions served never go back
// and clients holding the newer data are sent the older. afterReset takes
// every key as changed (see reload). It refuses, with a *resetError, a
// revision behind the last snapshot's, or equal to it after a reset.
func (v *View) load(ctx context.Context, afterReset bool) error {
	prev := v.cur.Load()
	var b *builder
	if prev == nil {
		b = newBuilder(newSnapshot())
		b.initial = true
	} else {
		b = newBuilder(prev)
	}
	seen := map[string]bool{}
	var rev int64
	err := store.ReadPagesAt(ctx, v.cfg.Client, v.root, 0, v.cfg.PageSize, func(r int64) {
		rev = r
		if prev != nil {
			b.raiseTo, b.raiseUpTo = r, prev.Revision
		}
	}, func(kv *mvccpb.KeyValue) {
		p := string(kv.Key[len(v.root):])
		seen[p] = true
		if prev != nil && !afterReset {
			if e, ok := prev.entries.Get([]byte(p)); ok && e.etcdModRevision() == kv.ModRevision {
				return // unchanged since the last snapshot
			}
		}
		b.put(v, kv, p)
	})
	if err != nil {
		return fmt.Errorf("view: load %s: %w", v.root, err)
	}
	if prev != nil {
		if rev < prev.Revision || (afterReset && rev == prev.Revision) {
			return &resetError{etcd: rev, view: prev.Revision}
		}
		v.dropUnseen(b, prev, seen, rev)
	} else {
		b.historyFrom = rev + 1
	}
	b.rev = rev
	b.overlaysAt = rev // what happened to the overlays since the last snapshot is not known
	b.reloaded = true
	v.metrics.reloads.Inc()
	v.publish(b.build(v))
	v.heard.Store(time.Now().UnixNano())
	return nil
}

// dropUnseen removes from b the entries of prev that a reload at rev did
// not see, and forgets the malformed and unserved keys it did not see
// either.
func (v *View) dropUnseen(b *builder, prev *Snapshot, seen map[string]bool, rev int64) {
	prev.entries.Root().Walk(func(k []byte, e *Entry) bool {
		if !seen[string(k)] {
			b.remove(v, string(k), rev)
		}
		return false
	})
	for key := range v.malformed {
		if !seen[strings.TrimPrefix(key, v.root)] {
			delete(v.malformed, key)
		}
	}
	for key := range v.unserved {
		if !seen[strings.TrimPrefix(key, v.root)] {
			delete(v.unserved, key)
		}
	}
}

package view

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// defaultCatchUpEvery is Config.CatchUpEvery's default: how often, at
// most, the view wakes the readers that saw none of the changes published
// since they last advanced: a reader holds the snapshot it advanced to,
// and through it every snapshot published since (each links to the
// next), so one that is never woken (its scope and types never change,
// others' do) would hold them all. Woken, it advances and lets them go. Only changes publish a catch-up:
// with none, nothing is retained and nothing wakes.
const defaultCatchUpEvery = 10 * time.Second

// An Interest is what a reader of the view (an xDS stream, say) can see:
// store.DefaultScope and one group's scope (and the canary overlays, in
// reserved scopes, that a rollout may give it), and the resource types it
// holds or asks for. The view signals Wake when a snapshot it publishes
// changes a resource of one of those types in one of those scopes, and no
// more often than that (but for a catch-up every Config.CatchUpEvery
// while changes elsewhere go on): a reader that nothing concerns is never
// woken, so idle readers cost no CPU whatever the revisions etcd goes
// through.
//
// Its methods may be called from any goroutine.
type Interest struct {
	reg   *interests
	scope string
	batch any
	types atomic.Uint64 // bit resource.Type.Order set for each type
	at    atomic.Int64  // revision of the snapshot the reader advanced to
	wake  chan struct{} // one signal pending at most
}

// Interest registers an interest in the changes of scope (and of
// store.DefaultScope) with the view, for no type until Add. Close it when
// done.
//
// batch is a batching key: any comparable value, nil for none. Readers
// whose interests share a key are signalled back to back when a change
// concerns them, never interleaved with others'. Readers that hand their
// output to one shared writer pass that writer's key: they then run
// together, and the writer, woken by the first, finds the rest queued and
// handles them at once, where signalling them in no order would wake it
// (and whatever it writes to) for nearly every reader.
func (v *View) Interest(scope string, batch any) *Interest {
	i := &Interest{reg: &v.interests, scope: scope, batch: batch, wake: make(chan struct{}, 1)}
	if s := v.cur.Load(); s != nil {
		i.at.Store(s.Revision)
	}
	v.interests.add(i)
	return i
}

// Add adds type t. Call it before reading the latest snapshot for t, so
// that a change published meanwhile either is in that snapshot or wakes
// the reader.
func (i *Interest) Add(t *resource.Type) {
	bit := uint64(1) << t.Order
	if i.types.Load()&bit == 0 {
		i.types.Or(bit)
	}
}

// Wake is signalled when a snapshot published a change the interest
// covers, or for a catch-up; the reader then advances to the latest
// snapshot and calls Advanced.
func (i *Interest) Wake() <-chan struct{} { return i.wake }

// Advanced records that the reader moved to the snapshot at rev.
func (i *Interest) Advanced(rev int64) { i.at.Store(rev) }

// Close unregisters the interest.
func (i *Interest) Close() { i.reg.remove(i) }

func (i *Interest) signal() {
	select {
	case i.wake <- struct{}{}:
	default: // one pending is enough: the reader advances to the latest
	}
}

// interests is a view's registry of Interests, by scope, then by batching
// key.
type interests struct {
	mu        sync.RWMutex // guards byScope
	byScope   map[string]map[any]map[*Interest]struct{}
	every     time.Duration // Config.CatchUpEvery
	lastSweep time.Time     // owned by the view's Run goroutine

	wakes, catchUps atomic.Int64 // signals sent, for the metrics
}

func (r *interests) add(i *Interest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byScope == nil {
		r.byScope = map[string]map[any]map[*Interest]struct{}{}
	}
	batches := r.byScope[i.scope]
	if batches == nil {
		batches = map[any]map[*Interest]struct{}{}
		r.byScope[i.scope] = batches
	}
	set := batches[i.batch]
	if set == nil {
		set = map[*Interest]struct{}{}
		batches[i.batch] = set
	}
	set[i] = struct{}{}
}

func (r *interests) remove(i *Interest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	batches := r.byScope[i.scope]
	set := batches[i.batch]
	delete(set, i)
	if len(set) == 0 {
		delete(batches, i.batch)
	}
	if len(batches) == 0 {
		delete(r.byScope, i.scope)
	}
}

// notify signals the interests s's changes concern, and, at most every
// r.every, those left behind. It is called by the view's Run
// goroutine once s is the latest snapshot.
func (r *interests) notify(s *Snapshot, now time.Time) {
	if len(s.Changes) == 0 {
		return
	}
	sweep := now.Sub(r.lastSweep) >= r.every
	if sweep {
		r.lastSweep = now
	}
	r.visit(s, sweep, func(i *Interest, catchUp bool) {
		if catchUp {
			r.catchUps.Add(1)
		} else {
			r.wakes.Add(1)
		}
		i.signal()
	})
}

// visit calls fn, in the order notify signals them, for the interests
// s's changes concern and, if sweep, for those left behind (catchUp):
// scope by scope, and in a scope batch by batch.
func (r *interests) visit(s *Snapshot, sweep bool, fn func(i *Interest, catchUp bool)) {
	// Types changed in store.DefaultScope, which every interest sees, or
	// in a reserved scope: a canary overlay written or removed as a
	// rollout begins or ends, which any node may be in the cohort of, so
	// that each reader moves to the rollouts running at the snapshot
	// from the view alone, not only once the rollouts' own watch says
	// so (a watch can be slow or stalled).
	var all uint64
	scoped := map[string]uint64{}
	for _, c := range s.Changes {
		bit := uint64(1) << c.Type.Order
		if c.Scope == store.DefaultScope || strings.HasPrefix(c.Scope, resource.ReservedScopePrefix) {
			all |= bit
		} else {
			scoped[c.Scope] |= bit
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if all == 0 && !sweep {
		// Only the changed scopes' interests can be concerned.
		for scope, bits := range scoped {
			for _, set := range r.byScope[scope] {
				for i := range set {
					if i.types.Load()&bits != 0 {
						fn(i, false)
					}
				}
			}
		}
		return
	}
	for scope, batches := range r.byScope {
		bits := all | scoped[scope]
		for _, set := range batches {
			for i := range set {
				switch {
				case i.types.Load()&bits != 0:
					fn(i, false)
				case sweep && i.at.Load() < s.Revision:
					fn(i, true)
				}
			}
		}
	}
}

package rollout_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// runningAt is the ids of the rollouts w knows running at rev, resolved
// from etcd if need be; ok false if the set at rev cannot be known.
func runningAt(t *testing.T, w *rollout.Watcher, rev int64) (ids []string, ok bool) {
	t.Helper()
	for range 2 {
		if set, known := w.At(rev); known {
			for _, r := range set.Running() {
				ids = append(ids, r.ID)
			}
			return ids, true
		}
		done, ok := w.Resolve(rev)
		if !ok {
			return nil, false
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the set at %d not resolved in 10s", rev)
		}
	}
	return nil, false
}

func sameIDs(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestWatcherAt: a watcher gives the set running at any revision, not
// only the latest: from its watch, else read from etcd at that revision
// (a rollout that ended since is running there); past etcd's
// compaction, with rollouts changed since, it says the set cannot be
// known.
func TestWatcherAt(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	base := e.Apply(t, []store.Put{cluster(t, "c1", 1000)})
	rs := e.RolloutStore()
	r1, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:a*", Puts: []store.Put{cluster(t, "c1", 2000)}})
	if err != nil {
		t.Fatal(err)
	}
	mid := e.Apply(t, []store.Put{cluster(t, "c9", 1000)})
	unasked := e.Apply(t, []store.Put{cluster(t, "c9", 1500)}) // asked for only once compacted
	if _, err := rs.Abort(ctx, r1.ID, "test"); err != nil {
		t.Fatal(err)
	}
	w := e.Rollouts(t)
	deadline := time.Now().Add(10 * time.Second)
	for w.Current().Revision <= mid && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	for _, c := range []struct {
		rev  int64
		want []string
	}{{base, nil}, {r1.Revision, []string{r1.ID}}, {mid, []string{r1.ID}}, {w.Current().Revision, nil}} {
		if got, ok := runningAt(t, w, c.rev); !ok || !sameIDs(got, c.want...) {
			t.Errorf("running at %d: %v (known %v), want %v", c.rev, got, ok, c.want)
		}
	}

	r2, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "10%", Puts: []store.Put{cluster(t, "c1", 3000)}})
	if err != nil {
		t.Fatal(err)
	}
	for w.Current().Revision < r2.Revision && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if set, ok := w.At(r2.Revision); !ok || len(set.Running()) != 1 || set.Running()[0].ID != r2.ID {
		t.Errorf("the watch did not give the set at %d, where %s began", r2.Revision, r2.ID)
	}
	later := e.Apply(t, []store.Put{cluster(t, "c8", 1000)}) // no rollout change: beyond the watch's last event
	if got, ok := runningAt(t, w, later); !ok || !sameIDs(got, r2.ID) {
		t.Errorf("running at %d, after the watch's last event: %v (known %v), want %s", later, got, ok, r2.ID)
	}

	if _, err := e.Client.Compact(ctx, later); err != nil {
		t.Fatal(err)
	}
	lost := unasked
	if got, ok := runningAt(t, w, lost); ok {
		t.Errorf("running at %d, past the compaction: %v, want unknown", lost, got)
	}
	if _, ok := w.Resolve(lost); ok {
		t.Errorf("Resolve(%d) after it was found lost: ok, want not", lost)
	}
}

// TestWatcherCatchingUp: a watch response carrying several rollout
// changes (a watch catching up) gives each revision between them the set
// running there: a rollout begun and aborted while the watch was behind
// is known running from its beginning to its end.
func TestWatcherCatchingUp(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{cluster(t, "c1", 1000)})
	w := rollout.NewWatcher(e.Client, keyspace.DefaultPrefix, func(ctx context.Context, rev int64) error {
		_, err := e.View.WaitRevision(ctx, rev)
		return err
	}, slog.New(slog.DiscardHandler))
	gate := make(chan struct{})
	rollout.DelayWatch(w, gate)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(rctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for w.Current().Revision == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	rs := e.RolloutStore()
	r1, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:a*", Puts: []store.Put{cluster(t, "c1", 2000)}})
	if err != nil {
		t.Fatal(err)
	}
	mid := e.Apply(t, []store.Put{cluster(t, "c9", 1000)})
	if _, err := rs.Abort(ctx, r1.ID, "test"); err != nil {
		t.Fatal(err)
	}
	rec, err := e.Client.Get(ctx, keyspace.Rollouts.Key(keyspace.DefaultPrefix, r1.ID))
	if err != nil || len(rec.Kvs) != 1 {
		t.Fatalf("the record of %s: %v", r1.ID, err)
	}
	ended := rec.Kvs[0].ModRevision
	close(gate)
	for w.Current().Revision < ended && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []struct {
		rev  int64
		want []string
	}{{r1.Revision, []string{r1.ID}}, {mid, []string{r1.ID}}, {ended, nil}} {
		set, ok := w.At(c.rev)
		if !ok {
			t.Errorf("the set at %d not known from the watch", c.rev)
			continue
		}
		var got []string
		for _, r := range set.Running() {
			got = append(got, r.ID)
		}
		if !sameIDs(got, c.want...) {
			t.Errorf("running at %d: %v, want %v", c.rev, got, c.want)
		}
	}
}

package rollout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

func cluster(t *testing.T, name string, ms int64) store.Put {
	return xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster(name, ms))
}

// TestBeginRecordsRollout: a rollout is written with its record, its
// overlay and a history record of kind rollout, in one transaction; it
// names only what it changes, each with its revision from before.
func TestBeginRecordsRollout(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	before := e.Apply(t, []store.Put{cluster(t, "c1", 1000), cluster(t, "c2", 1000)})
	rs := e.RolloutStore()
	r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "10%", Bake: 5 * time.Second, MaxRejections: 2,
		Message: "faster c1", Puts: []store.Put{cluster(t, "c1", 2000), cluster(t, "c2", 1000), cluster(t, "c3", 1000)}})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := rs.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != rollout.Running || got.Promote != rollout.PromoteAuto || got.Revision != r.Revision || got.By != "test" ||
		time.Duration(got.Bake) != 5*time.Second || got.MaxRejections != 2 || got.Message != "faster c1" {
		t.Errorf("record %+v", got)
	}
	want := []rollout.Target{{Type: "cluster", Name: "c1", Base: before}, {Type: "cluster", Name: "c3", Base: 0}}
	if len(got.Resources) != 2 || got.Resources[0] != want[0] || got.Resources[1] != want[1] {
		t.Errorf("resources %+v, want %+v (c2 is unchanged)", got.Resources, want)
	}
	over, err := e.Store.List(ctx, store.ListOptions{Type: resource.Cluster, Scope: r.Overlay()})
	if err != nil || len(over.Resources) != 2 || over.Resources[0].ModRevision != r.Revision {
		t.Fatalf("overlay: %v, %+v", err, over)
	}
	cur, _, err := e.Store.Get(ctx, xdstest.Key(resource.Cluster, "c1"), 0)
	if err != nil || cur.ModRevision != before {
		t.Errorf("c1 in the default scope moved to %d (%v): a rollout writes only its overlay", cur.ModRevision, err)
	}
	h, _, err := e.Store.History(ctx, 1)
	if err != nil || len(h) != 1 || h[0].ID != r.ID || h[0].Kind != rollout.KindRollout || h[0].Revision != r.Revision {
		t.Errorf("history %+v, %v: want the rollout's record", h, err)
	}
}

// TestBeginRefuses: a rollout that changes nothing, one of a resource a
// running rollout changes, and bad selectors are refused, writing
// nothing.
func TestBeginRefuses(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{cluster(t, "c1", 1000)})
	rs := e.RolloutStore()
	first, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "node:a*", Puts: []store.Put{cluster(t, "c1", 2000)}})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		req  rollout.Start
		want string
	}{
		"same":        {rollout.Start{Scope: store.DefaultScope, Selector: "5%", Puts: []store.Put{cluster(t, "c1", 3000)}}, "is in rollout " + first.ID},
		"selector":    {rollout.Start{Scope: store.DefaultScope, Selector: "half", Puts: []store.Put{cluster(t, "c9", 1)}}, `selector "half"`},
		"promote":     {rollout.Start{Scope: store.DefaultScope, Selector: "5%", Promote: "later", Puts: []store.Put{cluster(t, "c9", 1)}}, `unknown promote mode "later"`},
		"nothing new": {rollout.Start{Scope: store.DefaultScope, Selector: "5%", Puts: []store.Put{cluster(t, "c1", 1000)}}, "nothing to roll out"},
	} {
		_, err := rs.Begin(ctx, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	all, _, err := rs.List(ctx)
	if err != nil || len(all) != 1 {
		t.Errorf("%d rollouts (%v), want the first alone", len(all), err)
	}
}

// TestPromoteAndAbort: promoting writes the rollout's resources to its
// scope as one apply of kind promote and removes its overlay; aborting
// removes the overlay alone; an ended rollout, or an unknown id, is
// refused; promoting over a change made to the scope since the rollout
// began is refused and writes nothing.
func TestPromoteAndAbort(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{cluster(t, "c1", 1000), cluster(t, "c2", 1000)})
	rs := e.RolloutStore()
	begin := func(p store.Put) *rollout.Rollout {
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "5%", Puts: []store.Put{p}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// overlayLen counts r's overlay resources and its apply marker.
	overlayLen := func(r *rollout.Rollout) int {
		l, err := e.Store.List(ctx, store.ListOptions{Type: resource.Cluster, Scope: r.Overlay()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Client.Get(ctx, store.ApplyMarkerKey(keyspace.DefaultPrefix, r.Overlay()))
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Resources) + len(m.Kvs)
	}

	p := begin(cluster(t, "c1", 2000))
	got, err := rs.Promote(ctx, p.ID, "baked")
	if err != nil {
		t.Fatal(err)
	}
	cur, _, _ := e.Store.Get(ctx, xdstest.Key(resource.Cluster, "c1"), 0)
	if xdstest.ConnectTimeoutMS(t, cur.Envelope.GetBody()) != 2000 || overlayLen(p) != 0 || got.State != rollout.Promoted || got.Reason != "baked" {
		t.Errorf("promoted: c1 %v, overlay %d, record %+v", cur.Envelope.GetBody(), overlayLen(p), got)
	}
	h, _, _ := e.Store.History(ctx, 1)
	if len(h) != 1 || h[0].ID != got.PromotedBy || h[0].Kind != rollout.KindPromote || len(h[0].Changes) != 1 {
		t.Errorf("history %+v: want the promotion, an apply changing c1", h)
	}

	a := begin(cluster(t, "c1", 3000))
	if _, err := rs.Abort(ctx, a.ID, "too slow"); err != nil {
		t.Fatal(err)
	}
	cur, _, _ = e.Store.Get(ctx, xdstest.Key(resource.Cluster, "c1"), 0)
	if xdstest.ConnectTimeoutMS(t, cur.Envelope.GetBody()) != 2000 || overlayLen(a) != 0 {
		t.Errorf("aborted: c1 changed, or overlay left (%d)", overlayLen(a))
	}
	for _, err := range []error{first(rs.Abort(ctx, a.ID, "x")), first(rs.Promote(ctx, a.ID, "x"))} {
		if !errors.Is(err, rollout.ErrEnded) || !strings.Contains(err.Error(), "aborted (too slow)") {
			t.Errorf("ending an aborted rollout: %v", err)
		}
	}
	if _, err := rs.Abort(ctx, "20260101-000000.000000-abcdef", "x"); !errors.Is(err, rollout.ErrNotFound) {
		t.Errorf("abort an unknown rollout: %v", err)
	}

	c := begin(cluster(t, "c2", 4000))
	changed := e.Apply(t, []store.Put{cluster(t, "c2", 5000)})
	if _, err := rs.Promote(ctx, c.ID, "baked"); err == nil || !strings.Contains(err.Error(), "changed since the rollout began") {
		t.Errorf("promote over a later change: %v", err)
	}
	cur, _, _ = e.Store.Get(ctx, xdstest.Key(resource.Cluster, "c2"), 0)
	if cur.ModRevision != changed || overlayLen(c) != 2 {
		t.Errorf("a refused promotion wrote something: c2 at %d (want %d), overlay and marker %d", cur.ModRevision, changed, overlayLen(c))
	}
}

func first[T any](_ T, err error) error { return err }

// TestUndoRollout: the history record that began a rollout, or aborted
// one, cannot be undone as an apply (the error says what to do); that
// of its promotion can, as any apply.
func TestUndoRollout(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	e.Apply(t, []store.Put{cluster(t, "c1", 1000)})
	rs := e.RolloutStore()
	begin := func() *rollout.Rollout {
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "5%", Puts: []store.Put{cluster(t, "c1", 2000)}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := begin()
	if _, err := rs.Abort(ctx, a.ID, "no"); err != nil {
		t.Fatal(err)
	}
	p := begin()
	promoted, err := rs.Promote(ctx, p.ID, "yes")
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := e.Store.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var abortID string
	for _, r := range h {
		if r.Kind == rollout.KindAbort {
			abortID = r.ID
		}
	}
	for id, want := range map[string]string{a.ID: "rollout abort " + a.ID, abortID: "aborted a canary rollout"} {
		if _, err := e.Store.UndoOf(ctx, h, id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("undo %s: %v, want an error saying %q", id, err, want)
		}
	}
	u, err := e.Store.UndoOf(ctx, h, promoted.PromotedBy)
	if err != nil || len(u.Request.Puts) != 1 || xdstest.ConnectTimeoutMS(t, u.Request.Puts[0].Body) != 1000 {
		t.Errorf("undo the promotion: %+v, %v; want c1 back at 1000 ms", u, err)
	}
}

// TestEndedRolloutsPruned: each rollout begun deletes the oldest ended
// ones beyond rollout.KeepEnded, so the directory stays bounded; running
// ones are never pruned.
func TestEndedRolloutsPruned(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	ctx := testbase.Context(t)
	rs := e.RolloutStore()
	begin := func(i int) *rollout.Rollout {
		r, err := rs.Begin(ctx, rollout.Start{Scope: store.DefaultScope, Selector: "5%", Puts: []store.Put{cluster(t, "c1", int64(1000+i))}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var first *rollout.Rollout
	for i := range rollout.KeepEnded + 2 {
		r := begin(i)
		if i == 0 {
			first = r
		}
		if _, err := rs.Abort(ctx, r.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	running := begin(rollout.KeepEnded + 2)
	all, _, err := rs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != rollout.KeepEnded {
		t.Errorf("%d rollouts kept, want %d (the newest ended ones and the running one)", len(all), rollout.KeepEnded)
	}
	if all[0].ID == first.ID || all[len(all)-1].ID != running.ID {
		t.Errorf("kept %s .. %s; want the oldest pruned and the running one kept", all[0].ID, all[len(all)-1].ID)
	}
}

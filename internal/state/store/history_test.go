package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// applyWith plans req and applies it with opts.
func applyWith(t *testing.T, s *store.Store, req store.PlanRequest, opts store.ApplyOptions) *store.ApplyResult {
	t.Helper()
	res, err := s.Apply(testbase.Context(t), mustPlan(t, s, req), opts)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// history reads s's whole history.
func history(t *testing.T, s *store.Store) []store.HistoryRecord {
	t.Helper()
	h, bad, err := s.History(testbase.Context(t), 0)
	if err != nil || len(bad) != 0 {
		t.Fatalf("History: %v, %d malformed", err, len(bad))
	}
	return h
}

// TestHistoryRecordsApplies: every apply leaves a record, at the revision
// of its transaction, with its id, kind, author, message and what it
// created, changed and deleted, each changed or deleted resource with
// its body from before; newest first.
func TestHistoryRecordsApplies(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/hist/", nil)
	v1 := put(t, resource.Cluster, "default", "c1", 1)
	first := applyWith(t, s, store.PlanRequest{Puts: []store.Put{v1, put(t, resource.Cluster, "default", "c2", 1)}},
		store.ApplyOptions{Message: "two clusters"})
	second := applyWith(t, s, store.PlanRequest{
		Puts:    []store.Put{put(t, resource.Cluster, "default", "c1", 2)},
		Deletes: []store.Key{key(resource.Cluster, "default", "c2")},
	}, store.ApplyOptions{Kind: store.KindDelete, Message: "c1 faster, c2 gone", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})

	h := history(t, s)
	if len(h) != 2 {
		t.Fatalf("%d records, want 2", len(h))
	}
	newest, oldest := h[0], h[1]
	if newest.ID != second.ID() || oldest.ID != first.ID() || newest.ID == oldest.ID {
		t.Errorf("ids %q, %q; want the applies' %q, %q, newest first", newest.ID, oldest.ID, second.ID(), first.ID())
	}
	if newest.Revision != second.Revision || oldest.Revision != first.Revision {
		t.Errorf("revisions %d, %d; want the applies' %d, %d", newest.Revision, oldest.Revision, second.Revision, first.Revision)
	}
	if oldest.Kind != store.KindApply || newest.Kind != store.KindDelete || newest.By != "store-test" ||
		newest.Message != "c1 faster, c2 gone" || !strings.HasPrefix(newest.Traceparent, "00-0af7") || newest.Part != 1 || newest.Parts != 1 {
		t.Errorf("newest record %+v: want kind delete, by store-test, the message and trace, part 1 of 1", newest)
	}
	if !newest.Undo || newest.Omitted != 0 {
		t.Errorf("undo %v, omitted %d; want every body kept", newest.Undo, newest.Omitted)
	}
	got := map[string]string{}
	for _, ch := range newest.Changes {
		got[ch.Name] = ch.Action
	}
	if diff := cmp.Diff(map[string]string{"c1": "changed", "c2": "deleted"}, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	for _, ch := range oldest.Changes {
		if ch.Action != "created" || ch.Before != nil || ch.BeforeRevision != 0 {
			t.Errorf("first apply: %+v, want a creation without a body from before", ch)
		}
	}
	c1 := newest.Changes[0]
	var before anypb.Any
	if err := proto.Unmarshal(c1.Before, &before); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(v1.Body, &before, protocmp.Transform()); diff != "" || c1.BeforeRevision != first.Revision {
		t.Errorf("c1 before: revision %d (want %d), body (-want +got):\n%s", c1.BeforeRevision, first.Revision, diff)
	}
}

// TestHistoryKeep: the history keeps the HistoryKeep newest records; each
// apply deletes the older ones in its own transaction.
func TestHistoryKeep(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/keep/", func(cfg *store.Config) { cfg.HistoryKeep = 3 })
	var ids []string
	for v := range 5 {
		ids = append(ids, mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "c", v)}}).ID())
	}
	h := history(t, s)
	var got []string
	for _, r := range h {
		got = append(got, r.ID)
	}
	if want := []string{ids[4], ids[3], ids[2]}; !cmp.Equal(want, got) {
		t.Errorf("history %v, want the 3 newest %v", got, want)
	}
	if n := countKeys(t, c, keyspace.History.Prefix("/keep/")); n != 3 {
		t.Errorf("%d history keys in etcd, want 3", n)
	}
	if h, _, err := s.History(testbase.Context(t), 2); err != nil || len(h) != 2 || h[0].ID != ids[4] {
		t.Errorf("History(limit 2): %d records, %v; want the 2 newest", len(h), err)
	}
}

// TestHistorySurvivesCompaction: once etcd compacted the revisions before
// an apply, its record still holds what it replaced.
func TestHistorySurvivesCompaction(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/compact/", nil)
	v1 := put(t, resource.Route, "default", "r", 1)
	mustApply(t, s, store.PlanRequest{Puts: []store.Put{v1}})
	second := mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Route, "default", "r", 2)}})
	if _, err := c.Compact(testbase.Context(t), second.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(testbase.Context(t), "/compact/", clientv3.WithRev(second.Revision-1)); err == nil {
		t.Fatal("etcd still reads the revision before the second apply")
	}
	h := history(t, s)
	var before anypb.Any
	if err := proto.Unmarshal(h[0].Changes[0].Before, &before); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(v1.Body, &before) {
		t.Errorf("after compaction, the record's body from before is not the first apply's")
	}
}

// TestHistoryBounded: a record never takes a transaction past etcd's
// --max-request-bytes: past its room it drops the bodies from before
// (Undo false), then the changes it has no room for (Omitted); a chunked
// apply leaves one record per transaction, sharing the apply's id.
func TestHistoryBounded(t *testing.T) {
	const maxBytes = 16 << 10
	e := storetest.Start(t, storetest.Options{MaxRequestBytes: maxBytes})
	c := e.Client(t)
	s := newTestStore(t, c, "/bounded/", func(cfg *store.Config) { cfg.MaxRequestBytes = maxBytes })
	var big []store.Put
	for _, name := range []string{"a", "b", "c", "d"} {
		big = append(big, store.Put{Key: key(resource.Listener, "default", name), Body: body(t, resource.Listener, name, 1, 3000)})
	}
	mustApply(t, s, store.PlanRequest{Puts: big})
	for i := range big {
		big[i].Body = body(t, resource.Listener, big[i].Name, 2, 3000)
	}
	res := applyWith(t, s, store.PlanRequest{Puts: big}, store.ApplyOptions{})
	h := history(t, s)
	if h[0].ID != res.ID() || h[0].Undo || len(h[0].Changes) != 4 || h[0].Changes[0].Before != nil {
		t.Errorf("record of 4 changed 3 KB listeners under a 16 KiB request: undo %v, %d changes; want the changes without their bodies", h[0].Undo, len(h[0].Changes))
	}

	var many []store.Put
	for i := range 400 {
		many = append(many, put(t, resource.Cluster, "default", strings.Repeat("n", 60)+string(rune('a'+i%26))+strings.Repeat("z", i/26), 1))
	}
	res = applyWith(t, s, store.PlanRequest{Puts: many}, store.ApplyOptions{Chunked: true})
	h = history(t, s)
	parts := 0
	listed, omitted := 0, 0
	for _, r := range h {
		if r.ID != res.ID() {
			continue
		}
		parts++
		listed += len(r.Changes)
		omitted += r.Omitted
		if r.Parts != len(res.Revisions) {
			t.Errorf("record part %d of %d, want of %d", r.Part, r.Parts, len(res.Revisions))
		}
		b, _ := json.Marshal(r)
		if len(b) > maxBytes {
			t.Errorf("record part %d is %d bytes, above the request limit", r.Part, len(b))
		}
	}
	if parts != len(res.Revisions) || parts < 2 || listed+omitted != 400 {
		t.Errorf("%d records for %d transactions, %d changes listed and %d omitted; want one record a transaction, 400 changes in all", parts, len(res.Revisions), listed, omitted)
	}
}

// TestUndoOf: undoing an apply puts back each body from before and
// deletes what it created, expecting each resource at the apply's
// revision; a record without the bodies (no room) takes them from etcd's
// history while etcd holds it, and says so once it does not; an id the
// history does not hold is ErrNotInHistory.
func TestUndoOf(t *testing.T) {
	const maxBytes = 16 << 10
	e := storetest.Start(t, storetest.Options{MaxRequestBytes: maxBytes})
	c := e.Client(t)
	ctx := testbase.Context(t)
	s := newTestStore(t, c, "/undo/", func(cfg *store.Config) { cfg.MaxRequestBytes = maxBytes })
	big := func(name string, v int) store.Put {
		return store.Put{Key: key(resource.Listener, "default", name), Body: body(t, resource.Listener, name, v, 3000)}
	}
	first := []store.Put{big("a", 1), big("b", 1), big("c", 1), big("d", 1)}
	mustApply(t, s, store.PlanRequest{Puts: first})
	second := mustApply(t, s, store.PlanRequest{
		Puts:    []store.Put{big("a", 2), big("b", 2), big("c", 2), big("e", 1)},
		Deletes: []store.Key{key(resource.Listener, "default", "d")},
	})
	h := history(t, s)
	if h[0].Undo {
		t.Fatal("the second apply's record kept its bodies: the test needs one without")
	}
	u, err := s.UndoOf(ctx, h, second.ID())
	if err != nil {
		t.Fatalf("UndoOf: %v", err)
	}
	if u.Scope != "default" || u.Revision != second.Revision || len(u.Request.Deletes) != 1 || u.Request.Deletes[0].Name != "e" {
		t.Errorf("undo: scope %q, revision %d, deletes %v; want default, %d, e", u.Scope, u.Revision, u.Request.Deletes, second.Revision)
	}
	for _, p := range u.Request.Puts {
		want := first[p.Name[0]-'a'].Body
		if !proto.Equal(want, p.Body) {
			t.Errorf("undo puts %s back to another body than the first apply's", p.Name)
		}
		if exp := u.Expect[p.Key]; (p.Name == "d") != (exp == 0) || (exp != 0 && exp != second.Revision) {
			t.Errorf("undo expects %s at revision %d", p.Name, exp)
		}
	}
	if len(u.Request.Puts) != 4 {
		t.Errorf("undo puts %d resources back, want a, b, c and d", len(u.Request.Puts))
	}

	if _, err := c.Compact(ctx, second.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UndoOf(ctx, h, second.ID()); err == nil || !strings.Contains(err.Error(), "no body from before") || !strings.Contains(err.Error(), "revision compacted") {
		t.Errorf("UndoOf once etcd compacted the bodies the record lacks: %v", err)
	}
	if _, err := s.UndoOf(ctx, h, "20200101-000000.000000-000000"); !errors.Is(err, store.ErrNotInHistory) {
		t.Errorf("UndoOf of an unknown id: %v, want ErrNotInHistory", err)
	}
}

// TestHistoryMalformed: a history value that does not decode, or lacks
// what readers rely on (written by another tool), is skipped and
// reported with its key; the others are read.
func TestHistoryMalformed(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/malformed-history/", nil)
	res := mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "c", 1)}})
	for k, v := range map[string]string{
		"zz-not-json/0001": "{",
		"zz-no-part/0001":  `{"id":"x","kind":"apply"}`,
		"zz-bad-kind/0001": `{"id":"x","part":1,"parts":1,"kind":"delete-all"}`,
	} {
		if _, err := c.Put(testbase.Context(t), keyspace.History.Key("/malformed-history/", k), v); err != nil {
			t.Fatal(err)
		}
	}
	h, bad, err := s.History(testbase.Context(t), 0)
	if err != nil || len(h) != 1 || h[0].ID != res.ID() || len(bad) != 3 {
		t.Fatalf("History: %d records, %d malformed, %v; want the apply's and 3 malformed", len(h), len(bad), err)
	}
	for _, b := range bad {
		if !errors.Is(b.Err, store.ErrMalformed) || !strings.Contains(b.EtcdKey, "/history/zz-") {
			t.Errorf("malformed %s: %v", b.EtcdKey, b.Err)
		}
	}
}

// FuzzParseHistoryRecord: any value decodes to a record readers may use
// (an id, a part within its parts, a known kind, complete changes) or to
// ErrMalformed, never a panic.
func FuzzParseHistoryRecord(f *testing.F) {
	f.Add([]byte(`{"id":"20261128-140312.512345-3f2a9c","part":1,"parts":1,"kind":"apply","by":"x","at":"2026-11-28T14:03:12Z","changes":[{"type":"cluster","scope":"default","name":"a","action":"changed","before":"CgA="}],"undo":true}`))
	f.Add([]byte(`{"id":"x","part":2,"parts":1,"kind":"rollback"}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := store.ParseHistoryRecord(b)
		if err != nil {
			if !errors.Is(err, store.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if h.ID == "" || h.Part < 1 || h.Part > h.Parts {
			t.Fatalf("accepted a record readers cannot use: %+v", h)
		}
	})
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// regInput is one apply as a register-map operation: the values it writes
// to its declared keys, and, for a prune, that every other key of the
// scope is deleted.
type regInput struct {
	writes map[string]int
	prune  bool
}

// regOutput is what the apply's plan read: the value of every key it
// declared or could prune (absent: -1), as it planned against them.
type regOutput struct {
	reads map[string]int
}

const absent = -1

// registerModel is a map of key -> value where an apply reads all its
// declared keys and writes them atomically.
func registerModel(keys []string) porcupine.Model {
	return porcupine.Model{
		Init: func() any {
			m := map[string]int{}
			for _, k := range keys {
				m[k] = absent
			}
			return m
		},
		Step: func(state, in, out any) (bool, any) {
			st, i, o := state.(map[string]int), in.(regInput), out.(regOutput)
			for k, v := range o.reads {
				if st[k] != v {
					return false, state
				}
			}
			next := maps.Clone(st)
			if i.prune {
				for _, k := range keys {
					next[k] = absent
				}
			}
			maps.Copy(next, i.writes)
			return true, next
		},
		Equal: func(a, b any) bool { return maps.Equal(a.(map[string]int), b.(map[string]int)) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(regInput), out.(regOutput)
			return fmt.Sprintf("read %v, write %v (prune %v)", o.reads, i.writes, i.prune)
		},
	}
}

// valueOf decodes the register value a test cluster carries (see body).
func valueOf(t *testing.T, r *store.Resource) int {
	t.Helper()
	if r == nil {
		return absent
	}
	m, err := resource.Unmarshal(resource.Cluster, r.Envelope.GetBody().GetValue())
	if err != nil {
		t.Fatalf("decode %s: %v", r.Key, err)
	}
	return int(m.(*clusterv3.Cluster).GetConnectTimeout().AsDuration()/time.Millisecond) - 1
}

// TestApplySerializable: four appliers run 1,000 applies in all (250 with
// the lock, where each waits its turn and fsyncs bound the pace) over six
// keys of one scope, each declaring two or three of them with values from
// a small set (so declared keys are often unchanged), one in four pruning
// the rest of the scope. Each apply's history entry is what its plan read
// of the declared (and prunable) keys and what it wrote; porcupine checks
// that the history is linearizable as a register map: no apply committed
// on a plan another had made stale, unchanged keys included. Without the
// scope's apply lock the appliers race and the compares refuse the stale
// plans; with it (as xdsadmin apply and delete take it) they serialize and
// none gives up.
func TestApplySerializable(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	t.Run("compares only", func(t *testing.T) {
		testApplySerializable(t, newTestStore(t, c, "/serial/", nil), false, 1000)
	})
	t.Run("with the scope lock", func(t *testing.T) {
		testApplySerializable(t, newTestStore(t, c, "/serial-locked/", nil), true, 250)
	})
}

func testApplySerializable(t *testing.T, s *store.Store, lock bool, total int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const (
		appliers = 4
		attempts = 3
	)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }

	var (
		mu        sync.Mutex
		history   []porcupine.Operation
		conflicts int
		failed    int
	)
	var wg sync.WaitGroup
	for a := range appliers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(a), 14))
			for range total / appliers {
				in := regInput{writes: map[string]int{}, prune: rng.IntN(4) == 0}
				req := store.PlanRequest{}
				for _, i := range rng.Perm(len(keys))[:2+rng.IntN(2)] {
					v := rng.IntN(3)
					in.writes[keys[i]] = v
					req.Puts = append(req.Puts, store.Put{Key: key(resource.Cluster, "default", keys[i]), Body: body(t, resource.Cluster, keys[i], v, 0)})
				}
				if in.prune {
					req.Prune, req.PruneScope, req.PruneTypes = true, "default", []*resource.Type{resource.Cluster}
				}
				call := now()
				var out *regOutput
				var held *store.ScopeLock
				if lock {
					var err error
					if held, err = s.LockScope(ctx, "default", 30*time.Second); err != nil {
						t.Errorf("lock: %v", err)
						return
					}
				}
				for range attempts {
					plan, err := s.MakePlan(ctx, req)
					if err != nil {
						t.Errorf("plan: %v", err)
						return
					}
					_, err = s.Apply(ctx, plan, store.ApplyOptions{})
					if errors.Is(err, store.ErrConflict) {
						mu.Lock()
						conflicts++
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Errorf("apply: %v", err)
						return
					}
					out = &regOutput{reads: map[string]int{}}
					if in.prune {
						// A prune read the whole scope: what it did not
						// see was absent.
						for _, k := range keys {
							out.reads[k] = absent
						}
					}
					for _, ch := range plan.Changes {
						out.reads[ch.Name] = valueOf(t, ch.Old)
					}
					break
				}
				if held != nil {
					if err := held.Unlock(ctx); err != nil {
						t.Errorf("unlock: %v", err)
						return
					}
				}
				ret := now()
				mu.Lock()
				if out == nil {
					// Every attempt conflicted: nothing was written, so the
					// apply is not part of the history.
					failed++
				} else {
					history = append(history, porcupine.Operation{ClientId: a, Input: in, Call: call, Output: *out, Return: ret})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d applies committed or found nothing to do, %d gave up after %d conflicts; %d conflicts in all; %s",
		len(history), failed, attempts, conflicts, time.Since(start).Round(time.Millisecond))
	switch {
	case !lock && conflicts == 0:
		t.Fatal("no apply conflicted: the test did not race the appliers")
	case !lock && len(history) < total/2:
		t.Fatalf("only %d of %d applies succeeded", len(history), total)
	case lock && failed > total/100:
		t.Fatalf("%d of %d applies gave up under the lock, want at most 1%%", failed, total)
	}
	// The state etcd ends in is part of the history: a last read of every
	// key, after all the applies.
	call := now()
	lr, err := s.List(ctx, store.ListOptions{Type: resource.Cluster, Scope: "default"})
	if err != nil {
		t.Fatal(err)
	}
	last := regOutput{reads: map[string]int{}}
	for _, k := range keys {
		last.reads[k] = absent
	}
	for _, r := range lr.Resources {
		last.reads[r.Name] = valueOf(t, r)
	}
	history = append(history, porcupine.Operation{ClientId: appliers, Input: regInput{}, Call: call, Output: last, Return: now()})

	res, info := porcupine.CheckOperationsVerbose(registerModel(keys), history, 10*time.Second)
	if res != porcupine.Ok {
		var b strings.Builder
		for _, part := range info.PartialLinearizationsOperations() {
			var longest []porcupine.Operation
			for _, lin := range part {
				if len(lin) > len(longest) {
					longest = lin
				}
			}
			fmt.Fprintf(&b, "longest linearizable prefix: %d operations\n", len(longest))
			for _, op := range longest[max(0, len(longest)-3):] {
				fmt.Fprintf(&b, "  applier %d: %s\n", op.ClientId, registerModel(keys).DescribeOperation(op.Input, op.Output))
			}
		}
		t.Fatalf("the history of %d applies is not linearizable (%s):\n%s", len(history), res, b.String())
	}
}

// TestApplyDeclaredSet: an apply's transaction compares the (type, scope)
// directories it declares keys in or prunes, and its scope's apply marker,
// so that a plan made stale by another writer commits nothing, whether the
// writer changed, created or deleted a key, unchanged ones included.
func TestApplyDeclaredSet(t *testing.T) {
	e := storetest.Start(t, storetest.Options{MaxTxnOps: 8})
	c := e.Client(t)
	ctx := testbase.Context(t)
	n := 0
	newStore := func(t *testing.T) *store.Store {
		n++
		return newTestStore(t, c, fmt.Sprintf("/declared%d/", n), func(cfg *store.Config) { cfg.MaxTxnOps = 8 })
	}
	put := func(typ *resource.Type, name string, v int) store.Put {
		return store.Put{Key: key(typ, "default", name), Body: body(t, typ, name, v, 0)}
	}
	apply := func(t *testing.T, s *store.Store, req store.PlanRequest) {
		t.Helper()
		plan, err := s.MakePlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	values := func(t *testing.T, s *store.Store) map[string]int {
		t.Helper()
		lr, err := s.List(ctx, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range lr.Resources {
			if r.Type == resource.Cluster {
				out[r.Name] = valueOf(t, r)
			} else {
				out[r.Type.Name+"/"+r.Name] = 0
			}
		}
		return out
	}
	x0y0 := store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "x", 0), put(resource.Cluster, "y", 0)}}
	// A declares x unchanged and y changed.
	planA := func(t *testing.T, s *store.Store, prune bool) *store.Plan {
		t.Helper()
		req := store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "x", 0), put(resource.Cluster, "y", 1)}}
		if prune {
			req.Prune, req.PruneScope, req.PruneTypes = true, "default", []*resource.Type{resource.Cluster}
		}
		plan, err := s.MakePlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Changes[0].Action != store.Unchanged || plan.Changes[1].Action != store.Update {
			t.Fatalf("A's plan: %v, %v", plan.Changes[0].Action, plan.Changes[1].Action)
		}
		return plan
	}

	for _, tc := range []struct {
		name  string
		prune bool
		// b is what another writer does between A's plan and commit.
		b        store.PlanRequest
		conflict bool
		want     map[string]int
	}{
		{
			name:     "an unchanged key changed",
			b:        store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "x", 2)}},
			conflict: true,
			want:     map[string]int{"x": 2, "y": 0},
		},
		{
			name:     "an unchanged key deleted",
			b:        store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "default", "x")}},
			conflict: true,
			want:     map[string]int{"y": 0},
		},
		{
			name:     "a key created where A prunes",
			prune:    true,
			b:        store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "z", 0)}},
			conflict: true,
			want:     map[string]int{"x": 0, "y": 0, "z": 0},
		},
		{
			// Stricter than the declared set: a directory A declares a key
			// in moved.
			name:     "a key A does not declare, in a type and scope it does",
			b:        store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "z", 0)}},
			conflict: true,
			want:     map[string]int{"x": 0, "y": 0, "z": 0},
		},
		{
			// Stricter still: the scope's apply marker moved.
			name:     "a key of a type A does not prune, in its scope",
			prune:    true,
			b:        store.PlanRequest{Puts: []store.Put{put(resource.Listener, "z", 0)}},
			conflict: true,
			want:     map[string]int{"x": 0, "y": 0, "listener/z": 0},
		},
		{
			name:  "a key in another scope",
			prune: true,
			b:     store.PlanRequest{Puts: []store.Put{{Key: key(resource.Cluster, "other", "z"), Body: body(t, resource.Cluster, "z", 0, 0)}}},
			want:  map[string]int{"x": 0, "y": 1, "z": 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			apply(t, s, x0y0)
			plan := planA(t, s, tc.prune)
			apply(t, s, tc.b)
			_, err := s.Apply(ctx, plan, store.ApplyOptions{})
			if got := errors.Is(err, store.ErrConflict); got != tc.conflict || (!tc.conflict && err != nil) {
				t.Errorf("A's apply: %v, want a conflict: %v", err, tc.conflict)
			}
			if diff := cmp.Diff(tc.want, values(t, s)); diff != "" {
				t.Errorf("etcd after A (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("prune by type", func(t *testing.T) {
		s := newStore(t)
		apply(t, s, store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "x", 0), put(resource.Cluster, "y", 0), put(resource.Listener, "l", 0)}})
		plan, err := s.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{put(resource.Cluster, "x", 0)}, Prune: true, PruneScope: "default", PruneTypes: []*resource.Type{resource.Cluster}})
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.PruneDirs(); len(got) != 1 || got[0].Type != resource.Cluster || got[0].Scope != "default" {
			t.Errorf("PruneDirs: %v", got)
		}
		if _, err := s.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]int{"x": 0, "listener/l": 0}, values(t, s)); diff != "" {
			t.Errorf("after pruning clusters (-want +got):\n%s", diff)
		}
	})

	t.Run("unchanged keys do not count against --max-txn-ops", func(t *testing.T) {
		s := newStore(t)
		var req store.PlanRequest
		for i := range 9 {
			req.Puts = append(req.Puts, put(resource.Cluster, fmt.Sprintf("c%d", i), 0))
		}
		// 5 writes, the marker and the history's 2 operations: 8.
		apply(t, s, store.PlanRequest{Puts: req.Puts[:5]})
		apply(t, s, store.PlanRequest{Puts: req.Puts[5:]})
		req.Puts[0] = put(resource.Cluster, "c0", 1)
		plan, err := s.MakePlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckLimits(plan, store.ApplyOptions{}); err != nil {
			t.Fatalf("CheckLimits: %v", err)
		}
		res, err := s.Apply(ctx, plan, store.ApplyOptions{})
		if err != nil || len(res.Revisions) != 1 {
			t.Fatalf("apply: %+v, %v; want one transaction", res, err)
		}
		if v := values(t, s)["c0"]; v != 1 {
			t.Errorf("c0 = %d after the apply", v)
		}
	})

	t.Run("a chunked apply of 12 writes goes in three transactions", func(t *testing.T) {
		s := newStore(t)
		var req store.PlanRequest
		for i := range 12 {
			req.Puts = append(req.Puts, put(resource.Cluster, fmt.Sprintf("c%d", i), 0))
		}
		plan, err := s.MakePlan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckLimits(plan, store.ApplyOptions{}); !errors.Is(err, store.ErrLimit) {
			t.Fatalf("CheckLimits: %v, want ErrLimit (12 writes, --max-txn-ops 8)", err)
		}
		// 5 writes a transaction: 8 operations less the marker and the
		// history's 2.
		res, err := s.Apply(ctx, plan, store.ApplyOptions{Chunked: true})
		if err != nil || len(res.Revisions) != 3 {
			t.Fatalf("chunked: %+v, %v; want three transactions", res, err)
		}
	})
}

// TestApplyManyDeclared: an apply declaring 500 resources, 3 of them
// changed, commits in one transaction against an etcd with the default
// --max-txn-ops (128): its compares count (type, scope) directories, not
// keys.
func TestApplyManyDeclared(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/many/", nil)
	ctx := testbase.Context(t)
	puts := func(changed map[int]bool) []store.Put {
		var out []store.Put
		for i := range 500 {
			typ := resource.Cluster
			if i%2 == 1 {
				typ = resource.Endpoint
			}
			v := 0
			if changed[i] {
				v = 1
			}
			name := fmt.Sprintf("r%03d", i)
			out = append(out, store.Put{Key: key(typ, "default", name), Body: body(t, typ, name, v, 0)})
		}
		return out
	}
	plan, err := s.MakePlan(ctx, store.PlanRequest{Puts: puts(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, plan, store.ApplyOptions{Chunked: true}); err != nil {
		t.Fatal(err)
	}

	plan, err = s.MakePlan(ctx, store.PlanRequest{Puts: puts(map[int]bool{7: true, 250: true, 499: true})})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[store.Action]int{}
	for _, ch := range plan.Changes {
		counts[ch.Action]++
	}
	if counts[store.Update] != 3 || counts[store.Unchanged] != 497 {
		t.Fatalf("plan: %v, want 3 changed and 497 unchanged", counts)
	}
	res, err := s.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply of 500 declared, 3 changed, unchunked: %v", err)
	}
	if len(res.Revisions) != 1 || res.Revision != plan.Revision+1 {
		t.Errorf("apply: revisions %v, want one, %d", res.Revisions, plan.Revision+1)
	}
	for _, name := range []string{"r007", "r499"} {
		r, _, err := s.Get(ctx, key(resource.Endpoint, "default", name), 0)
		if err != nil || r.ModRevision != res.Revision {
			t.Errorf("%s: %v, %v; want it written at %d", name, r, err, res.Revision)
		}
	}
	r, _, err := s.Get(ctx, key(resource.Cluster, "default", "r250"), 0)
	if err != nil || r.ModRevision != res.Revision {
		t.Errorf("r250: %v, %v; want it written at %d", r, err, res.Revision)
	}
	r, _, err = s.Get(ctx, key(resource.Cluster, "default", "r000"), 0)
	if err != nil || r.ModRevision == res.Revision {
		t.Errorf("r000: %v, %v; want it left as it was", r, err)
	}

	// The same plan again is stale: its directories moved.
	if _, err := s.Apply(ctx, plan, store.ApplyOptions{}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the stale plan applied again: %v, want ErrConflict", err)
	}
}

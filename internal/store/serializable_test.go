package store_test

import (
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

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
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

// TestApplySerializable: four appliers run 1,000 applies in all over six
// keys of one scope, each declaring two or three of them with values from
// a small set (so declared keys are often unchanged), one in four pruning
// the rest of the scope. Each apply's history entry is what its plan read
// of the declared (and prunable) keys and what it wrote; porcupine checks
// that the history is linearizable as a register map: no apply committed
// on a plan another had made stale, unchanged keys included.
func TestApplySerializable(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/serial/", nil)
	ctx := testCtx(t)

	const (
		appliers = 4
		total    = 1000
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
	if conflicts == 0 {
		t.Fatal("no apply conflicted: the test did not race the appliers")
	}
	if len(history) < total/2 {
		t.Fatalf("only %d of %d applies succeeded", len(history), total)
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
			for _, lin := range part {
				fmt.Fprintf(&b, "longest linearizable prefix: %d operations\n", len(lin))
				if n := len(lin); n > 0 {
					fmt.Fprintf(&b, "last: %v\n", lin[n-1])
				}
				break
			}
		}
		t.Fatalf("the history of %d applies is not linearizable (%s):\n%s", len(history), res, b.String())
	}
}

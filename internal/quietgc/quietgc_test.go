package quietgc

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDue: a collection is due once the heap is past the share of the way
// from the live heap to the goal.
func TestDue(t *testing.T) {
	c := New(Config{Share: 0.5})
	for _, tc := range []struct {
		h    Heap
		want bool
	}{
		{Heap{Live: 100, Goal: 200, InUse: 149}, false},
		{Heap{Live: 100, Goal: 200, InUse: 150}, true},
		{Heap{Live: 100, Goal: 200, InUse: 260}, true},
		{Heap{Live: 0, Goal: 4 << 20, InUse: 1 << 20}, false}, // before any collection
		{Heap{Live: 200, Goal: 200, InUse: 300}, false},       // no goal to speak of
	} {
		if got := c.Due(tc.h); got != tc.want {
			t.Errorf("Due(%+v) = %v, want %v", tc.h, got, tc.want)
		}
	}
	if h := readHeap(); h.Goal == 0 || h.InUse == 0 {
		t.Errorf("readHeap() = %+v: the runtime's figures are missing", h)
	}
}

// TestCollectIfDue: it collects, and counts, only when the heap is due;
// and, on the real runtime, a heap just collected is not due.
func TestCollectIfDue(t *testing.T) {
	collections := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	c := New(Config{Collections: collections})
	var h Heap
	gcs := 0
	c.heap, c.gc = func() Heap { return h }, func() { gcs++ }
	h = Heap{Live: 100, Goal: 200, InUse: 120}
	if c.CollectIfDue() || gcs != 0 {
		t.Fatalf("collected (%d) with the heap at %+v, not due", gcs, h)
	}
	h.InUse = 160
	if !c.CollectIfDue() || gcs != 1 {
		t.Fatalf("did not collect once (%d) with the heap at %+v, due", gcs, h)
	}
	var m dto.Metric
	if err := collections.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("collections counted %v, want 1", got)
	}
	onRuntime := New(Config{})
	runtime.GC()
	if onRuntime.CollectIfDue() {
		t.Error("a heap just collected was due")
	}
}

// TestRunCollectsInTheQuiet: after a change, the Collector waits while a
// stream is busy, collects once none has been for Quiet (the heap being
// due), and does not when the heap is not due or nothing changed.
func TestRunCollectsInTheQuiet(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	client := e.Client(t)
	st, err := store.New(store.Config{Client: client, MaxTxnOps: 128, MaxRequestBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	view, err := store.NewView(store.ViewConfig{Client: client, Registerer: prometheus.NewRegistry(), RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := view.Run(ctx); err != nil {
			t.Errorf("view: %v", err)
		}
	})

	busy := &Busy{}
	collections := prometheus.NewCounter(prometheus.CounterOpts{Name: "c", Help: "c"})
	c := New(Config{Busy: busy, Quiet: 100 * time.Millisecond, Collections: collections})
	var due atomic.Bool
	due.Store(true)
	var gcs atomic.Int64
	c.heap = func() Heap {
		if due.Load() {
			return Heap{Live: 100, Goal: 200, InUse: 190}
		}
		return Heap{Live: 100, Goal: 200, InUse: 110}
	}
	c.gc = func() { gcs.Add(1) }
	wg.Go(func() { c.Run(ctx, view) })
	<-view.Ready()

	apply := func(i int) {
		t.Helper()
		body, err := resource.Marshal(resource.Cluster, &clusterv3.Cluster{Name: "c", ConnectTimeout: durationpb.New(time.Duration(i+1) * time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}})
		if err != nil {
			t.Fatal(err)
		}
		plan, err := st.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{{Key: store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: "c"}, Body: body}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitGCs := func(want int64, within time.Duration) error {
		deadline := time.Now().Add(within)
		for gcs.Load() < want {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d collections after %s, want %d", gcs.Load(), within, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}

	// Nothing changed: nothing collected.
	time.Sleep(300 * time.Millisecond)
	if n := gcs.Load(); n != 0 {
		t.Fatalf("%d collections with no change", n)
	}
	// A change while a stream is busy: not until it is done.
	busy.Enter()
	apply(0)
	time.Sleep(500 * time.Millisecond)
	if n := gcs.Load(); n != 0 {
		t.Fatalf("collected while a stream was busy (%d)", n)
	}
	done := time.Now()
	busy.Leave()
	if err := waitGCs(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(done); d < 100*time.Millisecond {
		t.Errorf("collected %s after the stream was done, before the 100ms of quiet", d)
	}
	var m dto.Metric
	if err := collections.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("collections counter %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	// A change, the heap not due: no collection.
	due.Store(false)
	apply(1)
	time.Sleep(500 * time.Millisecond)
	if n := gcs.Load(); n != 1 {
		t.Fatalf("%d collections, want still 1: the heap was not due", n)
	}
	// Due again: the next change collects.
	due.Store(true)
	apply(2)
	if err := waitGCs(2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

package quietgc

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
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
	vw, err := view.New(view.Config{Client: client, Registerer: prometheus.NewRegistry(), RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := vw.Run(ctx); err != nil {
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
	wg.Go(func() { c.Run(ctx, vw) })
	<-vw.Ready()

	apply := func(i int) { t.Helper(); applyCluster(ctx, t, st, i) }
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

// TestRunParks: on the real runtime, once quiet the Collector turns GOGC
// off under a memory limit at the heap's goal; a collection while parked
// hands back to the runtime until the next quiet moment (not while a
// stream is busy), a change does too, and when Run ends GOGC and the
// limit are as they were.
func TestRunParks(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	client := e.Client(t)
	st, err := store.New(store.Config{Client: client, MaxTxnOps: 128, MaxRequestBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vw, err := view.New(view.Config{Client: client, Registerer: prometheus.NewRegistry(), RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gogc := func() (percent, limit uint64) {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64() // GOGC off: -1 as a uint64
	}
	percent0, limit0 := gogc()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := vw.Run(ctx); err != nil {
			t.Errorf("view: %v", err)
		}
	})
	busy := &Busy{}
	parked := prometheus.NewGauge(prometheus.GaugeOpts{Name: "p", Help: "p"})
	c := New(Config{Busy: busy, Quiet: 50 * time.Millisecond, Park: true, Parked: parked})
	wg.Go(func() { c.Run(ctx, vw) })
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	defer stop()

	waitParks := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for c.parks.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("parked %d times, want %d", c.parks.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	gauge := func() float64 {
		var m dto.Metric
		if err := parked.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	checkParked := func() {
		t.Helper()
		percent, limit := gogc()
		h := readHeap()
		if int64(percent) != -1 || limit >= limit0 || limit < h.Total/2 || gauge() != 1 {
			t.Errorf("parked: GOGC %d (want off, -1), limit %d (want about the heap's goal, the memory held %d), gauge %v", percent, limit, h.Total, gauge())
		}
	}

	waitParks(1)
	checkParked()
	// A collection while parked: back to the runtime, parked again once
	// quiet.
	runtime.GC()
	waitParks(2)
	checkParked()
	// The same while a stream is busy: not parked again until it is done.
	busy.Enter()
	runtime.GC()
	time.Sleep(300 * time.Millisecond)
	if percent, limit := gogc(); c.parks.Load() != 2 || percent != percent0 || limit != limit0 || gauge() != 0 {
		t.Errorf("while a stream is busy: %d parkings (want 2), GOGC %d, limit %d (want %d, %d), gauge %v", c.parks.Load(), percent, limit, percent0, limit0, gauge())
	}
	busy.Leave()
	waitParks(3)
	// A change: unparked, and parked again after the quiet.
	applyCluster(ctx, t, st, 0)
	waitParks(4)
	checkParked()
	stop()
	if percent, limit := gogc(); percent != percent0 || limit != limit0 {
		t.Errorf("after Run: GOGC %d, limit %d; want %d, %d as before", percent, limit, percent0, limit0)
	}
}

// applyCluster writes cluster "c" with a connect timeout of i+1 seconds:
// a change every stream could see.
func applyCluster(ctx context.Context, t *testing.T, st *store.Store, i int) {
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

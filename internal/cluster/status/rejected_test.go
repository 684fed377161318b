package status_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestWriterRejections: the writer counts the nodes it holds that reject
// each type, and per apply the nodes rejecting what it wrote, for the
// RejectedApplies most recent applies only (an apply that falls out
// loses its series); it tells OnNack of each new rejection once, traced
// to its apply with the apply's trace context; it reads the history only
// when a node rejects a version newer than its last read covered.
func TestWriterRejections(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/rej/"
	st, err := store.New(store.Config{Client: c, Prefix: prefix, Writer: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	apply := func(scope, name string, ms int64, opts store.ApplyOptions) (string, string) {
		ctx := testbase.Context(t)
		plan, err := st.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{xdstest.Put(t, resource.Cluster, scope, xdstest.Cluster(name, ms))}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := st.Apply(ctx, plan, opts)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := st.History(ctx, 1)
		if err != nil || len(h) != 1 || h[0].Revision != res.Revision {
			t.Fatalf("history after the apply at %d: %+v, %v", res.Revision, h, err)
		}
		return h[0].ID, fmt.Sprint(res.Revision)
	}
	_, r1 := apply(store.DefaultScope, "a", 100, store.ApplyOptions{Message: "good"})
	bad, r2 := apply(store.DefaultScope, "a", 1, store.ApplyOptions{Message: "tighter", Traceparent: tp})
	other, r3 := apply("other", "o", 100, store.ApplyOptions{Message: "another group's"})

	var mu sync.Mutex
	var events []status.NackEvent
	w := startWriter(t, c, prefix, "a", func(cfg *status.Config) {
		cfg.RejectedApplies = 1
		cfg.OnNack = func(ev status.NackEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}
	})
	took := func() []status.NackEvent {
		mu.Lock()
		defer mu.Unlock()
		out := events
		events = nil
		return out
	}
	rejecting := func(id, group, acked, nacked string) status.NodeStatus {
		n := node(id, acked)
		n.Group = group
		n.Types["cluster"] = status.TypeStatus{VersionSent: nacked, VersionAcked: acked, NackVersion: nacked, LastNack: "connect_timeout below 5ms"}
		return n
	}

	w.src.set(rejecting("n1", "edge", r1, r2), rejecting("n2", "edge", r1, r2), node("n3", r2))
	w.sync()
	checkRejected(t, w.reg, map[string]float64{"cluster": 2, "listener": 0}, map[string]float64{bad: 2})
	evs := took()
	if len(evs) != 2 {
		t.Fatalf("%d NACK events, want 2 (n1, n2): %+v", len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Type != "cluster" || ev.Status.NackVersion != r2 || len(ev.Applies) != 1 || ev.Applies[0].ID != bad ||
			ev.Applies[0].Traceparent != tp || ev.Applies[0].Message != "tighter" || ev.Applies[0].By != "alice" {
			t.Errorf("event %+v: want node n1 or n2 rejecting clusters at %s, traced to apply %s (tighter, by alice, with its trace)", ev, r2, bad)
		}
	}
	reads := w.w.HistoryReads()
	if reads != 1 {
		t.Errorf("%d reads of the history, want 1", reads)
	}

	// The same rejections again: no event, no read.
	w.src.set(rejecting("n1", "edge", r1, r2), rejecting("n2", "edge", r1, r2), node("n3", r3))
	w.sync()
	if evs := took(); len(evs) != 0 || w.w.HistoryReads() != reads {
		t.Errorf("a round with the same rejections: events %+v, %d history reads (want none, %d)", evs, w.w.HistoryReads(), reads)
	}

	// A newer apply's rejection: it alone keeps a series (RejectedApplies 1).
	w.src.set(rejecting("n1", "edge", r1, r2), rejecting("n2", "edge", r1, r2), rejecting("n4", "other", r2, r3))
	w.sync()
	checkRejected(t, w.reg, map[string]float64{"cluster": 3}, map[string]float64{other: 1})
	if evs := took(); len(evs) != 1 || evs[0].NodeID != "n4" || len(evs[0].Applies) != 1 || evs[0].Applies[0].ID != other || evs[0].Applies[0].Traceparent != "" {
		t.Errorf("events %+v: want n4's, traced to apply %s, without a trace", evs, other)
	}

	// n4 leaves, n1 acknowledges: one node left, traced to the bad apply.
	w.src.set(node("n1", r3), rejecting("n2", "edge", r1, r2))
	w.sync()
	checkRejected(t, w.reg, map[string]float64{"cluster": 1}, map[string]float64{bad: 1})
	w.src.set()
	w.sync()
	checkRejected(t, w.reg, map[string]float64{"cluster": 0}, map[string]float64{})
}

// checkRejected checks legation_xds_rejected_nodes for the types of
// byType, and that legation_xds_rejected_nodes_by_apply is exactly
// byApply.
func checkRejected(t *testing.T, reg prometheus.Gatherer, byType, byApply map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gotType, gotApply := map[string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "legation_xds_rejected_nodes":
				gotType[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "legation_xds_rejected_nodes_by_apply":
				gotApply[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for typ, want := range byType {
		if got, ok := gotType[typ]; !ok || got != want {
			t.Errorf("legation_xds_rejected_nodes{type=%q} = %v (present %v), want %v", typ, got, ok, want)
		}
	}
	if fmt.Sprint(gotApply) != fmt.Sprint(byApply) {
		t.Errorf("legation_xds_rejected_nodes_by_apply = %v, want %v", gotApply, byApply)
	}
}

package store_test

import (
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestApplyMarkerTraceparent: an apply's traceparent is in the marker of
// every scope it writes, in its transaction (ApplyMarkersAt finds it at
// the apply's revision, and only there); an apply without one writes
// none; markers written before the field existed still read.
func TestApplyMarkerTraceparent(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/tp/", nil)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	plan := mustPlan(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 1), put(t, resource.Cluster, "g1", "a", 1)}})
	traced, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{Traceparent: tp})
	if err != nil {
		t.Fatal(err)
	}
	plan = mustPlan(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "b", 1)}})
	plain, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}

	got, err := store.ApplyMarkersAt(testbase.Context(t), c, "/tp/", traced.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["default"].Traceparent != tp || got["g1"].Traceparent != tp || got["g1"].By != "store-test" {
		t.Errorf("markers at the traced apply's revision = %+v, want default and g1 with %s", got, tp)
	}
	got, err = store.ApplyMarkersAt(testbase.Context(t), c, "/tp/", plain.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["default"].Traceparent != "" || got["default"].At.IsZero() {
		t.Errorf("markers at the plain apply's revision = %+v, want default's alone, without a traceparent", got)
	}

	old, err := store.ParseApplyMarker([]byte(`{"by":"alice@host","at":"2026-01-02T03:04:05Z"}`))
	if err != nil || old.By != "alice@host" || !old.At.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || old.Traceparent != "" {
		t.Errorf("an old marker = %+v, %v", old, err)
	}
	if _, err := store.ParseApplyMarker([]byte("{not json")); err == nil {
		t.Error("a malformed marker parses")
	}
}

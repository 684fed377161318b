package xdsstream

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
)

// fakeTypeStatus is a protocol's per-type status for the tests.
type fakeTypeStatus struct{ Sent, Acked string }

func (f fakeTypeStatus) Summary() TypeSummary {
	return TypeSummary{VersionSent: f.Sent, VersionAcked: f.Acked}
}

// source is a Source with no snapshot: the core is used without a view.
type source struct{}

func (source) Snapshot() *view.Snapshot            { return nil }
func (source) Interest(string, any) *view.Interest { return nil }
func (source) WaitRevision(context.Context, int64) (*view.Snapshot, error) {
	return nil, context.DeadlineExceeded
}

func newTestCore(t *testing.T, reg prometheus.Registerer) *Core[fakeTypeStatus] {
	t.Helper()
	c, err := NewCore[fakeTypeStatus](Protocol{Name: "test", Title: "test"}, Config{Source: source{}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	if _, err := NewCore[fakeTypeStatus](Protocol{Name: "test"}, Config{}); err == nil || !strings.Contains(err.Error(), "Source is required") {
		t.Errorf("no Source: err = %v", err)
	}
	if _, err := NewCore[fakeTypeStatus](Protocol{Name: "test"}, Config{Source: source{}, CatchupTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative CatchupTimeout: err = %v", err)
	}
	c := newTestCore(t, nil)
	if c.Config.CatchupTimeout != 5*time.Second || c.Config.GroupBy == nil || c.Config.Logger == nil {
		t.Errorf("defaults not filled: %+v", c.Config)
	}
}

func TestNotReady(t *testing.T) {
	c := newTestCore(t, nil)
	if _, err := c.CatchUp(context.Background(), 10); err != ErrNotReady {
		t.Errorf("CatchUp before the view loaded: err = %v, want ErrNotReady", err)
	}
}

// TestNackCountedOncePerResponse: a client repeating the NACK of one
// response is counted and logged once; the NACK of a later response again.
func TestNackCountedOncePerResponse(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newTestCore(t, reg)
	s := &Stream[fakeTypeStatus]{core: c, Log: slog.New(slog.DiscardHandler)}
	var rec Record
	rec.Sent("7", "1")
	s.Nack(resource.Cluster, &rec, "bad")
	s.Nack(resource.Cluster, &rec, "bad")
	if got := counter(t, c.Metrics.Nacks.WithLabelValues("cluster")); got != 1 {
		t.Fatalf("nacks after one response NACKed twice = %v, want 1", got)
	}
	if rec.Nacked != "7" || rec.NackMsg != "bad" {
		t.Errorf("record = %+v, want NACK of 7 with its message", rec)
	}
	rec.Sent("7", "2") // a heartbeat at the same version
	s.Nack(resource.Cluster, &rec, "still bad")
	if got := counter(t, c.Metrics.Nacks.WithLabelValues("cluster")); got != 2 {
		t.Errorf("nacks after a second response NACKed = %v, want 2", got)
	}
	rec.ClearNack()
	if rec.Nacked != "" || rec.NackMsg != "" {
		t.Errorf("after ClearNack: %+v", rec)
	}
}

func TestTTLKey(t *testing.T) {
	if got := TTLKey("k", nil); got != "k" {
		t.Errorf("no TTLs: %q", got)
	}
	if got := TTLKey("", []time.Duration{time.Second}); got != "" {
		t.Errorf("an unshared body stays unshared: %q", got)
	}
	a := TTLKey("k", []time.Duration{0, time.Second})
	b := TTLKey("k", []time.Duration{0, 2 * time.Second})
	if a == b || a == "k" || !strings.HasPrefix(a, "k\x00T") {
		t.Errorf("TTLs must name the body: %q vs %q", a, b)
	}
}

func TestStatusSummary(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	in := Status[fakeTypeStatus]{ID: 3, NodeID: "n", Group: "g", Protocol: "test-ads", ConnectedAt: t0,
		Types: map[string]*fakeTypeStatus{"cluster": {Sent: "5", Acked: "4"}, "route": nil}}
	want := Summary{ID: 3, NodeID: "n", Group: "g", Protocol: "test-ads", ConnectedAt: t0,
		Types: map[string]TypeSummary{"cluster": {VersionSent: "5", VersionAcked: "4"}}}
	if diff := cmp.Diff(want, in.Summary()); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
}

func TestItemKey(t *testing.T) {
	e := &view.Entry{}
	e.Name = "rc/vh"
	if got := (Item{Entry: e}).Key(); got != "rc/vh" {
		t.Errorf("Key without alias = %q", got)
	}
	if got := (Item{Entry: e, Alias: "rc/host.example"}).Key(); got != "rc/host.example" {
		t.Errorf("Key with alias = %q", got)
	}
}

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

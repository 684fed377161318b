package lrs_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// t0 is a window boundary at a 10s interval.
var t0 = time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newServer(t *testing.T, cfg lrs.Config) (*lrs.Server, *clock, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Replica == "" {
		cfg.Replica = "r1"
	}
	cfg.Registerer = reg
	s, err := lrs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: t0}
	s.SetNow(c.now)
	return s, c, reg
}

func loc(zone string) *corev3.Locality { return &corev3.Locality{Region: "r", Zone: zone} }

func localityStats(zone string, issued, ok, bad, inProgress uint64) *endpointv3.UpstreamLocalityStats {
	return &endpointv3.UpstreamLocalityStats{
		Locality: loc(zone), TotalIssuedRequests: issued, TotalSuccessfulRequests: ok,
		TotalErrorRequests: bad, TotalRequestsInProgress: inProgress,
	}
}

func report(cluster string, interval time.Duration, ls ...*endpointv3.UpstreamLocalityStats) *loadv3.LoadStatsRequest {
	return &loadv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: cluster, LoadReportInterval: durationpb.New(interval), UpstreamLocalityStats: ls,
	}}}
}

// Reports from two nodes over two windows: each window holds the sums of
// what arrived in it, per cluster, locality and node; drops go to the row
// without a locality; Summarize sums the last windows across replicas.
func TestAggregate(t *testing.T) {
	s, c, reg := newServer(t, lrs.Config{})
	c.t = t0.Add(time.Second)
	s.Accept(lrs.Reporter{Node: "n1"}, report("c1", 10*time.Second, localityStats("z1", 10, 8, 2, 1), localityStats("z2", 5, 5, 0, 0)))
	r := report("c1", 10*time.Second, localityStats("z1", 20, 20, 0, 3))
	r.ClusterStats[0].TotalDroppedRequests = 4
	r.ClusterStats[0].DroppedRequests = []*endpointv3.ClusterStats_DroppedRequests{{Category: "throttle", DroppedCount: 4}}
	r.ClusterStats[0].UpstreamLocalityStats[0].LoadMetricStats = []*endpointv3.EndpointLoadMetricStats{{MetricName: "cpu", NumRequestsFinishedWithMetric: 2, TotalMetricValue: 1.5}}
	s.Accept(lrs.Reporter{Node: "n2"}, r)
	c.t = t0.Add(9 * time.Second)
	s.Accept(lrs.Reporter{Node: "n1"}, report("c1", 10*time.Second, localityStats("z1", 1, 1, 0, 0)))
	// The next window.
	c.t = t0.Add(11 * time.Second)
	s.Accept(lrs.Reporter{Node: "n1"}, report("c1", 10*time.Second, localityStats("z1", 30, 27, 3, 2)))

	ws := s.Closed(t0.Add(20 * time.Second))
	if len(ws) != 2 {
		t.Fatalf("%d windows closed, want 2: %+v", len(ws), ws)
	}
	want0 := []lrs.Row{
		{Cluster: "c1", Node: "n1", Reports: 2},
		{Cluster: "c1", Node: "n2", Reports: 1, Dropped: 4, DroppedBy: map[string]uint64{"throttle": 4}},
		{Cluster: "c1", Locality: "r/z1/", Node: "n1", Reports: 2, Issued: 11, Succeeded: 9, Errored: 2},
		{Cluster: "c1", Locality: "r/z1/", Node: "n2", Reports: 1, Issued: 20, Succeeded: 20, InProgress: 3,
			Metrics: map[string]lrs.Metric{"cpu": {Requests: 2, Total: 1.5}}},
		{Cluster: "c1", Locality: "r/z2/", Node: "n1", Reports: 1, Issued: 5, Succeeded: 5},
	}
	if diff := cmp.Diff(want0, ws[0].Rows); diff != "" {
		t.Errorf("first window's rows (-want +got):\n%s", diff)
	}
	if !ws[0].Start.Equal(t0) || !ws[0].End.Equal(t0.Add(10*time.Second)) || ws[0].Replica != "r1" {
		t.Errorf("first window %s %s to %s, want r1 %s to %s", ws[0].Replica, ws[0].Start, ws[0].End, t0, t0.Add(10*time.Second))
	}
	if got := xdstest.CounterSum(t, reg, "legation_lrs_requests_total", "cluster", "c1", "outcome", "issued"); got != 66 {
		t.Errorf("legation_lrs_requests_total{c1,issued} = %v, want 66", got)
	}
	if got := xdstest.CounterSum(t, reg, "legation_lrs_dropped_requests_total", "cluster", "c1"); got != 4 {
		t.Errorf("legation_lrs_dropped_requests_total{c1} = %v, want 4", got)
	}

	// Another replica's window at the same start counts in the same
	// seconds.
	other := lrs.Window{Replica: "r2", Start: t0, End: t0.Add(10 * time.Second), Rows: []lrs.Row{
		{Cluster: "c1", Locality: "r/z1/", Node: "n3", Issued: 14, Succeeded: 14},
		{Cluster: "c2", Node: "n3", Issued: 1, Succeeded: 1},
	}}
	all := append(ws, other)
	for _, tc := range []struct {
		name    string
		cluster string
		by      lrs.By
		last    int
		want    []lrs.Summary
	}{
		{
			name: "last window", cluster: "c1", by: lrs.ByCluster, last: 1,
			want: []lrs.Summary{{Cluster: "c1", From: t0.Add(10 * time.Second), To: t0.Add(20 * time.Second), Seconds: 10, Windows: 1,
				Replicas: []string{"r1"}, Issued: 30, Succeeded: 27, Errored: 3, InProgress: 2, RequestsPerSecond: 3, ErrorRatio: 0.1}},
		},
		{
			name: "two windows, two replicas", cluster: "c1", by: lrs.ByCluster, last: 2,
			want: []lrs.Summary{{Cluster: "c1", From: t0, To: t0.Add(20 * time.Second), Seconds: 20, Windows: 2,
				Replicas: []string{"r1", "r2"}, Issued: 80, Succeeded: 75, Errored: 5, InProgress: 2, Dropped: 4,
				DroppedBy: map[string]uint64{"throttle": 4}, RequestsPerSecond: 4, ErrorRatio: 5.0 / 80, DropsPerSecond: 0.2}},
		},
		{
			name: "by locality, first window only", cluster: "", by: lrs.ByLocality, last: 0,
			want: []lrs.Summary{
				{Cluster: "c1", Locality: "-", Replicas: []string{"r1"}, Dropped: 4, DroppedBy: map[string]uint64{"throttle": 4}},
				{Cluster: "c1", Locality: "r/z1/", Replicas: []string{"r1", "r2"}, Issued: 75, Succeeded: 70, Errored: 5, InProgress: 2},
				{Cluster: "c1", Locality: "r/z2/", Replicas: []string{"r1"}, Issued: 5, Succeeded: 5},
				{Cluster: "c2", Locality: "-", Replicas: []string{"r2"}, Issued: 1, Succeeded: 1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lrs.Summarize(all, tc.cluster, tc.by, tc.last, time.Time{})
			if tc.by == lrs.ByLocality {
				// Only the counts matter here.
				for i := range got {
					got[i].From, got[i].To, got[i].Seconds, got[i].Windows = time.Time{}, time.Time{}, 0, 0
					got[i].RequestsPerSecond, got[i].ErrorRatio, got[i].DropsPerSecond = 0, 0, 0
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
	// An interval without reports has no window, but counts in the rate.
	gap := lrs.Window{Replica: "r2", Start: t0.Add(40 * time.Second), End: t0.Add(50 * time.Second), Rows: []lrs.Row{
		{Cluster: "c1", Node: "n3", Issued: 10, Succeeded: 10},
	}}
	if got := lrs.Summarize(append(all, gap), "c1", lrs.ByCluster, 3, time.Time{}); len(got) != 1 || got[0].Issued != 10 || got[0].Seconds != 30 || got[0].RequestsPerSecond != 10.0/30 {
		t.Errorf("Summarize over a gap: %+v, want 10 issued over 30s", got)
	}
	// At a time now: one interval of lag is allowed (the last window may
	// not be published yet); older load is not shown as current.
	for _, tc := range []struct {
		now  time.Duration // after t0
		want uint64        // c1's issued requests over the last interval
	}{
		{20 * time.Second, 30},
		{29 * time.Second, 30},
		{30 * time.Second, 30},
		{40 * time.Second, 0},
	} {
		var issued uint64
		for _, s := range lrs.Summarize(all, "c1", lrs.ByCluster, 1, t0.Add(tc.now)) {
			issued += s.Issued
		}
		if issued != tc.want {
			t.Errorf("Summarize of the last interval at t0+%s: %d issued, want %d", tc.now, issued, tc.want)
		}
	}
	if got := lrs.Summarize(all, "c1", lrs.ByNode, 0, time.Time{}); len(got) != 3 {
		t.Errorf("by node: %d summaries, want 3 (n1, n2, n3): %+v", len(got), got)
	}
}

// Bad reports are skipped and counted by reason; what is good in the same
// report is kept; nothing panics.
func TestBadReports(t *testing.T) {
	huge := make([]*endpointv3.UpstreamLocalityStats, 150)
	for i := range huge {
		huge[i] = localityStats(fmt.Sprintf("z%03d", i), 1, 1, 0, 0)
	}
	many := &loadv3.LoadStatsRequest{}
	for i := range 1005 {
		many.ClusterStats = append(many.ClusterStats, report(fmt.Sprintf("m%d", i), time.Second, localityStats("z", 1, 1, 0, 0)).ClusterStats[0])
	}
	bad := func(mod func(*endpointv3.ClusterStats)) *loadv3.LoadStatsRequest {
		r := report("c1", time.Second, localityStats("z1", 1, 1, 0, 0))
		mod(r.ClusterStats[0])
		return r
	}
	for _, tc := range []struct {
		name       string
		req        *loadv3.LoadStatsRequest
		reason     string
		rejected   float64
		wantIssued uint64 // issued requests kept
	}{
		{"negative interval", bad(func(c *endpointv3.ClusterStats) { c.LoadReportInterval = durationpb.New(-time.Second) }), "bad_interval", 1, 0},
		{"zero interval", bad(func(c *endpointv3.ClusterStats) { c.LoadReportInterval = durationpb.New(0) }), "bad_interval", 1, 0},
		{"no interval", bad(func(c *endpointv3.ClusterStats) { c.LoadReportInterval = nil }), "bad_interval", 1, 0},
		{"invalid duration", bad(func(c *endpointv3.ClusterStats) { c.LoadReportInterval.Nanos = -5 }), "bad_interval", 1, 0},
		{"absurd interval", bad(func(c *endpointv3.ClusterStats) { c.LoadReportInterval = durationpb.New(48 * time.Hour) }), "bad_interval", 1, 0},
		{"unknown cluster", bad(func(c *endpointv3.ClusterStats) { c.ClusterName = "nope" }), "unknown_cluster", 1, 0},
		{"no cluster", bad(func(c *endpointv3.ClusterStats) { c.ClusterName = "" }), "no_cluster", 1, 0},
		{"huge locality list", bad(func(c *endpointv3.ClusterStats) { c.UpstreamLocalityStats = huge }), "too_many_localities", 50, 100},
		{"too many clusters", many, "too_many_clusters", 5, 1000},
		{"NaN metric", bad(func(c *endpointv3.ClusterStats) {
			c.UpstreamLocalityStats[0].LoadMetricStats = []*endpointv3.EndpointLoadMetricStats{{MetricName: "x", TotalMetricValue: math.NaN()}}
		}), "bad_metric", 1, 1},
		{"too many drop categories", bad(func(c *endpointv3.ClusterStats) {
			for i := range 20 {
				c.DroppedRequests = append(c.DroppedRequests, &endpointv3.ClusterStats_DroppedRequests{Category: fmt.Sprint(i), DroppedCount: 1})
			}
		}), "too_many_categories", 4, 1},
		{"too many metrics", bad(func(c *endpointv3.ClusterStats) {
			for i := range 20 {
				c.UpstreamLocalityStats[0].LoadMetricStats = append(c.UpstreamLocalityStats[0].LoadMetricStats,
					&endpointv3.EndpointLoadMetricStats{MetricName: fmt.Sprint(i), TotalMetricValue: 1})
			}
		}), "too_many_metrics", 4, 1},
		{"absurd counts", bad(func(c *endpointv3.ClusterStats) {
			c.UpstreamLocalityStats = append(c.UpstreamLocalityStats, localityStats("z1", math.MaxUint64, 0, 0, 0))
		}), "over_rate", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			known := func(_, cluster string) bool { return cluster != "nope" }
			s, _, reg := newServer(t, lrs.Config{Known: known})
			s.Accept(lrs.Reporter{Node: "n1"}, tc.req)
			if tc.reason != "" {
				if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", tc.reason); got != tc.rejected {
					t.Errorf("legation_lrs_rejected_total{reason=%q} = %v, want %v", tc.reason, got, tc.rejected)
				}
			}
			if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total"); tc.reason == "" && got != 0 {
				t.Errorf("legation_lrs_rejected_total = %v, want 0", got)
			}
			var issued uint64
			for _, w := range s.Closed(t0.Add(time.Hour)) {
				for _, r := range w.Rows {
					if issued+r.Issued < issued {
						issued = math.MaxUint64
					} else {
						issued += r.Issued
					}
				}
				if _, err := lrs.Encode(w); err != nil {
					t.Errorf("Encode: %v", err)
				}
			}
			if issued != tc.wantIssued {
				t.Errorf("issued requests kept = %d, want %d", issued, tc.wantIssued)
			}
		})
	}
}

// A window holds at most about twice MaxRows rows however many nodes
// report: the rest are folded and counted.
func TestRowsBounded(t *testing.T) {
	s, _, _ := newServer(t, lrs.Config{})
	nodes := 3 * lrs.MaxRows
	for i := range nodes {
		s.Accept(lrs.Reporter{Node: fmt.Sprintf("n%05d", i)}, report(fmt.Sprintf("c%d", i%(lrs.MaxRows+10)), time.Second))
	}
	ws := s.Closed(t0.Add(time.Hour))
	if len(ws) != 1 {
		t.Fatalf("%d windows, want 1", len(ws))
	}
	w := ws[0]
	if len(w.Rows) > 2*lrs.MaxRows+1 {
		t.Errorf("%d rows, want at most %d", len(w.Rows), 2*lrs.MaxRows+1)
	}
	if w.Folded != uint64(nodes-lrs.MaxRows) {
		t.Errorf("folded %d, want %d", w.Folded, nodes-lrs.MaxRows)
	}
	var reports uint64
	for _, r := range w.Rows {
		reports += r.Reports
	}
	if reports != uint64(nodes) {
		t.Errorf("rows count %d reports, want %d: none lost", reports, nodes)
	}
}

// The cluster label of the metrics takes at most MaxClusterLabels values.
func TestClusterLabelsBounded(t *testing.T) {
	s, _, reg := newServer(t, lrs.Config{MaxClusterLabels: 2})
	for _, c := range []string{"a", "b", "c", "d", "a"} {
		s.Accept(lrs.Reporter{Node: "n1"}, report(c, time.Second, localityStats("z", 1, 1, 0, 0)))
	}
	for label, want := range map[string]float64{"a": 2, "b": 1, "other": 2, "c": 0} {
		if got := xdstest.CounterSum(t, reg, "legation_lrs_requests_total", "cluster", label, "outcome", "issued"); got != want {
			t.Errorf("legation_lrs_requests_total{cluster=%q,issued} = %v, want %v", label, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  lrs.Config
	}{
		{"no replica", lrs.Config{}},
		{"replica with slash", lrs.Config{Replica: "a/b"}},
		{"interval too short", lrs.Config{Replica: "a", Interval: time.Millisecond}},
		{"interval too long", lrs.Config{Replica: "a", Interval: 2 * time.Hour}},
		{"negative windows", lrs.Config{Replica: "a", Windows: -1}},
		{"empty cluster", lrs.Config{Replica: "a", Clusters: []string{""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := lrs.New(tc.cfg); err == nil {
				t.Errorf("New(%+v) succeeded, want an error", tc.cfg)
			}
		})
	}
}

// BenchmarkAccept: one report of one cluster in 3 localities, from 1,000
// nodes in turn, into one window (the cost per report a replica pays).
func BenchmarkAccept(b *testing.B) {
	s, err := lrs.New(lrs.Config{Replica: "r", Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	s.SetNow(func() time.Time { return t0 })
	req := report("c1", 10*time.Second, localityStats("z1", 100, 99, 1, 2), localityStats("z2", 100, 100, 0, 0), localityStats("z3", 50, 50, 0, 1))
	nodes := make([]string, 1000)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%04d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.Accept(lrs.Reporter{Node: nodes[i%len(nodes)]}, req)
	}
}

// A window too big for its etcd value (many nodes with long names and
// metrics) is coarsened until it fits, its counts kept.
func TestEncodeBounded(t *testing.T) {
	s, _, _ := newServer(t, lrs.Config{})
	long := strings.Repeat("x", 300)
	for i := range lrs.MaxRows {
		r := report("c1", time.Second, localityStats(fmt.Sprintf("%s-%d", long, i%7), 3, 2, 1, 0))
		for m := range 16 {
			r.ClusterStats[0].UpstreamLocalityStats[0].LoadMetricStats = append(r.ClusterStats[0].UpstreamLocalityStats[0].LoadMetricStats,
				&endpointv3.EndpointLoadMetricStats{MetricName: fmt.Sprintf("%s-%d", long, m), NumRequestsFinishedWithMetric: 1, TotalMetricValue: math.MaxFloat64})
		}
		s.Accept(lrs.Reporter{Node: fmt.Sprintf("%s-%05d", long, i)}, r)
	}
	ws := s.Closed(t0.Add(time.Hour))
	if len(ws) != 1 {
		t.Fatalf("%d windows, want 1", len(ws))
	}
	plain, err := lrs.Encode(ws[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) <= lrs.MaxWindowBytes {
		t.Fatalf("the test's window is %d bytes, want it over %d", len(plain), lrs.MaxWindowBytes)
	}
	b, err := lrs.EncodeBounded(ws[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > lrs.MaxWindowBytes {
		t.Errorf("EncodeBounded: %d bytes, want at most %d", len(b), lrs.MaxWindowBytes)
	}
	w, err := lrs.Decode(keyspace.DefaultPrefix, lrs.Key(keyspace.DefaultPrefix, "r1", t0), b)
	if err != nil {
		t.Fatal(err)
	}
	got := lrs.Summarize([]lrs.Window{w}, "c1", lrs.ByCluster, 0, time.Time{})
	want := lrs.Summarize(ws, "c1", lrs.ByCluster, 0, time.Time{})
	if diff := cmp.Diff(want, got); diff != "" || len(got) != 1 || got[0].Issued != 3*lrs.MaxRows {
		t.Errorf("counts after coarsening (-want +got):\n%s", diff)
	}
	t.Logf("%d rows in %d bytes coarsened to %d rows in %d bytes", len(ws[0].Rows), len(plain), len(w.Rows), len(b))
}

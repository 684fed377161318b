package lrs_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/grpcapi"
)

// A node's reports count against its own budget per window (MaxRate
// times the window, twice): a report claiming absurd counts is refused
// whole and counted, one that would take the node past its budget too,
// while another node's reports in the same window and the same node's in
// the next are kept.
func TestOverRate(t *testing.T) {
	s, c, reg := newServer(t, lrs.Config{Interval: time.Second, MaxRate: 10}) // 20 a window
	liar, honest := lrs.Reporter{Node: "liar"}, lrs.Reporter{Node: "honest"}
	s.Accept(liar, report("c1", time.Second, localityStats("z1", math.MaxUint64, 0, 0, 0)))
	s.Accept(liar, report("c1", time.Second, localityStats("z1", 1, math.MaxUint64, 0, 0)))
	s.Accept(liar, report("c1", time.Second, localityStats("z1", 15, 15, 0, 0)))
	s.Accept(liar, report("c1", time.Second, localityStats("z1", 6, 6, 0, 0))) // 21 > 20: refused
	s.Accept(liar, report("c1", time.Second, localityStats("z1", 5, 5, 0, 0))) // 20: kept
	s.Accept(honest, report("c1", time.Second, localityStats("z1", 20, 20, 0, 0)))
	c.t = t0.Add(time.Second) // the next window: a new budget
	s.Accept(liar, report("c1", time.Second, localityStats("z1", 20, 20, 0, 0)))

	if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", "over_rate"); got != 3 {
		t.Errorf(`legation_lrs_rejected_total{reason="over_rate"} = %v, want 3`, got)
	}
	got := map[string]uint64{}
	for _, w := range s.Closed(t0.Add(time.Hour)) {
		for _, r := range w.Rows {
			got[fmt.Sprintf("%s %s", w.Start.Sub(t0), r.Node)] += r.Issued
		}
	}
	want := map[string]uint64{"0s liar": 20, "0s honest": 20, "1s liar": 20}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("issued kept per window and node = %v, want %v", got, want)
	}
}

// One node making up localities cannot fill a window: beyond
// MaxRowsPerNode rows of its own, its rows are summed into one (other)
// row of its own (counts kept), and a node reporting after it still gets
// rows under its own name, not OtherNode.
func TestRowsPerNode(t *testing.T) {
	s, _, reg := newServer(t, lrs.Config{MaxRowsPerNode: 50})
	liar := lrs.Reporter{Node: "liar", Identity: "spiffe://example.org/liar"}
	for i := range lrs.MaxRows * 2 {
		s.Accept(liar, report(fmt.Sprintf("c%d", i%3), time.Second, localityStats(fmt.Sprintf("made-up-%d", i), 1, 1, 0, 0)))
	}
	s.Accept(lrs.Reporter{Node: "honest"}, report("c1", time.Second, localityStats("z1", 7, 7, 0, 0)))

	ws := s.Closed(t0.Add(time.Hour))
	if len(ws) != 1 {
		t.Fatalf("%d windows, want 1", len(ws))
	}
	var liarRows int
	var liarIssued, honestIssued uint64
	for _, r := range ws[0].Rows {
		switch r.Node {
		case "liar":
			liarRows++
			liarIssued += r.Issued
			if r.Identity != liar.Identity {
				t.Errorf("liar's row %+v: identity %q, want %q", r, r.Identity, liar.Identity)
			}
		case "honest":
			honestIssued += r.Issued
		case lrs.OtherNode:
			t.Errorf("row %+v folded into %s: one node filled the window", r, lrs.OtherNode)
		}
	}
	if liarRows != 51 {
		t.Errorf("liar has %d rows, want 51 (50 and its own %s row)", liarRows, lrs.OtherCluster)
	}
	if liarIssued != lrs.MaxRows*2 || honestIssued != 7 {
		t.Errorf("issued kept: liar %d, honest %d; want %d and 7", liarIssued, honestIssued, lrs.MaxRows*2)
	}
	if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", "node_rows_folded"); got == 0 {
		t.Error(`legation_lrs_rejected_total{reason="node_rows_folded"} = 0, want the folded rows counted`)
	}
}

// The rows of a stream carry the identity Config.Identity gives its
// client, and Summarize by node keeps them apart.
func TestIdentityAttribution(t *testing.T) {
	identity := func(ctx context.Context) string {
		if v := metadata.ValueFromIncomingContext(ctx, "test-identity"); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	s, c, _ := newServer(t, lrs.Config{Identity: identity})
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{LRS: s})
	cc := xdstest.Dial(t, xdstest.Serve(t, g))
	c.t = t0.Add(time.Second)
	for _, id := range []string{"spiffe://example.org/a", "spiffe://example.org/b"} {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "test-identity", id), xdstest.Timeout)
		st, err := loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []*loadv3.LoadStatsRequest{{Node: &corev3.Node{Id: "n1"}}, report("c1", time.Second, localityStats("z1", 3, 3, 0, 0))} {
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err == nil {
			t.Fatal("a second response on an LRS stream")
		}
		cancel()
	}
	// Each stream ended OK after its report: both are in the window.
	var got []string
	for _, sum := range lrs.Summarize(s.Closed(t0.Add(time.Hour)), "", lrs.ByNode, 0, time.Time{}) {
		got = append(got, fmt.Sprintf("%s %s %d", sum.Node, sum.Identity, sum.Issued))
	}
	want := []string{"n1 spiffe://example.org/a 3", "n1 spiffe://example.org/b 3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("by node = %v, want %v", got, want)
	}
}

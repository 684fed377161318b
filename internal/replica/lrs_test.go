package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestLRSKnownClusters: a replica accepts a node's load reports for the
// clusters the node sees (the default scope's and its group's) and skips,
// counting them, those of clusters it does not (another group's, or none
// at all); what it accepts it publishes to etcd, read back per node.
func TestLRSKnownClusters(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("shared", 100)),
		xdstest.Put(t, resource.Cluster, "edge", xdstest.Cluster("edge-only", 100)),
	})
	cfg := e.config(t)
	cfg.LRSInterval = time.Second
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	r := startXDS(t, cfg, rev)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()

	report := func(node, group string, clusters ...string) {
		t.Helper()
		st, err := loadv3.NewLoadReportingServiceClient(dial(t, r)).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&loadv3.LoadStatsRequest{Node: xdstest.Node(node, group)}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetSendAllClusters() || resp.GetLoadReportingInterval().AsDuration() != time.Second {
			t.Errorf("first response %v, want send_all_clusters every 1s (--lrs-interval)", resp)
		}
		req := &loadv3.LoadStatsRequest{}
		for _, c := range clusters {
			req.ClusterStats = append(req.ClusterStats, &endpointv3.ClusterStats{
				ClusterName: c, LoadReportInterval: durationpb.New(time.Second),
				UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalIssuedRequests: 5, TotalSuccessfulRequests: 5}},
			})
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err == nil {
			t.Fatal("a second response on an LRS stream")
		}
	}
	report("edge-1", "edge", "shared", "edge-only", "nowhere")
	report("core-1", "core", "shared", "edge-only")

	if got := metricValue(t, reg, "legation_lrs_rejected_total", "reason", "unknown_cluster"); got != 2 {
		t.Errorf(`legation_lrs_rejected_total{reason="unknown_cluster"} = %v, want 2 (edge-1's nowhere, core-1's edge-only)`, got)
	}
	want := map[string]uint64{"shared edge-1": 5, "edge-only edge-1": 5, "shared core-1": 5}
	// /debug/load answers for the cluster (here, this one replica).
	xdstest.WaitFor(t, "/debug/load", func() (bool, string) {
		code, body := get(t, r, "/debug/load?by=node&windows=100")
		var v struct {
			Summaries []lrs.Summary `json:"summaries"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		return len(v.Summaries) == len(want), body
	})
	for _, q := range []string{"by=zone", "windows=0", "windows=x"} {
		if code, body := get(t, r, "/debug/load?"+q); code != http.StatusBadRequest {
			t.Errorf("/debug/load?%s: %d %s, want 400", q, code, body)
		}
	}
	xdstest.WaitFor(t, "the accepted reports in etcd", func() (bool, string) {
		ws, bad, err := lrs.Read(ctx, e.Client, e.prefix)
		if err != nil || len(bad) > 0 {
			return false, fmt.Sprintf("%v %v", err, bad)
		}
		got := map[string]uint64{}
		for _, s := range lrs.Summarize(ws, "", lrs.ByNode, 0, time.Now()) {
			got[s.Cluster+" "+s.Node] = s.Issued
		}
		if len(got) != len(want) {
			return false, fmt.Sprint(got)
		}
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
}

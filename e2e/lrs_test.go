package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// lrsInterval is the --lrs-interval of TestClusterLRS: short, so that the
// test is.
const lrsInterval = time.Second

// lrsClusterYAML is clusterYAML with load reporting to the control plane
// that sent it (lrs_server: self), as grpc-go supports it.
const lrsClusterYAML = clusterYAML + `lrs_server:
  self: {}
`

// TestClusterLRS: on a 3-replica cluster behind HAProxy, grpc-go xDS
// clients (each its own node, its connection on any replica) follow a
// cluster whose CDS resource has lrs_server: self, and so open an LRS
// stream to the control plane, which the replicas relay to each node's
// home. After real RPCs through the cluster to a backend, `xdsadmin
// load` shows, within about an interval of the last RPC's report, every
// RPC issued and succeeded, cluster-wide; by node, each node's load comes
// from its home replica (the one its status record names); a report for a
// cluster the node cannot see is skipped and counted; and the replicas'
// legation_lrs_requests_total add up to the same.
func TestClusterLRS(t *testing.T) {
	checkLeaks(t)
	flags := append(slices.Clone(clusterFlags), "--lrs-interval", lrsInterval.String(), "--lrs-windows", "120")
	c := localcluster.StartForTest(t, clusterConfig(flags))
	c.WaitRing()
	backend := startBackend(t)
	rev := clusterApply(t, c, strings.Join([]string{listenerYAML(true), routeYAML, lrsClusterYAML, endpointsYAML(backend.port)}, "---\n"))
	c.WaitRevision(rev)
	conn := clusterConn(c)

	// No load yet.
	if out, errOut, code := adminRun(conn, "", "load"); code != 0 || !strings.Contains(out, "no load reported") {
		t.Fatalf("xdsadmin load before any client: exit %d\n%s%s", code, out, errOut)
	}

	const (
		clients = 6
		rpcs    = 25 // per client, after its first
	)
	ids := make([]string, clients)
	ccs := make([]*grpc.ClientConn, clients)
	for i := range clients {
		ids[i] = fmt.Sprintf("lrs-%d", i)
		g, err := newGRPCClient(c.LBAddr, ids[i], backend.port, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.cancel() // only its connection is used: the test makes the RPCs
		<-g.done
		ccs[i] = g.cc
		t.Cleanup(func() { g.cc.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	// Every RPC the clients make must succeed, so that issued and
	// succeeded are known exactly.
	made := 0
	for i, cc := range ccs {
		if err := reaches(ctx, cc, backend.port); err != nil {
			t.Fatalf("client %s: %v", ids[i], err)
		}
	}
	for range rpcs {
		for i, cc := range ccs {
			if port, err := call(ctx, cc); err != nil || port != backend.port {
				t.Fatalf("client %s: RPC answered by port %d: %v", ids[i], port, err)
			}
			made++
		}
	}
	last := time.Now()

	// reaches made at least one RPC per client, maybe a few more that
	// failed before the client had endpoints (those are not issued).
	var sum lrs.Summary
	waitFor(t, "xdsadmin load shows every RPC", func() (bool, string) {
		out, errOut, code := adminRun(conn, "", "load", clusterName, "--windows", "120", "-o", "json")
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, errOut)
		}
		var sums []lrs.Summary
		if err := json.Unmarshal([]byte(out), &sums); err != nil {
			return false, err.Error()
		}
		if len(sums) != 1 {
			return false, fmt.Sprintf("summaries %s", out)
		}
		sum = sums[0]
		return sum.Issued >= uint64(made+clients) && sum.Succeeded == sum.Issued && sum.InProgress == 0,
			fmt.Sprintf("issued %d, succeeded %d, errored %d; want at least %d, all succeeded", sum.Issued, sum.Succeeded, sum.Errored, made+clients)
	})
	took := time.Since(last)
	t.Logf("xdsadmin load showed %d RPCs issued (%d made after the first of each client), %.1f/s over %gs, %s after the last RPC (--lrs-interval %s): %+v",
		sum.Issued, made, sum.RequestsPerSecond, sum.Seconds, took.Round(time.Millisecond), lrsInterval, sum)
	// The last report comes within an interval of the last RPC, and its
	// window is published when it closes, an interval later at most.
	if limit := 3*lrsInterval + time.Second; took > limit {
		t.Errorf("xdsadmin load showed the last RPCs %s after them, want within %s", took, limit)
	}
	if sum.Errored != 0 || sum.Dropped != 0 || sum.ErrorRatio != 0 {
		t.Errorf("summary %+v: want no errors and no drops", sum)
	}
	if sum.RequestsPerSecond <= 0 {
		t.Errorf("summary %+v: want a positive rate", sum)
	}

	// Stable now: the load by node comes from each node's home.
	out, errOut, code := adminRun(conn, "", "load", clusterName, "--by", "node", "--windows", "120", "-o", "json")
	if code != 0 {
		t.Fatalf("xdsadmin load --by node: exit %d: %s", code, errOut)
	}
	var byNode []lrs.Summary
	if err := json.Unmarshal([]byte(out), &byNode); err != nil {
		t.Fatal(err)
	}
	sOut, sErr, code := adminRun(conn, "", "status", "-o", "json")
	if code != 0 {
		t.Fatalf("xdsadmin status: exit %d: %s", code, sErr)
	}
	var recs []status.NodeStatus
	if err := json.Unmarshal([]byte(sOut), &recs); err != nil {
		t.Fatal(err)
	}
	homes := map[string]string{}
	for _, r := range recs {
		homes[r.NodeID] = r.Home
	}
	var total uint64
	replicas := map[string]bool{}
	for _, s := range byNode {
		total += s.Issued
		if !slices.Equal(s.Replicas, []string{homes[s.Node]}) {
			t.Errorf("node %s: load from replicas %v, want from its home %q only", s.Node, s.Replicas, homes[s.Node])
		}
		for _, r := range s.Replicas {
			replicas[r] = true
		}
	}
	if len(byNode) != clients || total != sum.Issued {
		t.Errorf("by node: %d nodes with %d issued, want %d nodes with %d:\n%s", len(byNode), total, clients, sum.Issued, out)
	}
	t.Logf("%d nodes reported to %d replicas", len(byNode), len(replicas))

	// The table names the cluster.
	if out, errOut, code := adminRun(conn, "", "load", "--by", "locality"); code != 0 || !strings.Contains(out, clusterName) || !strings.Contains(out, "local/z1/") {
		t.Errorf("xdsadmin load --by locality: exit %d, want a row of %s in local/z1/:\n%s%s", code, clusterName, out, errOut)
	}

	// A report for a cluster the node cannot see is skipped and counted
	// by its home, wherever its stream lands; the stream carries on.
	lb, err := grpc.NewClient(c.LBAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	st, err := loadv3.NewLoadReportingServiceClient(lb).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "lrs-raw", Cluster: "c1"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || !resp.GetSendAllClusters() || resp.GetLoadReportingInterval().AsDuration() != lrsInterval {
		t.Fatalf("raw LRS stream's first response: %v, %v; want send_all_clusters every %s", resp, err, lrsInterval)
	}
	unknown := &loadv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: "no-such-cluster", LoadReportInterval: durationpb.New(lrsInterval),
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalIssuedRequests: 1000, TotalSuccessfulRequests: 1000}},
	}}}
	if err := st.Send(unknown); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unknown cluster's report counted", func() (bool, string) {
		var n float64
		for _, r := range c.Replicas() {
			n += metricAt(t, r.HTTPAddr, "legation_lrs_rejected_total", `reason="unknown_cluster"`)
		}
		return n == 1, fmt.Sprintf("legation_lrs_rejected_total{unknown_cluster} = %v over the replicas", n)
	})
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Errorf("raw LRS stream after the unknown cluster's report: %v, want it to end OK", err)
	}
	if out, errOut, code := adminRun(conn, "", "load", "no-such-cluster", "--windows", "120"); code != 0 || !strings.Contains(out, "no load reported") {
		t.Errorf("xdsadmin load no-such-cluster: exit %d, want no load\n%s%s", code, out, errOut)
	}

	// Prometheus: the replicas' counters add up to the same.
	var prom float64
	for _, r := range c.Replicas() {
		prom += metricAt(t, r.HTTPAddr, "legation_lrs_requests_total", fmt.Sprintf(`cluster=%q,outcome="issued"`, clusterName))
	}
	if prom != float64(sum.Issued) {
		t.Errorf("legation_lrs_requests_total{issued} summed over the replicas = %v, want %d", prom, sum.Issued)
	}
}

package replica_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestNodeStatus: a replica records the nodes it serves in etcd, with
// their versions and NACKs; xdsadmin status shows them, and CSDS on
// --xds-addr serves them; the records go when the replica stops.
func TestNodeStatus(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Name = "replica-s"
	r := startXDS(t, cfg, rev)
	cc := dial(t, r)

	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("envoy-1", "c1"), TypeUrl: resource.Cluster.URL})
	cds := s.Expect()
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Cluster.URL, VersionInfo: "", ResponseNonce: cds.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster a: bad thing"}})

	client := e.Etcd.Client(t)
	var ns status.NodeStatus
	xdstest.WaitFor(t, "envoy-1's status record with the NACK", func() (bool, string) {
		var err error
		ns, err = status.Get(context.Background(), client, e.prefix, "envoy-1")
		if err != nil {
			return false, err.Error()
		}
		return ns.Home == "replica-s" && ns.Types["cluster"].LastNack != "", jsonString(ns)
	})
	if ts := ns.Types["cluster"]; ts.VersionSent != cds.GetVersionInfo() || ts.NackVersion != cds.GetVersionInfo() || !strings.Contains(ts.LastNack, "bad thing") || ns.Group != "c1" {
		t.Errorf("status record: %s", jsonString(ns))
	}

	var out, errOut bytes.Buffer
	args := []string{"--etcd-endpoints", e.Etcd.Endpoint, "--etcd-prefix", e.prefix, "-o", "json", "status", "envoy-1"}
	if code := adminctl.Run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin status: exit %d: %s", code, &errOut)
	}
	var shown status.NodeStatus
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil {
		t.Fatalf("xdsadmin status -o json: %v in %s", err, &out)
	}
	if shown.Home != "replica-s" || shown.Types["cluster"].LastNack == "" {
		t.Errorf("xdsadmin status: %s", &out)
	}

	resp, err := statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(context.Background(), &statusv3.ClientStatusRequest{
		NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "envoy-1"}}}},
	})
	if err != nil {
		t.Fatalf("CSDS: %v", err)
	}
	if len(resp.GetConfig()) != 1 || resp.GetConfig()[0].GetNode().GetId() != "envoy-1" {
		t.Fatalf("CSDS: %v", resp)
	}
	var found bool
	for _, g := range resp.GetConfig()[0].GetGenericXdsConfigs() {
		if g.GetTypeUrl() == resource.Cluster.URL {
			found = true
			if g.GetClientStatus().String() != "NACKED" || !strings.Contains(g.GetErrorState().GetDetails(), "bad thing") {
				t.Errorf("CSDS cluster entry: %v", g)
			}
		}
	}
	if !found {
		t.Errorf("CSDS: no cluster entry in %v", resp)
	}
	checkDebugNacks(t, r, rev)

	r.stop(t)
	if _, err := status.Get(context.Background(), client, e.prefix, "envoy-1"); err == nil {
		t.Error("the status record outlived its replica's graceful stop")
	}
}

// checkDebugNacks: /debug/nacks traces envoy-1's rejection to the apply
// that wrote revision rev, the one it rejects, as xdsadmin nacks does.
func checkDebugNacks(t *testing.T, r *running, rev int64) {
	t.Helper()
	code, body := get(t, r, "/debug/nacks")
	var got struct {
		Rejections []status.Rejection `json:"rejections"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
		t.Fatalf("/debug/nacks: %d %s (%v)", code, body, err)
	}
	if len(got.Rejections) != 1 || got.Rejections[0].Nodes != 1 || got.Rejections[0].NodeIDs[0] != "envoy-1" ||
		len(got.Rejections[0].Applies) != 1 || got.Rejections[0].Applies[0].Revision != rev || got.Rejections[0].Replicas[0] != "replica-s" {
		t.Errorf("/debug/nacks: %s; want envoy-1's rejection traced to the apply of revision %d", body, rev)
	}
	if code, body := get(t, r, "/debug/nacks?since=-1s"); code != http.StatusBadRequest {
		t.Errorf("/debug/nacks?since=-1s: %d %s, want 400", code, body)
	}
}

package replica_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// xdsadmin runs xdsadmin with args on e in-process (the adminctl code
// path) and returns its stdout, failing the test on a non-zero exit.
func xdsadmin(t *testing.T, e *xdsEnv, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	all := append([]string{"--etcd-endpoints", e.Etcd.Endpoint, "--etcd-prefix", e.prefix}, args...)
	if code := adminctl.Run(context.Background(), all, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, &out, &errOut)
	}
	return out.String()
}

// TestNacksAtScale: 1,000 simulated clients (ADS streams over 20
// connections to one replica) reject an apply written with a message;
// within 5 s of the last NACK, `xdsadmin nacks -o json` names the apply,
// its author and message (as `xdsadmin history` shows them), and 1,000
// rejecting nodes; the replica's legation_xds_rejected_nodes{type} and
// legation_xds_rejected_nodes_by_apply{apply} count them too.
func TestNacksAtScale(t *testing.T) {
	const clients, conns = 1000, 20
	const message = "tighter connect timeouts"
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Standalone = true
	reg := cfg.Registerer.(*prometheus.Registry)
	r := startXDS(t, cfg, rev)

	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		ccs[i] = xdstest.Dial(t, r.XDSAddr())
	}
	streams := make([]*xdstest.SotWStream, clients)
	for i := range streams {
		s := xdstest.OpenSotW(t, ccs[i%conns])
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(fmt.Sprintf("envoy-%04d", i), "c1"), TypeUrl: resource.Cluster.URL})
		streams[i] = s
	}
	for _, s := range streams {
		s.Ack(s.Expect())
	}

	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte(tracedClusterYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	xdsadmin(t, e, "apply", "-m", message, "-f", file)
	var history []struct{ ID, By, Message string }
	if err := json.Unmarshal([]byte(xdsadmin(t, e, "-o", "json", "history", "--limit", "1")), &history); err != nil || len(history) != 1 {
		t.Fatalf("xdsadmin history -o json: %v, %+v", err, history)
	}
	want := history[0]
	for _, s := range streams {
		resp := s.Expect()
		s.Nack(resp, fmt.Sprint(rev), "cluster traced: rejected")
	}
	nacked := time.Now()

	var got []status.Rejection
	xdstest.WaitFor(t, "xdsadmin nacks naming the apply and its 1,000 rejecting nodes", func() (bool, string) {
		out := xdsadmin(t, e, "-o", "json", "nacks")
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("xdsadmin nacks -o json: %v in %s", err, out)
		}
		return len(got) == 1 && got[0].Nodes == clients, out
	})
	took := time.Since(nacked)
	t.Logf("xdsadmin nacks showed %d rejecting nodes %s after the last NACK", got[0].Nodes, took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("xdsadmin nacks showed the rejections %s after the NACKs, want within 5s", took)
	}
	g := got[0]
	if len(g.Applies) != 1 || g.Applies[0].ID != want.ID || g.Applies[0].By != want.By || g.Applies[0].Message != message || want.By == "" {
		t.Errorf("nacks traced to %+v, want the apply %+v with message %q", g.Applies, want, message)
	}
	if g.Type != "cluster" || g.Nack != "cluster traced: rejected" || len(g.NodeIDs) != status.MaxRejectionNodeIDs {
		t.Errorf("nacks group %+v: want clusters rejected with the clients' message, naming %d nodes", g, status.MaxRejectionNodeIDs)
	}
	xdstest.WaitFor(t, "the replica's rejection metrics at 1,000", func() (bool, string) {
		byType := xdstest.GaugeSum(t, reg, "legation_xds_rejected_nodes", "type", "cluster")
		byApply := xdstest.GaugeSum(t, reg, "legation_xds_rejected_nodes_by_apply", "apply", want.ID)
		return byType == clients && byApply == clients, fmt.Sprintf("by type %v, by apply %v", byType, byApply)
	})
}

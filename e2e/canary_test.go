package e2e

// A canary rollout on a whole cluster: grpc-go's xDS clients and raw
// clients through HAProxy on three replicas, with the replica that leads
// the rollout controller killed while each rollout runs.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// canaryShare is the selector of the rollouts: a share of the nodes.
const canaryShare = "20%"

// isCanary reports whether canaryShare picks node id.
func isCanary(id string) bool { return rollout.Bucket(id) < 2000 }

// beginRollout applies doc as a canary rollout to canaryShare with a 5s
// bake and returns it.
func beginRollout(t *testing.T, c *localcluster.TestCluster, doc, msg string) *rollout.Rollout {
	t.Helper()
	out, errOut, code := clusterAdmin(c, doc, "-o", "json", "apply", "-f", "-", "--canary", canaryShare, "--bake", "5s", "-m", msg)
	if code != 0 {
		t.Fatalf("apply --canary: exit %d\n%s\n%s", code, out, errOut)
	}
	var st struct{ Rollout *rollout.Rollout }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Rollout == nil {
		t.Fatalf("apply --canary output %q: %v", out, err)
	}
	return st.Rollout
}

// killLeader kills the replica that leads the rollout controller and
// returns its index.
func killLeader(t *testing.T, c *localcluster.TestCluster, cli *clientv3.Client) int {
	t.Helper()
	resp, err := cli.Get(context.Background(), keyspace.RolloutElection(keyspace.DefaultPrefix)+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no rollout controller leader: %v", err)
	}
	leader := string(resp.Kvs[0].Value)
	for i, r := range c.Replicas() {
		if r.Name == leader {
			c.KillReplica(i)
			t.Logf("killed %s, the rollout controller's leader", leader)
			return i
		}
	}
	t.Fatalf("leader %q is no replica of the cluster", leader)
	return -1
}

// waitRollout waits until rollout id ended, and returns it.
func waitRollout(t *testing.T, c *localcluster.TestCluster, id string) *rollout.Rollout {
	t.Helper()
	var r struct{ Rollout *rollout.Rollout }
	waitFor(t, "rollout "+id+" to end", func() (bool, string) {
		out, errOut, code := clusterAdmin(c, "", "-o", "json", "rollout", "status", id)
		if code != 0 {
			return false, errOut
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return false, err.Error()
		}
		return r.Rollout.State != rollout.Running, out
	})
	return r.Rollout
}

// TestClusterCanary: a rollout that grpc-go accepts (svc-cluster's
// endpoint moved to another backend, and the pair at generation 2)
// reaches the canary nodes first and no other node, then, promoted by
// the controller once baked, every node; a rollout of a listener grpc-go
// rejects (with the pair at generation 3) reaches the canary nodes
// alone, is aborted by the controller, and its canary nodes return to
// the current resources while their RPCs go on. The controller's leader is killed while each runs.
func TestClusterCanary(t *testing.T) {
	checkLeaks(t)
	c, f, _ := startFleetCluster(t, clusterConfig(clusterFlags), "can", canaryMix)
	cli := etcdClient(t, c.EtcdEndpoints)
	b := startBackend(t)
	canaries := 0
	for _, id := range f.ids() {
		if isCanary(id) {
			canaries++
		}
	}
	t.Logf("%s picks %d of %d nodes", canaryShare, canaries, len(f.ids()))

	// An accepted change.
	r1 := beginRollout(t, c, endpointsYAML(b.port)+"---\n"+pairYAML(2), "svc to a new backend")
	victim := killLeader(t, c, cli)
	for _, g := range f.grpc {
		if isCanary(g.id) {
			waitReachesFor(t, g, b.port)
		}
	}
	for _, cl := range f.raw {
		if isCanary(cl.id) {
			waitFor(t, cl.String()+" at generation 2", func() (bool, string) { return cl.holds(2, r1.Revision) })
		}
	}
	checkOthersElsewhere(t, c, f, r1.ID, b.port)
	ended := waitRollout(t, c, r1.ID)
	if ended.State != rollout.Promoted {
		t.Fatalf("the accepted rollout ended %s: %s", ended.State, ended.Reason)
	}
	t.Logf("promoted: %s", ended.Reason)
	promoted := applyRevision(t, c, ended.PromotedBy)
	for _, cl := range f.raw {
		if n := genResponsesBefore(cl, 2, promoted); !isCanary(cl.id) && n != 0 {
			t.Errorf("%s, not a canary node, was sent generation 2 in %d responses before the promotion (revision %d)", cl, n, promoted)
		}
	}
	for _, g := range f.grpc {
		waitReachesFor(t, g, b.port)
	}
	f.waitSynced(t, 2, r1.Revision)
	c.StartReplica(victim)
	c.WaitRing()

	// A change grpc-go rejects.
	r2 := beginRollout(t, c, listenerYAML(false)+"---\n"+pairYAML(3), "a listener grpc-go rejects")
	killLeader(t, c, cli)
	ended = waitRollout(t, c, r2.ID)
	if ended.State != rollout.Aborted || !strings.Contains(ended.Reason, "rejected it") {
		t.Fatalf("the rejected rollout ended %s: %s; want aborted for its rejections", ended.State, ended.Reason)
	}
	t.Logf("aborted: %s", ended.Reason)
	for _, cl := range f.raw {
		got := genResponsesBefore(cl, 3, 1<<62)
		if isCanary(cl.id) && got == 0 {
			t.Errorf("%s, a canary node, was never sent the rollout's change", cl)
		}
		if !isCanary(cl.id) && got != 0 {
			t.Errorf("%s, not a canary node, was sent the rollout's change in %d responses", cl, got)
		}
		waitFor(t, cl.String()+" back at generation 2", func() (bool, string) { return cl.holds(2, r1.Revision) })
	}
	for _, g := range f.grpc {
		waitReachesFor(t, g, b.port) // canary nodes keep serving, on the current listener
	}
}

// waitReachesFor waits until g's RPCs are answered by the backend on
// port.
func waitReachesFor(t *testing.T, g *grpcClient, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := reaches(ctx, g.cc, port); err != nil {
		t.Fatalf("grpc-go client %s never reached port %d: %v", g.id, port, err)
	}
}

// checkOthersElsewhere checks that the grpc-go clients the rollout does
// not pick are answered elsewhere than port while rollout id runs (a
// check that ends after the rollout proves nothing and is skipped).
func checkOthersElsewhere(t *testing.T, c *localcluster.TestCluster, f *fleet, id string, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var reached []string
	for _, g := range f.grpc {
		if p, err := call(ctx, g.cc); err == nil && p == port && !isCanary(g.id) {
			reached = append(reached, g.id)
		}
	}
	out, _, _ := clusterAdmin(c, "", "-o", "json", "rollout", "status", id)
	if !strings.Contains(out, `"state": "running"`) {
		t.Logf("the rollout ended before the grpc-go clients outside it were checked")
		return
	}
	if len(reached) > 0 {
		t.Errorf("grpc-go clients %v, not canary nodes, reached the rollout's backend while it ran", reached)
	}
}

// applyRevision is the revision apply id wrote (its first transaction).
func applyRevision(t *testing.T, c *localcluster.TestCluster, id string) int64 {
	t.Helper()
	out, errOut, code := clusterAdmin(c, "", "-o", "json", "history")
	if code != 0 {
		t.Fatalf("history: %s", errOut)
	}
	var entries []struct {
		ID        string
		Revisions []int64
	}
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.ID == id {
			return e.Revisions[0]
		}
	}
	t.Fatalf("apply %s not in the history", id)
	return 0
}

// genResponsesBefore counts the responses cl received, at a version
// before rev, carrying a resource of the pair at generation gen.
func genResponsesBefore(cl *loadClient, gen int, rev int64) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, r := range cl.resps {
		if parseRev(r.Version) >= rev {
			continue
		}
		for _, x := range r.Res {
			if x.Gen == gen {
				n++
				break
			}
		}
	}
	return n
}

package adminctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// TestNacks: the nodes that reject a type are grouped by the apply that
// wrote what they reject (after the version they acknowledged, up to the
// one they reject, in their group or the default scope) and by message,
// most nodes first, each group naming the apply's author, message and
// resources, a few node ids and their replicas; a rejection the history
// does not cover is grouped under no apply; --since keeps recent applies.
func TestNacks(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	good := applyID(t, h, "-f", writeFile(t, "v1.yaml", docs(clusterYAML("a", "1s"), clusterYAML("b", "1s"))))
	r1 := e.dataRevision(t)
	bad := applyID(t, h, "-m", "tighter timeouts", "-f", writeFile(t, "v2.yaml", docs(clusterYAML("a", "0.001s"), clusterYAML("b", "1s"))))
	r2 := e.dataRevision(t)
	applyID(t, h, "--scope", "other", "-f", writeFile(t, "o.yaml", clusterYAML("o", "1s"))) // another group's
	r3 := e.dataRevision(t)

	rejects := func(acked, nacked int64, msg string) map[string]status.TypeStatus {
		return map[string]status.TypeStatus{"cluster": {VersionSent: fmt.Sprint(nacked), VersionAcked: fmt.Sprint(acked), NackVersion: fmt.Sprint(nacked), LastNack: msg}}
	}
	const msg = "cluster a: connect_timeout below 1ms"
	h.statusWriter("replica-a",
		nodeStatus("n1", "edge", rejects(r1, r3, msg)),
		nodeStatus("n2", "edge", rejects(r1, r2, msg)),
		nodeStatus("n3", "edge", map[string]status.TypeStatus{"cluster": {VersionSent: fmt.Sprint(r3), VersionAcked: fmt.Sprint(r3)}}),
	)
	h.statusWriter("replica-b",
		nodeStatus("n4", "edge", rejects(r1, r2, msg)),
		nodeStatus("n5", "edge", rejects(0, 1, "something older")),
	)

	var groups []status.Rejection
	if err := json.Unmarshal([]byte(h.mustRun("nacks", "-o", "json")), &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 {
		t.Fatalf("%d groups, want 2: %+v", len(groups), groups)
	}
	g := groups[0]
	if g.Nodes != 3 || g.Type != "cluster" || g.Nack != msg || strings.Join(g.NodeIDs, ",") != "n1,n2,n4" || strings.Join(g.Replicas, ",") != "replica-a,replica-b" {
		t.Errorf("first group %+v: want 3 nodes (n1, n2, n4) of replica-a and replica-b rejecting clusters", g)
	}
	if len(g.Applies) != 1 || g.Applies[0].ID != bad || g.Applies[0].Message != "tighter timeouts" || g.Applies[0].Revision != r2 ||
		!strings.HasPrefix(g.Applies[0].By, "xdsadmin/") || strings.Join(g.Applies[0].Resources, ",") != "cluster/default/a" {
		t.Errorf("first group traced to %+v; want apply %s (tighter timeouts) and its cluster a, not %s nor scope other's", g.Applies, bad, good)
	}
	if u := groups[1]; u.Nodes != 1 || len(u.Applies) != 0 || u.NodeIDs[0] != "n5" {
		t.Errorf("second group %+v: want n5's rejection, traced to no apply", u)
	}

	table := fields(h.mustRun("nacks"))
	if got := strings.Join(table[0], " "); got != "APPLY TYPE NODES REPLICAS BY MESSAGE NACK" {
		t.Errorf("header %q", got)
	}
	if table[1][0] != bad || table[1][2] != "3" || table[2][0] != "-" {
		t.Errorf("table rows %q", table[1:])
	}
	if err := json.Unmarshal([]byte(h.mustRun("nacks", "--since", "1h", "-o", "json")), &groups); err != nil || len(groups) != 1 {
		t.Errorf("--since 1h: %d groups, %v; want the one traced to an apply", len(groups), err)
	}
	if r := h.run("nacks", "--since", "-1s"); r.code == 0 || !strings.Contains(r.stderr, "--since -1s: must not be negative") {
		t.Errorf("nacks --since -1s: %s", r)
	}
}

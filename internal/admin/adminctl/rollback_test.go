package adminctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// snapshot is what a harness's prefix holds: each resource's body by key.
func snapshot(t *testing.T, h *harness) map[string]proto.Message {
	t.Helper()
	out := map[string]proto.Message{}
	for _, r := range h.list() {
		out[r.Key.String()] = r.Envelope.GetBody()
	}
	return out
}

// sameResources fails t unless got holds exactly want's resources, each
// body equal field by field.
func sameResources(t *testing.T, what string, want, got map[string]proto.Message) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !proto.Equal(w, g) {
			t.Errorf("%s: %s differs from before (present %v)", what, k, ok)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s was not there before", what, k)
		}
	}
}

// applyID applies file with args and returns the apply's id.
func applyID(t *testing.T, h *harness, args ...string) string {
	t.Helper()
	var out applyOutput
	if err := json.Unmarshal([]byte(h.mustRun(append([]string{"-o", "json", "apply"}, args...)...)), &out); err != nil {
		t.Fatal(err)
	}
	return out.ApplyID
}

// TestRollback: rolling back an apply that changed, deleted and created
// resources restores exactly what was there before, at a new, higher
// revision, also once etcd compacted the revisions before it; it asks
// first unless --yes; a later change to the same resources refuses it,
// naming the resource and the later apply, unless --force.
func TestRollback(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	applyID(t, h, "-f", writeFile(t, "v1.yaml", docs(clusterYAML("a", "1s"), clusterYAML("b", "1s"), endpointYAML("a", 8080))))
	before := snapshot(t, h)
	second := applyID(t, h, "-m", "v2", "--prune", "--prune-types", "cluster", "-f",
		writeFile(t, "v2.yaml", docs(clusterYAML("a", "2s"), clusterYAML("c", "1s"))))
	h.mustRun("delete", "endpoint", "a")
	third := applyID(t, h, "-f", writeFile(t, "ep.yaml", endpointYAML("a", 9090)))
	rev := e.dataRevision(t)
	if _, err := e.client.Compact(testbase.Context(t), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	// The endpoint's delete and re-creation came after: a conflict.
	r := h.run("rollback", "--yes", third)
	if r.code != 0 {
		t.Fatalf("rollback of the last apply: %s", r)
	}
	r = h.run("rollback", "--yes", third)
	if r.code == 0 || !strings.Contains(r.stderr, "endpoint/default/a: deleted since by apply") {
		t.Errorf("rolling back twice: %s\nwant a conflict naming the rollback", r)
	}

	// Asked, and not confirmed: nothing written.
	at := e.dataRevision(t)
	r = h.runStdin("n\n", "rollback", second)
	if r.code == 0 || !strings.Contains(r.stderr, "would write:") || !strings.Contains(r.stderr, "rollback not confirmed; nothing was written") {
		t.Errorf("rollback answered no: %s", r)
	}
	if e.dataRevision(t) != at {
		t.Errorf("a rollback not confirmed wrote")
	}
	r = h.runStdin("y\n", "rollback", second, "-m", "v2 broke it")
	if r.code != 0 {
		t.Fatalf("rollback answered yes: %s", r)
	}
	after := e.dataRevision(t)
	if after <= rev {
		t.Errorf("the rollback wrote revision %d, want above %d", after, rev)
	}
	sameResources(t, "after rolling back v2", withEndpoint(t, h, before), snapshot(t, h))

	var entries []historyEntry
	if err := json.Unmarshal([]byte(h.mustRun("history", "--limit", "1", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Kind != store.KindRollback || entries[0].Message != "v2 broke it" || entries[0].Revisions[0] != after {
		t.Errorf("history of the rollback: %+v", entries)
	}
}

// withEndpoint is want with endpoint a as h holds it now: the rollback of
// v2 does not touch the endpoint, which later applies changed.
func withEndpoint(t *testing.T, h *harness, want map[string]proto.Message) map[string]proto.Message {
	t.Helper()
	out := map[string]proto.Message{}
	for k, v := range want {
		out[k] = v
	}
	const ep = "endpoint/default/a"
	if now, ok := snapshot(t, h)[ep]; ok {
		out[ep] = now
	} else {
		delete(out, ep)
	}
	return out
}

// TestRollbackConflict: a later apply to a resource the rolled back apply
// wrote makes the rollback fail, naming it and the later apply, writing
// nothing; --force undoes the apply over it.
func TestRollbackConflict(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	applyID(t, h, "-f", writeFile(t, "v1.yaml", clusterYAML("a", "1s")))
	before := snapshot(t, h)
	second := applyID(t, h, "-f", writeFile(t, "v2.yaml", docs(clusterYAML("a", "2s"), clusterYAML("b", "1s"))))
	later := applyID(t, h, "-m", "a again", "-f", writeFile(t, "v3.yaml", clusterYAML("a", "3s")))
	at := e.dataRevision(t)
	r := h.run("rollback", "--yes", second)
	want := fmt.Sprintf("cluster/default/a: changed at revision %d by apply %s (", at, later)
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, ": a again)") || !strings.Contains(r.stderr, "--force undoes it anyway") {
		t.Errorf("rollback over a later change: %s\nwant an error holding %q", r, want)
	}
	if e.dataRevision(t) != at {
		t.Errorf("a refused rollback wrote")
	}
	h.mustRun("rollback", "--yes", "--force", second)
	sameResources(t, "after a forced rollback", before, snapshot(t, h))
}

// TestRollbackBadInput: an id the history does not hold, and bad flags,
// are refused, naming what is wrong, and nothing is written.
func TestRollbackBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	applyID(t, h, "-f", writeFile(t, "v1.yaml", clusterYAML("a", "1s")))
	at := e.dataRevision(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollback", "--yes", "20200101-000000.000000-000000"}, `not in the history: apply "20200101-000000.000000-000000"`},
		{[]string{"rollback"}, "accepts 1 arg(s), received 0"},
		{[]string{"rollback", "--yes", "x", "-m", "a\tb"}, "--message: holds a control character"},
		{[]string{"rollback", "--yes", "x", "--lock-timeout", "0s"}, "--lock-timeout"},
	} {
		r := h.run(tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %s\nwant a failure naming %q", tc.args, r, tc.want)
		}
	}
	if e.dataRevision(t) != at {
		t.Errorf("refused rollbacks wrote")
	}
}

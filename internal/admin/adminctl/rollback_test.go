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
		{[]string{"rollback"}, "give the apply id to undo, or --to REVISION"},
		{[]string{"rollback", "x", "--to", "3"}, `give the apply id "x" or --to 3, not both`},
		{[]string{"rollback", "x", "--scope", "edge"}, "--scope goes with --to"},
		{[]string{"rollback", "--to", "3", "--force"}, "--force goes with an apply id"},
		{[]string{"rollback", "--to", "3", "--scope", "Bad Scope"}, "--scope"},
		{[]string{"rollback", "--yes", "--to", "0"}, `--to: revision "0": want a positive integer`},
		{[]string{"rollback", "--yes", "--to", "999999"}, "--to 999999: newer than etcd's current revision"},
		{[]string{"rollback", "--yes", "--to", "no-such-apply"}, `--to "no-such-apply": neither a revision nor an apply id of the history`},
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

// TestRollbackTo: --to returns a scope to what it held at a revision, or
// at an apply id's, field by field, at a new revision, reading etcd while
// it holds the revision and rebuilding it from the history once etcd
// compacted it; other scopes are left alone; a revision the history does
// not reach back to is refused, writing nothing.
func TestRollbackTo(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	v1 := applyID(t, h, "--scope", "edge", "-f", writeFile(t, "v1.yaml", docs(clusterYAML("a", "1s"), clusterYAML("b", "1s"), endpointYAML("a", 8080))))
	rev1 := e.dataRevision(t)
	then := snapshot(t, h)
	applyID(t, h, "--scope", "edge", "-f", writeFile(t, "v2.yaml", docs(clusterYAML("a", "2s"), clusterYAML("c", "1s"))))
	h.mustRun("delete", "cluster", "b", "--scope", "edge")
	applyID(t, h, "-f", writeFile(t, "other.yaml", clusterYAML("elsewhere", "1s"))) // scope default
	other := snapshot(t, h)["cluster/default/elsewhere"]

	// While etcd holds the revision.
	h.mustRun("rollback", "--yes", "--to", fmt.Sprint(rev1), "--scope", "edge")
	got := snapshot(t, h)
	if !proto.Equal(got["cluster/default/elsewhere"], other) {
		t.Errorf("the rollback of scope edge changed scope default")
	}
	delete(got, "cluster/default/elsewhere")
	sameResources(t, "back to the first apply's revision", then, got)

	// Once etcd compacted it: rebuilt from the history.
	applyID(t, h, "--scope", "edge", "-f", writeFile(t, "v3.yaml", docs(clusterYAML("a", "3s"), clusterYAML("d", "1s"))))
	if _, err := e.client.Compact(testbase.Context(t), e.dataRevision(t), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	before := e.dataRevision(t)
	h.mustRun("rollback", "--yes", "--to", v1, "--scope", "edge")
	if e.dataRevision(t) <= before {
		t.Errorf("the rollback wrote no new revision")
	}
	got = snapshot(t, h)
	delete(got, "cluster/default/elsewhere")
	sameResources(t, "back to the first apply, after compaction", then, got)

	// The history of another prefix keeps 1 record: not back to rev1.
	h2 := e.newHarness(t)
	applyID(t, h2, "-f", writeFile(t, "x.yaml", clusterYAML("x", "1s")))
	old := e.dataRevision(t)
	applyID(t, h2, "--history-keep", "1", "-f", writeFile(t, "y.yaml", clusterYAML("x", "2s")))
	applyID(t, h2, "--history-keep", "1", "-f", writeFile(t, "z.yaml", clusterYAML("x", "3s")))
	if _, err := e.client.Compact(testbase.Context(t), e.dataRevision(t), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	at := e.dataRevision(t)
	r := h2.run("rollback", "--yes", "--to", fmt.Sprint(old))
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("etcd compacted revision %d, and the history kept (the oldest is at revision", old)) {
		t.Errorf("rollback past the history kept: %s", r)
	}
	if e.dataRevision(t) != at {
		t.Errorf("a refused rollback wrote")
	}
}

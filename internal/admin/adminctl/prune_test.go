package adminctl

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/testkit/storetest"
)

// clustersFile writes a file of n clusters named prefix0, prefix1, ...
func clustersFile(t *testing.T, prefix string, n int) string {
	t.Helper()
	var ds []string
	for i := range n {
		ds = append(ds, clusterYAML(fmt.Sprintf("%s%d", prefix, i), "1s"))
	}
	return writeFile(t, prefix+".yaml", docs(ds...))
}

// perType counts the harness's resources by "scope/type".
func (h *harness) perType() map[string]int {
	out := map[string]int{}
	for _, r := range h.list() {
		out[r.Scope+"/"+r.Type.Name]++
	}
	return out
}

// TestPruneByType: --prune deletes only the types the files hold,
// --prune-types and --prune-all-types widen it, --max-deletions refuses a
// large prune with nothing written, and --dry-run lists exactly the
// deletions.
func TestPruneByType(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	clusters := examples + "/clusters.yaml"

	t.Run("prune deletes only the types of the files", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		applyExamples(t, h, "--scope", "other")
		h.mustRun("apply", "-f", clustersFile(t, "stale", 2))

		rev := e.revision(t)
		dry := h.mustRun("apply", "-f", clusters, "--prune", "--dry-run")
		want := fmt.Sprintf(`unchanged  cluster  default  backend-a
unchanged  cluster  default  backend-b
unchanged  cluster  default  echo-cluster
deleted    cluster  default  stale0
deleted    cluster  default  stale1
(dry run) would be 0 created, 0 changed, 3 unchanged, 2 deleted; planned at revision %d, nothing written
`, rev)
		if dry != want {
			t.Errorf("dry run:\n%s\nwant:\n%s", dry, want)
		}
		if now := e.revision(t); now != rev {
			t.Errorf("dry run moved the revision from %d to %d", rev, now)
		}

		got := h.mustRun("apply", "-f", clusters, "--prune")
		want = fmt.Sprintf(`unchanged  cluster  default  backend-a
unchanged  cluster  default  backend-b
unchanged  cluster  default  echo-cluster
deleted    cluster  default  stale0
deleted    cluster  default  stale1
0 created, 0 changed, 3 unchanged, 2 deleted at revision %d
`, rev+lockWrites+1)
		if got != want {
			t.Errorf("prune:\n%s\nwant:\n%s", got, want)
		}
		wantCounts := map[string]int{
			"default/cluster": 3, "default/endpoint": 3, "default/listener": 2, "default/route": 2,
			"other/cluster": 3, "other/endpoint": 3, "other/listener": 2, "other/route": 2,
		}
		if diff := cmp.Diff(wantCounts, h.perType()); diff != "" {
			t.Errorf("resources after --prune (-want +got):\n%s", diff)
		}

		// --prune-types names the types instead.
		got = h.mustRun("apply", "-f", clusters, "--prune", "--prune-types", "listener,rds")
		if !strings.HasSuffix(got, "0 created, 0 changed, 3 unchanged, 4 deleted at revision "+fmt.Sprint(e.dataRevision(t))+"\n") ||
			!strings.Contains(got, "deleted    listener  default  echo") || strings.Contains(got, "deleted    endpoint") {
			t.Errorf("--prune-types listener,rds:\n%s", got)
		}
		delete(wantCounts, "default/listener")
		delete(wantCounts, "default/route")
		if diff := cmp.Diff(wantCounts, h.perType()); diff != "" {
			t.Errorf("resources after --prune-types (-want +got):\n%s", diff)
		}

		// --prune-all-types for the rest.
		got = h.mustRun("apply", "-f", clusters, "--prune", "--prune-all-types")
		if !strings.HasSuffix(got, "0 created, 0 changed, 3 unchanged, 3 deleted at revision "+fmt.Sprint(e.dataRevision(t))+"\n") {
			t.Errorf("--prune-all-types:\n%s", got)
		}
		delete(wantCounts, "default/endpoint")
		if diff := cmp.Diff(wantCounts, h.perType()); diff != "" {
			t.Errorf("resources after --prune-all-types (-want +got):\n%s", diff)
		}
	})

	t.Run("a prune beyond --max-deletions writes nothing", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		h.mustRun("apply", "-f", clustersFile(t, "old", 12))
		rev := e.dataRevision(t)
		before := h.perType()

		r := h.run("apply", "-f", clusters, "--prune")
		want := `xdsadmin: --prune would delete 12 resources (cluster in scope "default"), more than --max-deletions 10; nothing was written: check the list with --dry-run, then give --max-deletions 12 to go ahead` + "\n"
		if r.code != 1 || r.stderr != want || r.stdout != "" {
			t.Errorf("got %s\nwant stderr %q", r, want)
		}
		if now := e.dataRevision(t); now != rev {
			t.Errorf("a refused prune wrote: the revision moved from %d to %d", rev, now)
		}

		// The dry run lists every deletion, then the same refusal.
		r = h.run("apply", "-f", clusters, "--prune", "--dry-run")
		var deleted []string
		for _, l := range fields(r.stdout) {
			if l[0] == "deleted" {
				deleted = append(deleted, l[3])
			}
		}
		var wantDeleted []string
		for i := range 12 {
			wantDeleted = append(wantDeleted, fmt.Sprintf("old%d", i))
		}
		sort.Strings(wantDeleted)
		if diff := cmp.Diff(wantDeleted, deleted); diff != "" {
			t.Errorf("dry run deletions (-want +got):\n%s", diff)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "(dry run) the apply would fail: --prune would delete 12 resources") {
			t.Errorf("dry run beyond --max-deletions: %s", r)
		}

		// Prune all types: 12 clusters + 7 others.
		r = h.run("apply", "-f", clusters, "--prune", "--prune-all-types", "--max-deletions", "12")
		if r.code != 1 || !strings.Contains(r.stderr, "--prune would delete 19 resources (cluster, endpoint, listener, route, ") {
			t.Errorf("--prune-all-types --max-deletions 12: %s", r)
		}
		if diff := cmp.Diff(before, h.perType()); diff != "" {
			t.Errorf("refused prunes changed the resources (-want +got):\n%s", diff)
		}

		got := h.mustRun("apply", "-f", clusters, "--prune", "--max-deletions", "12")
		if !strings.HasSuffix(got, "0 created, 0 changed, 3 unchanged, 12 deleted at revision "+fmt.Sprint(e.dataRevision(t))+"\n") {
			t.Errorf("prune with --max-deletions 12:\n%s", got)
		}
	})

	t.Run("bad combinations", func(t *testing.T) {
		h := e.newHarness(t)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--prune-types", "cluster"}, "--prune-types needs --prune"},
			{[]string{"--prune-all-types"}, "--prune-all-types needs --prune"},
			{[]string{"--max-deletions", "50"}, "--max-deletions limits --prune: give --prune too"},
			{[]string{"--prune", "--prune-types", "cluster", "--prune-all-types"}, "--prune-types and --prune-all-types exclude each other: give one"},
			{[]string{"--prune", "--prune-types", "cluster,clusterz"}, `--prune-types: unknown resource type "clusterz" (known: `},
			{[]string{"--prune", "--max-deletions", "-1"}, "--max-deletions -1: must not be negative"},
		} {
			rev := e.revision(t)
			r := h.run(append([]string{"apply", "-f", clusters}, tc.args...)...)
			if r.code != 1 || !strings.HasPrefix(r.stderr, "xdsadmin: "+tc.want) {
				t.Errorf("%v: %s\nwant an error starting %q", tc.args, r, tc.want)
			}
			if now := e.revision(t); now != rev {
				t.Errorf("%v moved the revision", tc.args)
			}
		}
	})
}

// mustRunUnlocked runs a command that must succeed, without taking the
// scope's apply lock: a writer that does not lock.
func (h *harness) mustRunUnlocked(args ...string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	r := h.runIn(context.WithValue(ctx, noLockKey{}, true), "", args...)
	if r.code != 0 {
		h.t.Fatalf("xdsadmin %s (not locking): %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// TestApplyUnchangedKeyRace: applier A declares X (unchanged) and Y;
// applier B changes X between A's plan and its commit. B does not take
// the scope's apply lock that A holds (a writer that locks waits for A:
// the last subtest): A's compares must still catch it. A must not commit
// on its stale plan, nor report X unchanged while etcd holds B's X: it
// plans again (and then rewrites X, after B), or, if X keeps moving,
// fails naming X with nothing written.
func TestApplyUnchangedKeyRace(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	xy := func(x, y string) string { return docs(clusterYAML("x1", x), clusterYAML("y1", y)) }
	timeouts := func(t *testing.T, h *harness) map[string]string {
		out := map[string]string{}
		for _, r := range h.list() {
			got := h.mustRun("get", "cluster", r.Name, "-o", "json")
			m := regexp.MustCompile(`"connect_timeout":\s*"([^"]+)"`).FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("no connect_timeout in %s", got)
			}
			out[r.Name] = m[1]
		}
		return out
	}
	withHook := func(hook func(attempt int)) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		t.Cleanup(cancel)
		return context.WithValue(ctx, afterPlanKey{}, hook)
	}

	t.Run("A plans again after B moved X", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", writeFile(t, "xy.yaml", xy("1s", "1s")))
		xRev := e.revision(t)
		hook := func(attempt int) {
			if attempt == 1 {
				h.mustRunUnlocked("apply", "-f", writeFile(t, "x.yaml", clusterYAML("x1", "5s")))
			}
		}
		r := h.runIn(withHook(hook), "", "apply", "-f", writeFile(t, "xy2.yaml", xy("1s", "2s")))
		if r.code != 0 {
			t.Fatalf("A: %s", r)
		}
		// The apply before xRev wrote x1, then released its lock (two
		// deletions); A's lock takes two writes (its holder, its mutex key)
		// before A plans.
		wantErr := fmt.Sprintf("xdsadmin: planned at revision %d, but before the commit cluster/default/x1 changed (mod_revision %d -> %d); planned again at revision %d (attempt 2 of 3)\n",
			xRev+2, xRev-2, xRev+3, xRev+3)
		if r.stderr != wantErr {
			t.Errorf("A's stderr:\n%s\nwant:\n%s", r.stderr, wantErr)
		}
		want := fmt.Sprintf("changed  cluster  default  x1\nchanged  cluster  default  y1\n0 created, 2 changed, 0 unchanged, 0 deleted at revision %d\n", xRev+4)
		if got := strings.Join(strings.Fields(r.stdout), " "); got != strings.Join(strings.Fields(want), " ") {
			t.Errorf("A's output:\n%s\nwant:\n%s", r.stdout, want)
		}
		if diff := cmp.Diff(map[string]string{"x1": "1s", "y1": "2s"}, timeouts(t, h)); diff != "" {
			t.Errorf("etcd after A (-want +got):\n%s", diff)
		}
	})

	t.Run("A fails naming X when X keeps moving", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", writeFile(t, "xy.yaml", xy("1s", "1s")))
		hook := func(attempt int) {
			h.mustRunUnlocked("apply", "-f", writeFile(t, "x.yaml", clusterYAML("x1", fmt.Sprintf("%ds", 10+attempt))))
		}
		rev := e.revision(t)
		r := h.runIn(withHook(hook), "", "apply", "-f", writeFile(t, "xy2.yaml", xy("1s", "2s")))
		if r.code != 1 || strings.Count(r.stderr, "planned again") != 2 {
			t.Fatalf("A: %s\nwant a failure after two re-plans", r)
		}
		want := fmt.Sprintf("xdsadmin: store: resources changed since the plan was made; plan again: cluster/default/x1 changed (mod_revision %d -> %d) (tried 3 times; nothing was written)\n", rev+4, rev+5)
		if last := r.stderr[strings.LastIndex(r.stderr[:len(r.stderr)-1], "\n")+1:]; last != want {
			t.Errorf("A's error:\n%s\nwant:\n%s", last, want)
		}
		if diff := cmp.Diff(map[string]string{"x1": "13s", "y1": "1s"}, timeouts(t, h)); diff != "" {
			t.Errorf("etcd after A failed (-want +got):\n%s", diff)
		}
	})

	t.Run("a resource appearing where A prunes", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", writeFile(t, "xy.yaml", xy("1s", "1s")))
		hook := func(attempt int) {
			if attempt == 1 {
				h.mustRunUnlocked("apply", "-f", writeFile(t, "z.yaml", clusterYAML("z1", "1s")))
			}
		}
		r := h.runIn(withHook(hook), "", "apply", "-f", writeFile(t, "x.yaml", clusterYAML("x1", "1s")), "--prune")
		if r.code != 0 || !strings.Contains(r.stderr, "cluster/default/z1 was created (mod_revision") {
			t.Fatalf("A: %s\nwant a re-plan naming z", r)
		}
		if !strings.Contains(r.stdout, "deleted    cluster  default  z1") || !strings.Contains(r.stdout, "1 unchanged, 2 deleted") {
			t.Errorf("A's output:\n%s\nwant y and z deleted", r.stdout)
		}
		if diff := cmp.Diff(map[string]string{"x1": "1s"}, timeouts(t, h)); diff != "" {
			t.Errorf("etcd after A (-want +got):\n%s", diff)
		}
	})
	t.Run("A plans again after a write to a resource it does not name", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", writeFile(t, "xy.yaml", xy("1s", "1s")))
		hook := func(attempt int) {
			if attempt == 1 {
				h.mustRunUnlocked("apply", "-f", writeFile(t, "e.yaml", endpointYAML("other", 9000)))
			}
		}
		r := h.runIn(withHook(hook), "", "apply", "-f", writeFile(t, "xy2.yaml", xy("1s", "2s")))
		if r.code != 0 || !strings.Contains(r.stderr, "but before the commit another writer wrote to its scope (resources it does not name, or ones changed and changed back); planned again") {
			t.Fatalf("A: %s\nwant a re-plan saying another writer wrote to the scope", r)
		}
	})

	t.Run("a writer that locks waits for A", func(t *testing.T) {
		h := e.newHarness(t)
		h.mustRun("apply", "-f", writeFile(t, "xy.yaml", xy("1s", "1s")))
		var b result
		hook := func(attempt int) {
			b = h.run("delete", "cluster", "x1", "--lock-timeout", "1s")
			if attempt == 1 {
				// Another scope has a lock of its own.
				h.mustRun("apply", "-f", writeFile(t, "o.yaml", clusterYAML("o1", "1s")), "--scope", "other", "--lock-timeout", "1s")
			}
		}
		r := h.runIn(withHook(hook), "", "apply", "-f", writeFile(t, "xy2.yaml", xy("1s", "2s")))
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("A: %s\nwant a first-time success", r)
		}
		want := regexp.MustCompile(`^xdsadmin: --lock-timeout 1s expired waiting for the apply lock of scope "default", held by another apply or delete \(xdsadmin/\S+ since \S+ \(lease [0-9a-f]{16}\)\); nothing was written: try again, or raise --lock-timeout \(the lock of an xdsadmin that died is free within 10s\)\n$`)
		if b.code != 1 || !want.MatchString(b.stderr) {
			t.Errorf("B: %s\nwant stderr matching %s", b, want)
		}
		h.mustRun("delete", "cluster", "o1", "--scope", "other")
		if diff := cmp.Diff(map[string]string{"x1": "1s", "y1": "2s"}, timeouts(t, h)); diff != "" {
			t.Errorf("etcd after A (-want +got):\n%s", diff)
		}
		// Released: B goes ahead now.
		h.mustRun("delete", "cluster", "x1", "--lock-timeout", "1s")
		if r := h.run("apply", "-f", writeFile(t, "x.yaml", clusterYAML("x1", "1s")), "--lock-timeout", "0s"); r.code != 1 || r.stderr != "xdsadmin: --lock-timeout 0s: must be positive\n" {
			t.Errorf("--lock-timeout 0s: %s", r)
		}
	})
	t.Run("--timeout bounds the work, not the wait for the lock", func(t *testing.T) {
		h := e.newHarness(t)
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		held, err := h.store().LockScope(ctx, "default", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan result, 1)
		go func() {
			done <- h.runIn(ctx, "", "apply", "-f", writeFile(t, "x.yaml", clusterYAML("x1", "1s")), "--timeout", "1s", "--lock-timeout", "10s")
		}()
		time.Sleep(1500 * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("apply ended while the lock was held: %s", r)
		default:
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.code != 0 || !strings.Contains(r.stdout, "1 created") {
			t.Errorf("apply after the lock was released: %s", r)
		}
	})
}

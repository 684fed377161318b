package adminctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// examplesCreated is the output of applying examples/ to an empty scope,
// but for the summary line.
const examplesCreated = `created  cluster   default  backend-a
created  cluster   default  backend-b
created  cluster   default  echo-cluster
created  endpoint  default  backend-a
created  endpoint  default  backend-b
created  endpoint  default  echo-cluster
created  listener  default  echo
created  listener  default  ingress-http
created  route     default  echo-route
created  route     default  ingress-routes
`

// allowEmbedded lets cmp see the fields of the embedded change type.
var allowEmbedded = cmp.AllowUnexported(diffChange{}, watchLine{})

// applyExamples applies examples/ and returns the revision it made.
func applyExamples(t *testing.T, h *harness, extra ...string) int64 {
	t.Helper()
	h.mustRun(append([]string{"apply", "-f", examples}, extra...)...)
	return h.env.dataRevision(t)
}

// watchLines runs "watch -o json" with args until it has printed n lines,
// then interrupts it as Ctrl-C would, checks it exited with success, and
// returns the lines. during runs once the watch is started.
func watchLines(t *testing.T, h *harness, n int, during func(), args ...string) []watchLine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &testbase.LockedBuffer{}, &testbase.LockedBuffer{}
	done := make(chan int, 1)
	full := append([]string{"--etcd-endpoints", h.env.etcd.Endpoint, "--etcd-prefix", h.prefix, "watch", "-o", "json"}, args...)
	go func() {
		done <- run(ctx, full, strings.NewReader(""), out, errOut, func(string) (string, bool) { return "", false })
	}()
	if during != nil {
		during()
	}
	deadline := time.Now().Add(defaultTestTimeout)
	for strings.Count(out.String(), "\n") < n {
		select {
		case code := <-done:
			t.Fatalf("watch ended early with %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch printed no %d lines in %s; stdout:\n%s\nstderr:\n%s", n, defaultTestTimeout, out, errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch exited with %d after Ctrl-C; stderr:\n%s", code, errOut)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("watch did not end after its context was cancelled")
	}
	var got []watchLine
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var w watchLine
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("watch line %q: %v", l, err)
		}
		got = append(got, w)
	}
	return got
}

func TestCommands(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})

	t.Run("apply examples, then get clusters", func(t *testing.T) {
		h := e.newHarness(t)
		got := h.mustRun("apply", "-f", examples)
		rev := e.dataRevision(t)
		want := examplesCreated + fmt.Sprintf("10 created, 0 changed, 0 unchanged, 0 deleted at revision %d\n", rev)
		if got != want {
			t.Errorf("apply output:\n%s\nwant:\n%s", got, want)
		}
		r := fmt.Sprint(rev)
		// Releasing the apply's lock moved etcd's revision past it.
		now := fmt.Sprint(e.revision(t))
		for _, typ := range []string{"cluster", "clusters", "cds", resource.Cluster.URL} {
			got := fields(h.mustRun("get", typ))
			want := [][]string{
				{"TYPE", "SCOPE", "NAME", "MOD_REVISION", "LEASE", "TTL"},
				{"cluster", "default", "backend-a", r, "-", "-"},
				{"cluster", "default", "backend-b", r, "-", "-"},
				{"cluster", "default", "echo-cluster", r, "-", "-"},
				{"revision", now},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("get %s (-want +got):\n%s", typ, diff)
			}
		}
		got = h.mustRun("get", "listener", "echo", "--scope", "default")
		if !strings.Contains(got, "listener  default  echo") {
			t.Errorf("get listener echo:\n%s", got)
		}
	})

	t.Run("re-apply is all unchanged and the revision does not move", func(t *testing.T) {
		h := e.newHarness(t)
		rev := applyExamples(t, h)
		before := e.revision(t)
		got := h.mustRun("apply", "-f", examples)
		want := strings.ReplaceAll(examplesCreated, "created", "unchanged")
		// Planned once the lock was taken.
		want = fmt.Sprintf("%s0 created, 0 changed, 10 unchanged, 0 deleted at revision %d\n", want, before+lockWrites)
		if diff := cmp.Diff(fields(want), fields(got)); diff != "" {
			t.Errorf("re-apply (-want +got):\n%s", diff)
		}
		if now := e.dataRevision(t); now != rev {
			t.Errorf("a resource was written: revision moved from %d to %d", rev, now)
		}
	})

	t.Run("a modified endpoint is the one change", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		rev := e.revision(t) + lockWrites
		changed := strings.Replace(readExample(t, "endpoints.yaml"), "port_value: 8081", "port_value: 9091", 1)
		got := h.mustRun("apply", "-f", writeFile(t, "endpoints.yaml", changed))
		want := fmt.Sprintf(`changed    endpoint  default  backend-a
unchanged  endpoint  default  backend-b
unchanged  endpoint  default  echo-cluster
0 created, 1 changed, 2 unchanged, 0 deleted at revision %d
`, rev+1)
		if got != want {
			t.Errorf("apply output:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("dry run writes nothing", func(t *testing.T) {
		h := e.newHarness(t)
		rev := e.revision(t)
		got := h.mustRun("apply", "-f", examples, "--dry-run")
		want := examplesCreated + fmt.Sprintf("(dry run) would be 10 created, 0 changed, 0 unchanged, 0 deleted; planned at revision %d, nothing written\n", rev)
		if got != want {
			t.Errorf("dry run output:\n%s\nwant:\n%s", got, want)
		}
		var out applyOutput
		if err := json.Unmarshal([]byte(h.mustRun("apply", "-f", examples, "--dry-run", "-o", "json")), &out); err != nil {
			t.Fatal(err)
		}
		if !out.DryRun || out.Revision != rev || len(out.Revisions) != 0 || out.Summary.Created != 10 {
			t.Errorf("dry run json: %+v", out)
		}
		if now := e.revision(t); now != rev {
			t.Errorf("dry run moved the revision from %d to %d", rev, now)
		}
		if got, want := h.mustRun("get", "cluster"), fmt.Sprintf("no cluster resources at revision %d\n", rev); got != want {
			t.Errorf("get after dry run: %q, want %q", got, want)
		}
	})

	t.Run("prune deletes what the files do not name, in their scope only", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		applyExamples(t, h, "--scope", "other")
		got := h.mustRun("apply", "-f", examples+"/clusters.yaml", "-f", examples+"/endpoints.yaml", "--prune", "--prune-all-types")
		rev := e.dataRevision(t)
		want := fmt.Sprintf(`unchanged  cluster   default  backend-a
unchanged  cluster   default  backend-b
unchanged  cluster   default  echo-cluster
unchanged  endpoint  default  backend-a
unchanged  endpoint  default  backend-b
unchanged  endpoint  default  echo-cluster
deleted    listener  default  echo
deleted    listener  default  ingress-http
deleted    route     default  echo-route
deleted    route     default  ingress-routes
0 created, 0 changed, 6 unchanged, 4 deleted at revision %d
`, rev)
		if got != want {
			t.Errorf("prune output:\n%s\nwant:\n%s", got, want)
		}
		perScope := map[string]int{}
		for _, r := range h.list() {
			perScope[r.Scope]++
		}
		if diff := cmp.Diff(map[string]int{"default": 6, "other": 10}, perScope); diff != "" {
			t.Errorf("resources per scope after prune (-want +got):\n%s", diff)
		}
	})

	t.Run("ttl puts the resources under one lease", func(t *testing.T) {
		h := e.newHarness(t)
		got := h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "1m")
		rs := h.list()
		if len(rs) != 3 || rs[0].Lease == 0 {
			t.Fatalf("after apply --ttl: %d resources, first lease %d", len(rs), rs[0].Lease)
		}
		lease := fmt.Sprintf("%016x", rs[0].Lease)
		for _, r := range rs {
			if r.Lease != rs[0].Lease || r.Envelope.GetTtl().AsDuration() != time.Minute {
				t.Errorf("%s: lease %x ttl %s, want lease %s ttl 1m", r.Key, r.Lease, r.Envelope.GetTtl().AsDuration(), lease)
			}
		}
		if want := fmt.Sprintf("at revision %d, under lease %s (ttl 1m0s)\n", e.dataRevision(t), lease); !strings.HasSuffix(got, want) {
			t.Errorf("apply --ttl output:\n%s\nwant it to end with %q", got, want)
		}
		table := fields(h.mustRun("get", "cluster"))
		for _, row := range table[1 : len(table)-1] {
			// TYPE SCOPE NAME MOD_REVISION LEASE TTL: "1m0s (59s left)"
			if len(row) != 8 || row[4] != lease || row[5] != "1m0s" || !strings.HasPrefix(row[6], "(") || row[7] != "left)" {
				t.Errorf("get row %q: want lease %s and ttl 1m0s with time left", row, lease)
			}
		}
		// Written again without a TTL, they leave the lease.
		got = h.mustRun("apply", "-f", examples+"/clusters.yaml")
		if !strings.Contains(got, "0 created, 3 changed, 0 unchanged, 0 deleted") {
			t.Errorf("apply without ttl after ttl:\n%s", got)
		}
		for _, r := range h.list() {
			if r.Lease != 0 {
				t.Errorf("%s still under lease %x", r.Key, r.Lease)
			}
		}
	})

	t.Run("delete in one transaction; a missing name deletes nothing", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		got := h.mustRun("delete", "cluster", "backend-b", "echo-cluster")
		rev := e.dataRevision(t)
		want := fmt.Sprintf("deleted  cluster  default  backend-b\ndeleted  cluster  default  echo-cluster\n0 created, 0 changed, 0 unchanged, 2 deleted at revision %d\n", rev)
		if got != want {
			t.Errorf("delete output:\n%s\nwant:\n%s", got, want)
		}
		r := h.run("delete", "cds", "backend-a", "nope", "gone")
		// Read once the delete's lock was released.
		wantErr := fmt.Sprintf("xdsadmin: cluster \"nope\", \"gone\" not found in scope \"default\" at revision %d; nothing deleted\n", e.revision(t))
		if r.code != 1 || r.stderr != wantErr || r.stdout != "" {
			t.Errorf("delete of a missing name: %s\nwant stderr %q", r, wantErr)
		}
		if now := e.dataRevision(t); now != rev {
			t.Errorf("failed delete wrote: the revision moved from %d to %d", rev, now)
		}
		if len(h.list()) != 8 {
			t.Errorf("after deletes: %d resources, want 8", len(h.list()))
		}
	})

	t.Run("get at a past revision shows the old state", func(t *testing.T) {
		h := e.newHarness(t)
		r1 := applyExamples(t, h)
		h.mustRun("delete", "cluster", "backend-b")
		r2 := e.revision(t)
		rev1 := fmt.Sprint(r1)
		got := fields(h.mustRun("get", "cluster", "--revision", rev1))
		want := [][]string{
			{"TYPE", "SCOPE", "NAME", "MOD_REVISION", "LEASE", "TTL"},
			{"cluster", "default", "backend-a", rev1, "-", "-"},
			{"cluster", "default", "backend-b", rev1, "-", "-"},
			{"cluster", "default", "echo-cluster", rev1, "-", "-"},
			{"revision", rev1},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("get --revision %d (-want +got):\n%s", r1, diff)
		}
		out := h.mustRun("get", "cluster", "backend-b", "--scope", "default", "--revision", rev1, "-o", "yaml")
		if !strings.Contains(out, "\nname: backend-b\n") || !strings.HasPrefix(out, fmt.Sprintf("# 1 cluster resources at revision %d\n", r1)) {
			t.Errorf("get backend-b at %d -o yaml:\n%s", r1, out)
		}
		res := h.run("get", "cluster", "backend-b", "--scope", "default")
		if want := fmt.Sprintf("xdsadmin: cluster \"backend-b\" not found in scope \"default\" at revision %d\n", r2); res.code != 1 || res.stderr != want {
			t.Errorf("get of a deleted cluster: %s\nwant %q", res, want)
		}
		res = h.run("get", "cluster", "backend-b")
		if want := fmt.Sprintf("xdsadmin: cluster \"backend-b\" not found in any scope at revision %d\n", r2); res.code != 1 || res.stderr != want {
			t.Errorf("get of a deleted cluster in any scope: %s\nwant %q", res, want)
		}
	})

	t.Run("diff between revisions", func(t *testing.T) {
		h := e.newHarness(t)
		r1 := applyExamples(t, h)
		changed := strings.Replace(readExample(t, "endpoints.yaml"), "port_value: 8081", "port_value: 9091", 1)
		h.mustRun("apply", "-f", writeFile(t, "endpoints.yaml", changed))
		r2 := e.dataRevision(t)
		h.mustRun("delete", "cluster", "backend-b")
		h.mustRun("apply", "-f", writeFile(t, "new.yaml", clusterYAML("new-one", "1s")))
		r4 := e.dataRevision(t)
		now := e.revision(t)
		got := fields(h.mustRun("diff", fmt.Sprint(r1)))
		want := fields(fmt.Sprintf(`deleted  cluster   default  backend-b  (mod_revision %[1]d -> deleted)
created  cluster   default  new-one    (mod_revision %[3]d)
changed  endpoint  default  backend-a  (mod_revision %[1]d -> %[2]d)
1 created, 1 changed, 1 deleted from revision %[1]d to %[4]d
`, r1, r2, r4, now))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("diff %d (-want +got):\n%s", r1, diff)
		}
		var out diffOutput
		if err := json.Unmarshal([]byte(h.mustRun("diff", fmt.Sprint(r1), fmt.Sprint(r2), "-o", "json")), &out); err != nil {
			t.Fatal(err)
		}
		wantOut := diffOutput{From: r1, To: r2, Summary: diffSummary{Changed: 1}, Changes: []diffChange{{
			change:         change{Action: "changed", Type: "endpoint", Scope: "default", Name: "backend-a"},
			OldModRevision: r1, ModRevision: r2,
		}}}
		if diff := cmp.Diff(wantOut, out, allowEmbedded); diff != "" {
			t.Errorf("diff %d %d -o json (-want +got):\n%s", r1, r2, diff)
		}
		var y diffOutput
		if err := yaml.Unmarshal([]byte(h.mustRun("diff", fmt.Sprint(r1), fmt.Sprint(r2), "-o", "yaml")), &y); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantOut, y, allowEmbedded); diff != "" {
			t.Errorf("diff %d %d -o yaml (-want +got):\n%s", r1, r2, diff)
		}
	})

	t.Run("watch sees an apply as one revision with all its changes", func(t *testing.T) {
		h := e.newHarness(t)
		from := e.revision(t)
		var applied int64
		got := watchLines(t, h, 11, func() {
			applied = applyExamples(t, h)
			h.mustRun("delete", "route", "echo-route")
		}, "--revision", fmt.Sprint(from))
		var want []watchLine
		for _, l := range fields(examplesCreated) {
			want = append(want, watchLine{Revision: applied, change: change{Action: l[0], Type: l[1], Scope: l[2], Name: l[3]}})
		}
		// The delete's commit follows the apply's lock release and its own
		// lock.
		want = append(want, watchLine{Revision: applied + 2*lockWrites + 1, change: change{Action: "deleted", Type: "route", Scope: "default", Name: "echo-route"}})
		if diff := cmp.Diff(want, got, allowEmbedded); diff != "" {
			t.Errorf("watch (-want +got):\n%s", diff)
		}
	})

	t.Run("watch from now, table output", func(t *testing.T) {
		h := e.newHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, errOut := &testbase.LockedBuffer{}, &testbase.LockedBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"--etcd-endpoints", e.etcd.Endpoint, "--etcd-prefix", h.prefix, "watch"},
				strings.NewReader(""), out, errOut, func(string) (string, bool) { return "", false })
		}()
		// Without --revision the watch starts at the revision it reports.
		deadline := time.Now().Add(defaultTestTimeout)
		for !strings.Contains(errOut.String(), "watching changes after revision") {
			if time.Now().After(deadline) {
				t.Fatalf("watch did not start; stderr: %s", errOut)
			}
			time.Sleep(10 * time.Millisecond)
		}
		h.mustRun("apply", "-f", writeFile(t, "c.yaml", clusterYAML("watched", "1s")))
		rev := e.dataRevision(t)
		want := fmt.Sprintf("%d  created  cluster  default  watched\n", rev)
		for out.String() != want {
			if time.Now().After(deadline) {
				t.Fatalf("watch output %q, want %q", out, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("watch exit code %d after Ctrl-C, want 0; stderr: %s", code, errOut)
		}
	})

	t.Run("get -o yaml and -o json apply back unchanged", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		for _, format := range []string{"yaml", "json"} {
			for _, typ := range []string{"cluster", "endpoint", "listener", "route"} {
				rev := e.revision(t)
				out := h.mustRun("get", typ, "--scope", "default", "-o", format)
				r := h.runStdin(out, "apply", "-f", "-")
				n := 2
				if typ == "cluster" || typ == "endpoint" {
					n = 3
				}
				// Planned once the lock was taken.
				want := fmt.Sprintf("0 created, 0 changed, %d unchanged, 0 deleted at revision %d\n", n, rev+lockWrites)
				if r.code != 0 || !strings.HasSuffix(r.stdout, want) {
					t.Errorf("get %s -o %s | apply -f -: %s\nwant it to end with %q\ninput:\n%s", typ, format, r, want, out)
				}
				// Into another scope, byte for byte the same bodies.
				r = h.runStdin(out, "apply", "-f", "-", "--scope", "copy-"+format)
				if r.code != 0 {
					t.Fatalf("apply to copy scope: %s", r)
				}
			}
		}
		bodies := map[string]map[string]string{}
		for _, r := range h.list() {
			k := r.Type.Name + "/" + r.Name
			if bodies[k] == nil {
				bodies[k] = map[string]string{}
			}
			bodies[k][r.Scope] = string(r.Envelope.GetBody().GetValue())
		}
		for k, byScope := range bodies {
			if len(byScope) != 3 || byScope["default"] != byScope["copy-yaml"] || byScope["default"] != byScope["copy-json"] {
				t.Errorf("%s: bodies differ between the scopes default, copy-yaml and copy-json", k)
			}
		}
	})

	t.Run("a DiscoveryResponse document applies", func(t *testing.T) {
		h := e.newHarness(t)
		dr := `"@type": type.googleapis.com/envoy.service.discovery.v3.DiscoveryResponse
version_info: "7"
type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: dr-a
  type: STATIC
  connect_timeout: 1s
- "@type": type.googleapis.com/envoy.service.discovery.v3.Resource
  name: dr-b
  resource:
    "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: dr-b
    type: STATIC
    connect_timeout: 2s
`
		got := h.mustRun("apply", "-f", writeFile(t, "cds.yaml", dr))
		want := fmt.Sprintf("created  cluster  default  dr-a\ncreated  cluster  default  dr-b\n2 created, 0 changed, 0 unchanged, 0 deleted at revision %d\n", e.dataRevision(t))
		if got != want {
			t.Errorf("apply DiscoveryResponse:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		h := e.newHarness(t)
		r := h.runStdin(readExample(t, "clusters.yaml"), "apply", "-f", "-", "--scope", "edge")
		want := fmt.Sprintf("created  cluster  edge  backend-a\ncreated  cluster  edge  backend-b\ncreated  cluster  edge  echo-cluster\n3 created, 0 changed, 0 unchanged, 0 deleted at revision %d\n", e.dataRevision(t))
		if r.code != 0 || r.stdout != want {
			t.Errorf("apply -f -: %s\nwant stdout:\n%s", r, want)
		}
	})

	t.Run("scopes", func(t *testing.T) {
		h := e.newHarness(t)
		applyExamples(t, h)
		applyExamples(t, h, "--scope", "edge")
		if n := len(fields(h.mustRun("get", "cluster"))); n != 8 {
			t.Errorf("get cluster in every scope: %d lines, want header, 6 rows, revision", n)
		}
		got := fields(h.mustRun("get", "cluster", "--scope", "edge"))
		if len(got) != 5 {
			t.Fatalf("get cluster --scope edge: %q", got)
		}
		for _, row := range got[1:4] {
			if row[1] != "edge" {
				t.Errorf("get cluster --scope edge: row %q", row)
			}
		}
	})

	t.Run("apply output in json and yaml", func(t *testing.T) {
		h := e.newHarness(t)
		var js applyOutput
		if err := json.Unmarshal([]byte(h.mustRun("apply", "-f", examples+"/routes.yaml", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		rev := e.dataRevision(t)
		if !applyIDPattern.MatchString(js.ApplyID) {
			t.Errorf("apply id %q, want the history's form", js.ApplyID)
		}
		want := applyOutput{Revision: rev, Revisions: []int64{rev}, ApplyID: js.ApplyID, Summary: counts{Created: 2}, Changes: []change{
			{Action: "created", Type: "route", Scope: "default", Name: "echo-route"},
			{Action: "created", Type: "route", Scope: "default", Name: "ingress-routes"},
		}}
		if diff := cmp.Diff(want, js); diff != "" {
			t.Errorf("apply -o json (-want +got):\n%s", diff)
		}
		var y applyOutput
		if err := yaml.Unmarshal([]byte(h.mustRun("apply", "-f", examples+"/routes.yaml", "-o", "yaml")), &y); err != nil {
			t.Fatal(err)
		}
		// Planned once the lock was taken, after the first one's release.
		want.Revision = rev + 2*lockWrites
		want.Revisions = []int64{}
		want.ApplyID = "" // nothing written
		want.Summary = counts{Unchanged: 2}
		for i := range want.Changes {
			want.Changes[i].Action = "unchanged"
		}
		if diff := cmp.Diff(want, y); diff != "" {
			t.Errorf("apply -o yaml (-want +got):\n%s", diff)
		}
	})

	t.Run("flags from the environment; flags win", func(t *testing.T) {
		h := e.newHarness(t)
		h.vars["LEGATION_ETCD_ENDPOINTS"] = e.etcd.Endpoint
		h.vars["LEGATION_ETCD_PREFIX"] = h.prefix
		h.vars["LEGATION_OUTPUT"] = "json"
		r := h.runRaw(context.Background(), "", "apply", "-f", examples+"/routes.yaml")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "{") {
			t.Fatalf("apply configured by the environment: %s", r)
		}
		h.vars["LEGATION_ETCD_ENDPOINTS"] = "127.0.0.1:1"
		start := time.Now()
		r = h.run("get", "route", "-o", "table") // the flags name the live etcd
		if r.code != 0 || !strings.HasPrefix(r.stdout, "TYPE") || time.Since(start) > 2*time.Second {
			t.Errorf("flags over environment: %s (in %s)", r, time.Since(start))
		}
	})

	// Compaction drops history for every prefix: keep this last.
	t.Run("compacted revisions are clear errors", func(t *testing.T) {
		h := e.newHarness(t)
		r1 := applyExamples(t, h)
		h.mustRun("delete", "cluster", "backend-a")
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if _, err := e.client.Compact(ctx, e.revision(t)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"diff", fmt.Sprint(r1)}, fmt.Sprintf("xdsadmin: revision %d is compacted: etcd no longer holds its history", r1)},
			{[]string{"get", "cluster", "--revision", fmt.Sprint(r1)}, "revision compacted: etcd no longer holds that history"},
			// Changes after r1-1, starting with r1's.
			{[]string{"watch", "--revision", fmt.Sprint(r1 - 1)}, "revision compacted: etcd no longer holds that history"},
		} {
			r := h.run(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("xdsadmin %s: %s\nwant stderr to hold %q", strings.Join(tc.args, " "), r, tc.want)
			}
		}
	})
}

func TestParseRevision(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1", 1, false},
		{"9223372036854775807", 1<<63 - 1, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"x", 0, true},
		{"", 0, true},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := parseRevision(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("parseRevision(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

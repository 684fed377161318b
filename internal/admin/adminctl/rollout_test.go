package adminctl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// rolloutOf is the rollout of apply --canary's JSON output.
func rolloutOf(t *testing.T, out string) rolloutStatus {
	t.Helper()
	var st rolloutStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Rollout == nil {
		t.Fatalf("not a rollout (%v): %s", err, out)
	}
	return st
}

// TestRolloutCommands: apply --canary begins a rollout (warning that its
// selector picks no connected node), rollout list and status show it,
// a second rollout of the same resource is refused naming the first,
// abort and promote end rollouts with their reasons, and the history
// shows each step.
func TestRolloutCommands(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	h.mustRun("apply", "-f", writeFile(t, "v1.yaml", docs(clusterYAML("a", "1s"), clusterYAML("b", "1s"))))
	v2 := writeFile(t, "v2.yaml", docs(clusterYAML("a", "2s")))
	r := h.run("-o", "json", "apply", "-f", v2, "--canary", "10%", "--bake", "5s", "--max-rejections", "1", "--promote", "manual", "-m", "slower a")
	if r.code != 0 || !strings.Contains(r.stderr, "picks none of the 0 connected nodes") {
		t.Fatalf("apply --canary: %s\nwant a warning that it picks no connected node", r)
	}
	first := rolloutOf(t, r.stdout).Rollout
	if first.State != rollout.Running || first.Selector != "10%" || first.MaxRejections != 1 || first.Promote != rollout.PromoteManual ||
		first.Message != "slower a" || len(first.Resources) != 1 || first.Resources[0].Name != "a" {
		t.Errorf("rollout %+v", first)
	}
	if got := h.mustRun("get", "cluster", "a", "--scope", "default", "-o", "yaml"); !strings.Contains(got, "connect_timeout: 1s") {
		t.Errorf("a rollout changed the scope's resource:\n%s", got)
	}
	r = h.run("apply", "-f", v2, "--canary", "group:edge")
	if r.code == 0 || !strings.Contains(r.stderr, "is in rollout "+first.ID) {
		t.Errorf("a second rollout of the same resource: %s", r)
	}
	list := h.mustRun("rollout", "list")
	if !strings.Contains(list, first.ID) || !strings.Contains(list, "running") {
		t.Errorf("rollout list:\n%s", list)
	}
	st := h.mustRun("rollout", "status", first.ID)
	if !strings.Contains(st, "0 connected: 0 ACKed, 0 pending, 0 rejecting") || !strings.Contains(st, "cluster a") {
		t.Errorf("rollout status:\n%s", st)
	}
	h.mustRun("rollout", "abort", first.ID, "--reason", "changed my mind")
	second := rolloutOf(t, h.mustRun("-o", "json", "apply", "-f", v2, "--canary", "node:edge-*", "--promote", "manual")).Rollout
	h.mustRun("rollout", "promote", second.ID)
	if got := h.mustRun("get", "cluster", "a", "-o", "yaml"); !strings.Contains(got, "connect_timeout: 2s") || strings.Contains(got, "~rollout") {
		t.Errorf("promoted, but cluster a is\n%s", got)
	}
	var all []*rollout.Rollout
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "rollout", "list")), &all); err != nil || len(all) != 2 {
		t.Fatalf("rollout list -o json: %v, %d rollouts", err, len(all))
	}
	if all[0].State != rollout.Aborted || all[0].Reason != "changed my mind" || all[1].State != rollout.Promoted || all[1].PromotedBy == "" {
		t.Errorf("ended rollouts: %+v, %+v", all[0], all[1])
	}
	hist := h.mustRun("history")
	for _, kind := range []string{"rollout", "abort", "promote"} {
		if !strings.Contains(hist, " "+kind+" ") {
			t.Errorf("history shows no %s:\n%s", kind, hist)
		}
	}
}

// TestRolloutBadInput: bad flags and ids get an error naming what is
// wrong, and nothing is written.
func TestRolloutBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	h.mustRun("apply", "-f", writeFile(t, "v1.yaml", docs(clusterYAML("a", "1s"))))
	v2 := writeFile(t, "v2.yaml", docs(clusterYAML("a", "2s")))
	at := e.dataRevision(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", "-f", v2, "--canary", "half"}, `--canary: selector "half"`},
		{[]string{"apply", "-f", v2, "--bake", "5s"}, "--bake needs --canary"},
		{[]string{"apply", "-f", v2, "--canary", "5%", "--prune"}, "--canary and --prune exclude each other"},
		{[]string{"apply", "-f", v2, "--canary", "5%", "--ttl", "10s"}, "--canary and --ttl"},
		{[]string{"apply", "-f", v2, "--canary", "5%", "--promote", "soon"}, `--promote "soon": want auto or manual`},
		{[]string{"apply", "-f", v2, "--canary", "5%", "--max-rejections", "-1"}, "--max-rejections -1"},
		{[]string{"apply", "-f", v2, "--canary", "5%", "--scope", "~rollout.x"}, "reserved for rollouts"},
		{[]string{"rollout", "status", "20260101-000000.000000-abcdef"}, "no such rollout"},
		{[]string{"rollout", "abort", "nope/x"}, "no such rollout"},
		{[]string{"rollout", "promote"}, "accepts 1 arg"},
	} {
		r := h.run(tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("xdsadmin %s: %s\nwant an error saying %q", strings.Join(tc.args, " "), r, tc.want)
		}
	}
	if e.dataRevision(t) != at {
		t.Error("a refused command wrote")
	}
}

package adminctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// TestVersion: version prints CHANGELOG.md's latest version without
// etcd, and with --replicas the registered replicas' versions.
func TestVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	h := &harness{t: t, vars: map[string]string{}}
	// No etcd: an endpoint nothing listens on.
	r := h.runRaw(ctx, "", "--etcd-endpoints", deadAddr(t), "version")
	if want := "xdsadmin " + legation.Version(); r.code != 0 || !strings.HasPrefix(r.stdout, want) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("version: %s\nwant one line starting %q", r, want)
	}

	e := startEnv(t, storetest.Options{})
	h = e.newHarness(t)
	h.register(shard.Member{Name: "replica-a", XDSAddr: "10.0.0.1:18000", Version: "0.1.0"})
	h.register(shard.Member{Name: "replica-b", XDSAddr: "10.0.0.2:18000", Version: "0.2.0"})
	h.register(shard.Member{Name: "replica-c", XDSAddr: "10.0.0.3:18000"})

	got := fields(h.mustRun("version", "--replicas"))
	want := [][]string{{"REPLICA", "VERSION"}, {"replica-a", "0.1.0"}, {"replica-b", "0.2.0"}, {"replica-c", "unknown"}}
	if len(got) != 5 || got[0][0] != "xdsadmin" || got[0][1] != legation.Version() {
		t.Fatalf("version --replicas: %q", got)
	}
	if diff := cmp.Diff(want, got[1:]); diff != "" {
		t.Errorf("version --replicas (-want +got):\n%s", diff)
	}

	var info versionInfo
	if err := json.Unmarshal([]byte(h.mustRun("version", "--replicas", "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != legation.Version() || len(info.Replicas) != 3 || info.Replicas[1] != (replicaVersion{"replica-b", "0.2.0"}) {
		t.Errorf("version --replicas -o json: %+v", info)
	}

	empty := e.newHarness(t)
	if out := empty.mustRun("version", "--replicas"); !strings.Contains(out, "no replicas are registered under "+empty.prefix+"members/") {
		t.Errorf("version --replicas with none: %q", out)
	}
}

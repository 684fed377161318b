package adminctl

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// leaseOf returns the lease of the one resource typ/name in scope.
func (h *harness) leaseOf(typ *resource.Type, scope, name string) int64 {
	h.t.Helper()
	for _, r := range h.list() {
		if r.Type == typ && r.Scope == scope && r.Name == name {
			if r.Lease == 0 {
				h.t.Fatalf("%s %s/%s has no lease", typ.Name, scope, name)
			}
			return r.Lease
		}
	}
	h.t.Fatalf("no %s %s/%s", typ.Name, scope, name)
	return 0
}

// timeToLive is what etcd says lease id has left, in whole seconds.
func (e *env) timeToLive(t *testing.T, id int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := e.client.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL
}

// waitTTLBelow waits for lease id to have at most left seconds left: for
// its TTL to run, so that a refresh shows.
func (e *env) waitTTLBelow(t *testing.T, id, left int64) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		got := e.timeToLive(t, id)
		if got <= left {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %x: %ds left after %s, want at most %ds", id, got, defaultTestTimeout, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// marker returns lease id's refresh marker under the harness's prefix;
// ok is false if it has none.
func (h *harness) marker(id int64) (m store.LeaseMarker, ok bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := h.env.client.Get(ctx, store.LeaseMarkerKey(h.prefix, id))
	if err != nil {
		h.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return store.LeaseMarker{}, false
	}
	kv := resp.Kvs[0]
	got, m, err := store.ParseLeaseMarker(h.prefix, string(kv.Key), kv.Value)
	if err != nil || got != id || kv.Lease != id {
		h.t.Fatalf("marker of lease %x: lease %x, under lease %x, %v", id, got, kv.Lease, err)
	}
	return m, true
}

// TestTTLRefresh: ttl refresh starts the TTL of the named resources'
// leases over, each lease once, and says which; --all does it for every
// TTL'd resource of a scope and no other.
func TestTTLRefresh(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})

	t.Run("named resources of one lease", func(t *testing.T) {
		t.Parallel()
		h := e.newHarness(t)
		h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s")
		h.mustRun("apply", "-f", examples+"/endpoints.yaml")
		id := h.leaseOf(resource.Cluster, "default", "backend-a")
		e.waitTTLBelow(t, id, 28)

		got := fields(h.mustRun("ttl", "refresh", "cluster", "backend-a", "echo-cluster"))
		want := [][]string{
			{"LEASE", "TTL", "RESOURCES"},
			{fmt.Sprintf("%016x", id), "30s", "cluster/backend-a"},
			{"cluster/echo-cluster"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ttl refresh output (-want +got):\n%s", diff)
		}
		if left := e.timeToLive(t, id); left < 29 {
			t.Errorf("lease %x has %ds left after the refresh, want 29s or more", id, left)
		}
		m, ok := h.marker(id)
		if !ok || m.TTL != 30 || !strings.HasPrefix(m.By, "xdsadmin/") {
			t.Errorf("refresh marker %+v (found %v), want ttl 30 written by xdsadmin/...", m, ok)
		}
	})

	t.Run("--all refreshes every lease of the scope, and only those", func(t *testing.T) {
		t.Parallel()
		h := e.newHarness(t)
		h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s", "--scope", "edge")
		h.mustRun("apply", "-f", examples+"/endpoints.yaml", "--ttl", "1m", "--scope", "edge")
		h.mustRun("apply", "-f", examples+"/routes.yaml", "--scope", "edge")
		h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s")
		clusters := h.leaseOf(resource.Cluster, "edge", "backend-a")
		endpoints := h.leaseOf(resource.Endpoint, "edge", "backend-a")
		other := h.leaseOf(resource.Cluster, "default", "backend-a")
		e.waitTTLBelow(t, clusters, 28)

		type line struct {
			Lease     string   `json:"lease"`
			TTL       string   `json:"ttl"`
			Resources []string `json:"resources"`
		}
		out := h.mustRun("ttl", "refresh", "--all", "--scope", "edge", "-o", "json")
		var got []line
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("ttl refresh -o json: %v\n%s", err, out)
		}
		want := map[int64]line{
			clusters:  {fmt.Sprintf("%016x", clusters), "30s", []string{"cluster/backend-a", "cluster/backend-b", "cluster/echo-cluster"}},
			endpoints: {fmt.Sprintf("%016x", endpoints), "1m0s", []string{"endpoint/backend-a", "endpoint/backend-b", "endpoint/echo-cluster"}},
		}
		ids := []int64{clusters, endpoints}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if diff := cmp.Diff([]line{want[ids[0]], want[ids[1]]}, got); diff != "" {
			t.Errorf("ttl refresh --all -o json (-want +got):\n%s", diff)
		}
		if left := e.timeToLive(t, clusters); left < 29 {
			t.Errorf("the clusters' lease has %ds left after the refresh, want 29s or more", left)
		}
		for _, id := range ids {
			if _, ok := h.marker(id); !ok {
				t.Errorf("lease %x of scope edge has no refresh marker", id)
			}
		}
		if m, ok := h.marker(other); ok {
			t.Errorf("the lease of scope default was refreshed too: %+v", m)
		}

		// Of one type: that type's leases alone.
		got2 := fields(h.mustRun("ttl", "refresh", "--all", "endpoint", "--scope", "edge"))
		want2 := [][]string{
			{"LEASE", "TTL", "RESOURCES"},
			{fmt.Sprintf("%016x", endpoints), "1m0s", "endpoint/backend-a"},
			{"endpoint/backend-b"},
			{"endpoint/echo-cluster"},
		}
		if diff := cmp.Diff(want2, got2); diff != "" {
			t.Errorf("ttl refresh --all endpoint (-want +got):\n%s", diff)
		}
	})

	t.Run("resources of two leases, yaml", func(t *testing.T) {
		t.Parallel()
		h := e.newHarness(t)
		h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s")
		h.mustRun("apply", "-f", writeFile(t, "extra.yaml", clusterYAML("extra", "1s")), "--ttl", "40s")
		h.mustRun("apply", "-f", examples+"/listeners.yaml", "--ttl", "40s")
		c := h.leaseOf(resource.Cluster, "default", "backend-b")
		x := h.leaseOf(resource.Cluster, "default", "extra")
		l := h.leaseOf(resource.Listener, "default", "echo")
		out := h.mustRun("ttl", "refresh", "cluster", "extra", "backend-b", "-o", "yaml")
		entries := map[int64]string{
			c: fmt.Sprintf("- lease: %016x\n  resources:\n  - cluster/backend-b\n  ttl: 30s\n", c),
			x: fmt.Sprintf("- lease: %016x\n  resources:\n  - cluster/extra\n  ttl: 40s\n", x),
		}
		// In the order of the leases.
		want := entries[min(c, x)] + entries[max(c, x)]
		if out != want {
			t.Errorf("ttl refresh -o yaml:\n%s\nwant:\n%s", out, want)
		}
		for _, id := range []int64{c, x} {
			if _, ok := h.marker(id); !ok {
				t.Errorf("lease %x has no refresh marker", id)
			}
		}
		if _, ok := h.marker(l); ok {
			t.Errorf("the listeners' lease was refreshed by a refresh of clusters")
		}
	})
}

// TestTTLRefreshBadInput: every bad ttl refresh fails with a clear error,
// exit code 1, nothing on standard output, and nothing written to etcd:
// it refreshes nothing unless it can refresh everything it was asked to.
func TestTTLRefreshBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s")
	h.mustRun("apply", "-f", examples+"/endpoints.yaml")
	h.mustRun("apply", "-f", examples+"/routes.yaml", "--scope", "plain")
	// A lease that ended: its resources went with it.
	h.mustRun("apply", "-f", examples+"/listeners.yaml", "--ttl", "30s", "--scope", "ended")
	ended := h.leaseOf(resource.Listener, "ended", "echo")
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := e.client.Revoke(ctx, clientv3.LeaseID(ended)); err != nil {
		t.Fatal(err)
	}
	h.mustRun("apply", "-f", examples+"/clusters.yaml", "--ttl", "30s", "--scope", "mixed")
	h.mustRun("apply", "-f", writeFile(t, "plain.yaml", clusterYAML("plain-one", "1s")), "--scope", "mixed")
	live := []int64{h.leaseOf(resource.Cluster, "default", "backend-a"), h.leaseOf(resource.Cluster, "mixed", "backend-a")}
	rev := e.revision(t)
	const known = "(known: cluster, endpoint, extension-config, lb-endpoint, listener, route, runtime, scoped-route, secret, virtual-host)"

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{
			name: "unknown type",
			args: []string{"ttl", "refresh", "clusterz", "backend-a"},
			want: `unknown resource type "clusterz" ` + known,
		},
		{
			name: "unknown type with --all",
			args: []string{"ttl", "refresh", "--all", "pods"},
			want: `unknown resource type "pods" ` + known,
		},
		{
			name: "no arguments",
			args: []string{"ttl", "refresh"},
			want: "give TYPE and the NAMEs to refresh, or --all [TYPE] for every TTL'd resource of the scope\nRun 'xdsadmin ttl refresh --help' for usage",
		},
		{
			name: "a type without a name",
			args: []string{"ttl", "refresh", "cluster"},
			want: "give TYPE and the NAMEs to refresh, or --all [TYPE] for every TTL'd resource of the scope\nRun 'xdsadmin ttl refresh --help' for usage",
		},
		{
			name: "--all with names",
			args: []string{"ttl", "refresh", "--all", "cluster", "backend-a"},
			want: "--all refreshes every TTL'd resource of the scope (of TYPE, if given): give no NAME with it, or drop --all\nRun 'xdsadmin ttl refresh --help' for usage",
		},
		{
			name: "an empty name",
			args: []string{"ttl", "refresh", "cluster", ""},
			want: `cluster "": empty name: every resource needs a non-empty name`,
		},
		{
			name: "a name with a control character",
			args: []string{"ttl", "refresh", "cluster", "a\tb"},
			want: `cluster "a\tb": name "a\tb" holds a control character`,
		},
		{
			name: "bad --scope",
			args: []string{"ttl", "refresh", "cluster", "backend-a", "--scope", "a/b"},
			want: `--scope: scope "a/b" holds '/': scopes may not hold '/', spaces or control characters`,
		},
		{
			name: "bad --scope with --all",
			args: []string{"ttl", "refresh", "--all", "--scope", "a b"},
			want: `--scope: scope "a b" holds ' ': scopes may not hold '/', spaces or control characters`,
		},
		{
			name: "a resource that does not exist",
			args: []string{"ttl", "refresh", "cluster", "nope"},
			want: `cluster "nope" not found in scope "default" (nothing was refreshed)`,
		},
		{
			name: "a TTL'd resource, then one that does not exist",
			args: []string{"ttl", "refresh", "cluster", "backend-a", "nope"},
			want: `cluster "nope" not found in scope "default" (nothing was refreshed)`,
		},
		{
			name: "a resource of another scope",
			args: []string{"ttl", "refresh", "cluster", "backend-a", "--scope", "plain"},
			want: `cluster "backend-a" not found in scope "plain" (nothing was refreshed)`,
		},
		{
			name: "a resource without a TTL",
			args: []string{"ttl", "refresh", "endpoint", "backend-a"},
			want: `endpoint "backend-a" in scope "default" has no TTL: it was applied without --ttl (nothing was refreshed)`,
		},
		{
			name: "a TTL'd resource, then one without",
			args: []string{"ttl", "refresh", "cluster", "backend-a", "plain-one", "--scope", "mixed"},
			want: `cluster "plain-one" in scope "mixed" has no TTL: it was applied without --ttl (nothing was refreshed)`,
		},
		{
			name: "the resources of a lease that ended",
			args: []string{"ttl", "refresh", "listener", "echo", "--scope", "ended"},
			want: `listener "echo" not found in scope "ended" (nothing was refreshed)`,
		},
		{
			name: "--all in a scope without TTL'd resources",
			args: []string{"ttl", "refresh", "--all", "--scope", "plain"},
			want: `no TTL'd resource in scope "plain"`,
		},
		{
			name: "--all in a scope whose lease ended",
			args: []string{"ttl", "refresh", "--all", "--scope", "ended"},
			want: `no TTL'd resource in scope "ended"`,
		},
		{
			name: "--all of a type without TTL'd resources",
			args: []string{"ttl", "refresh", "--all", "endpoint"},
			want: `no TTL'd endpoint in scope "default"`,
		},
		{
			name: "unknown flag",
			args: []string{"ttl", "refresh", "--ttl", "30s", "cluster", "backend-a"},
			want: "unknown flag: --ttl\nRun 'xdsadmin ttl refresh --help' for usage",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run(tc.args...)
			msg, ok := strings.CutPrefix(r.stderr, "xdsadmin: ")
			msg = strings.TrimSuffix(msg, "\n")
			switch code := wantCode(tc.want); {
			case r.code != code || !ok || r.stdout != "":
				t.Errorf("got %s\nwant exit %d, no output and an error", r, code)
			case msg != tc.want:
				t.Errorf("error:\n%s\nwant:\n%s", msg, tc.want)
			}
			if now := e.revision(t); now != rev {
				t.Errorf("etcd revision moved from %d to %d", rev, now)
			}
			for _, id := range live {
				if _, ok := h.marker(id); ok {
					t.Errorf("lease %x was refreshed", id)
				}
			}
		})
	}
}

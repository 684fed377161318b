package adminctl

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// register writes m's registry record as a replica does.
func (h *harness) register(m shard.Member) {
	h.t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := h.env.client.Put(ctx, shard.RegistryKey(h.prefix, m.Name), string(b)); err != nil {
		h.t.Fatal(err)
	}
}

// readyzServer serves /readyz on 127.0.0.1 with code and body.
func readyzServer(t *testing.T, code int, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		w.Write([]byte(body)) //nolint:errcheck // the test reads what arrives
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// deadAddr is a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestMembers(t *testing.T) {
	e := startEnv(t, storetest.Options{})
	started := time.Now().Add(-3 * time.Hour).UTC().Truncate(time.Millisecond)
	h := e.newHarness(t)
	members := []shard.Member{
		{Name: "replica-a", XDSAddr: "10.0.0.1:18000", HTTPAddr: readyzServer(t, http.StatusOK, "ok\n"), GossipAddr: "10.0.0.1:7946", Started: started, Ready: true, Version: "0.1.0"},
		{Name: "replica-b", XDSAddr: "10.0.0.2:18000", HTTPAddr: readyzServer(t, http.StatusServiceUnavailable, "not ready: the view has not loaded etcd's state yet\nmore detail\n"), GossipAddr: "10.0.0.2:7946", Started: started, Ready: true},
		{Name: "replica-c", XDSAddr: "10.0.0.3:18000", HTTPAddr: deadAddr(t), GossipAddr: "10.0.0.3:7946", Started: started, Ready: true},
		// Registered but not ready: off the ring while others are ready.
		{Name: "replica-d", XDSAddr: "10.0.0.4:18000", HTTPAddr: deadAddr(t), GossipAddr: "10.0.0.4:7946", Started: started},
	}
	for _, m := range members {
		h.register(m)
	}
	h.statusWriter("replica-a", nodeStatus("n1", "", nil), nodeStatus("n2", "", nil), nodeStatus("n3", "", nil))
	h.statusWriter("replica-b", nodeStatus("n4", "", nil))
	h.statusWriter("replica-gone", nodeStatus("n5", "", nil))

	t.Run("json", func(t *testing.T) {
		r := h.run("members", "-o", "json")
		if r.code != 0 {
			t.Fatal(r)
		}
		if !strings.Contains(r.stderr, `warning: 1 nodes have home "replica-gone", which is not registered`) {
			t.Errorf("no warning about the unregistered home: %s", r)
		}
		var got []memberInfo
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		ring := shard.ReadyRing(members, shard.DefaultVNodes).Shares()
		want := []memberInfo{
			{Name: "replica-a", XDSAddr: "10.0.0.1:18000", HTTPAddr: members[0].HTTPAddr, Started: started, Ready: true,
				Health: "ready", RingShare: percent(ring["replica-a"]), Nodes: 3, NodeShare: 60, Version: "0.1.0"},
			{Name: "replica-b", XDSAddr: "10.0.0.2:18000", HTTPAddr: members[1].HTTPAddr, Started: started, Ready: true,
				Health: "not ready: the view has not loaded etcd's state yet", RingShare: percent(ring["replica-b"]), Nodes: 1, NodeShare: 20},
			{Name: "replica-c", XDSAddr: "10.0.0.3:18000", HTTPAddr: members[2].HTTPAddr, Started: started, Ready: true,
				Health: "unreachable", RingShare: percent(ring["replica-c"])},
			{Name: "replica-d", XDSAddr: "10.0.0.4:18000", HTTPAddr: members[3].HTTPAddr, Started: started,
				Health: "unreachable"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("members -o json (-want +got):\n%s", diff)
		}
		sum := 0.0
		for _, m := range got {
			if m.RingShare <= 0 && m.Ready {
				t.Errorf("%s is ready but has no ring share", m.Name)
			}
			sum += m.RingShare
		}
		if math.Abs(sum-100) > 0.05 { // rounded to hundredths
			t.Errorf("ring shares sum to %.4f%%, want 100%%", sum)
		}
	})

	t.Run("table", func(t *testing.T) {
		got := fields(h.mustRun("members"))
		if len(got) != 5 {
			t.Fatalf("members table: %v", got)
		}
		if diff := cmp.Diff([]string{"NAME", "XDS_ADDR", "HTTP_ADDR", "STARTED", "HEALTH", "RING_SHARE", "NODES", "NODE_SHARE", "VERSION"}, got[0]); diff != "" {
			t.Errorf("header (-want +got):\n%s", diff)
		}
		for i, m := range members {
			l := got[i+1]
			if l[0] != m.Name || l[1] != m.XDSAddr || l[2] != m.HTTPAddr || !strings.HasPrefix(l[3], "3h0m") {
				t.Errorf("line of %s: %v", m.Name, l)
			}
		}
		if a := got[1]; a[4] != "ready" || !strings.HasSuffix(a[5], "%") || a[6] != "3" || a[7] != "60.0%" || a[8] != "0.1.0" {
			t.Errorf("line of replica-a: %v", a)
		}
		if d := got[4]; d[4] != "unreachable" || d[5] != "0.0%" || d[6] != "0" || d[7] != "0.0%" || d[8] != "-" {
			t.Errorf("line of replica-d: %v", d)
		}
	})

	t.Run("none ready: all on the ring", func(t *testing.T) {
		h := e.newHarness(t)
		for _, name := range []string{"x", "y"} {
			h.register(shard.Member{Name: name, XDSAddr: "10.0.0.9:18000", GossipAddr: "10.0.0.9:7946", Started: started})
		}
		var got []memberInfo
		if err := json.Unmarshal([]byte(h.mustRun("members", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].RingShare <= 0 || got[1].RingShare <= 0 || math.Abs(got[0].RingShare+got[1].RingShare-100) > 0.05 {
			t.Errorf("shares with no member ready: %+v", got)
		}
		if got[0].Health != "unknown (no http_addr)" {
			t.Errorf("health without an http_addr: %q", got[0].Health)
		}
	})

	t.Run("none registered", func(t *testing.T) {
		h := e.newHarness(t)
		if out := h.mustRun("members"); !strings.HasPrefix(out, "no replicas are registered under "+h.prefix+"members/") {
			t.Errorf("members with none: %q", out)
		}
		if out := h.mustRun("members", "-o", "yaml"); strings.TrimSpace(out) != "[]" {
			t.Errorf("members -o yaml with none: %q", out)
		}
	})
}

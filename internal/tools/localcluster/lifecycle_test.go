package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// shortTimeout bounds what must not happen (an answer from a frozen
// process).
const shortTimeout = time.Second

// TestLifecycle drives a small cluster (1 etcd member, 2 replicas,
// HAProxy) through every operation, most of them through the control
// endpoint as `go run ./deploy/local` does from another shell: status,
// freeze and thaw of a replica and of the member, kill and start, stop
// and start, adding a replica (HAProxy reloads, the old process stays
// with its connections), down and up again on the same data, and down
// through the control endpoint.
func TestLifecycle(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.EtcdMembers, cfg.Replicas = 1, 2
	cfg.XDSNodeFlags = []string{"--shutdown-timeout", "2s", "--drain-period", "1s"}
	tc := localcluster.StartForTest(t, cfg)
	c := tc.Cluster()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The control endpoint, served as deploy/local's up serves it.
	ln, err := net.Listen("unix", localcluster.ControlSocket(tc.Dir))
	if err != nil {
		t.Fatal(err)
	}
	downAsked := make(chan struct{})
	srv := &http.Server{Handler: localcluster.ControlHandler(c, func() { close(downAsked) })}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("control server: %v", err)
		}
	})
	cl := localcluster.NewClient(tc.Dir)

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkStates(t, st, map[string]localcluster.State{"etcd-1": localcluster.Running, "replica-1": localcluster.Running, "replica-2": localcluster.Running, "haproxy": localcluster.Running})
	for _, h := range []string{st.Etcd[0].Health, st.Replicas[0].Health, st.Replicas[1].Health, st.HAProxy.Health} {
		if h != "/health 200" && h != "/readyz 200" && h != "/readyz via HAProxy 200" {
			t.Errorf("status: health %q, want 200", h)
		}
	}
	if got := st.HAProxy.Servers["xds/replica-2"]; got != "UP" {
		t.Errorf("status: HAProxy's xds/replica-2 is %q, want UP", got)
	}

	// Freeze: the process hangs; thaw: it answers again.
	r1 := st.Replicas[0]
	for _, p := range []struct{ name, addr, path string }{
		{"replica-1", r1.HTTPAddr, "/readyz"},
		{"etcd-1", st.Etcd[0].ClientAddr, "/health"},
	} {
		if err := cl.Do(ctx, "freeze", p.name); err != nil {
			t.Fatal(err)
		}
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkStates(t, st, map[string]localcluster.State{p.name: localcluster.Frozen})
		if code, err := get(p.addr, p.path, shortTimeout); err == nil {
			t.Errorf("frozen %s answered %s with %d", p.name, p.path, code)
		}
		if err := cl.Do(ctx, "thaw", p.name); err != nil {
			t.Fatal(err)
		}
		waitOK(t, p.name, p.addr, p.path)
	}
	if err := c.WaitLB(ctx, "replica-1", true); err != nil {
		t.Fatal(err)
	}

	// Kill, then start: a new process.
	pid := st.Replicas[1].PID
	if err := cl.Do(ctx, "kill", "replica-2"); err != nil {
		t.Fatal(err)
	}
	if st, err = cl.Status(ctx); err != nil {
		t.Fatal(err)
	}
	checkStates(t, st, map[string]localcluster.State{"replica-2": localcluster.Gone, "replica-1": localcluster.Running})
	if e := lastExit(c, "replica-2"); e.Cause != "kill" || e.PID != pid {
		t.Errorf("replica-2's exit: %+v, want pid %d killed", e, pid)
	}
	if err := c.WaitLB(ctx, "replica-2", false); err != nil {
		t.Fatal(err)
	}
	if err := cl.Do(ctx, "start", "replica-2"); err != nil {
		t.Fatal(err)
	}
	if r := c.Replicas()[1]; r.State != localcluster.Running || r.PID == pid {
		t.Errorf("replica-2 after start: %s, pid %d (was %d)", r.State, r.PID, pid)
	}

	// Stop: SIGTERM, a clean exit.
	if err := cl.Do(ctx, "stop", "replica-1"); err != nil {
		t.Fatal(err)
	}
	if e := lastExit(c, "replica-1"); e.Cause != "stop" || !e.Clean {
		t.Errorf("replica-1's exit after stop: %+v, want a clean one", e)
	}
	if err := cl.Do(ctx, "start", "replica-1"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Do(ctx, "kill", "replica-9"); err == nil {
		t.Error("kill replica-9 of 2: no error")
	}
	if err := cl.Do(ctx, "freeze", "replica-1"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Do(ctx, "thaw", "replica-1"); err != nil {
		t.Fatal(err)
	}

	// Add a replica: HAProxy reloads, its old process stays for the
	// connections it has.
	lbPID := st.HAProxy.PID
	r3, err := cl.AddReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Name != "replica-3" || r3.State != localcluster.Running {
		t.Errorf("added %+v, want replica-3 running", r3)
	}
	if err := c.WaitLB(ctx, "replica-3", true); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}
	lb := c.Status().HAProxy
	if lb.PID == lbPID || !slices.Contains(lb.OldPIDs, lbPID) && !exitedAs(c, lbPID, "reload") {
		t.Errorf("HAProxy after the reload: pid %d, old %v; want a new process, the old one (%d) told to finish", lb.PID, lb.OldPIDs, lbPID)
	}

	// Down and up again: etcd rejoins with its data.
	rev := etcdRevision(t, tc.EtcdEndpoints)
	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Names() {
		checkStates(t, c.Status(), map[string]localcluster.State{name: localcluster.Gone})
	}
	if err := c.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := etcdRevision(t, tc.EtcdEndpoints); got < rev {
		t.Errorf("etcd's revision after down and up: %d, want >= %d (its data kept)", got, rev)
	}
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}

	// Down through the control endpoint: the owner (here the test) is
	// asked to close the cluster, and the answer comes once it has.
	downErr := make(chan error, 1)
	go func() { downErr <- cl.Down(ctx) }()
	select {
	case <-downAsked:
	case <-ctx.Done():
		t.Fatal("no down request reached the owner")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-downErr; err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Names() {
		checkStates(t, c.Status(), map[string]localcluster.State{name: localcluster.Gone})
	}
	if err := c.Start(ctx, "replica-1"); !errors.Is(err, localcluster.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	srv.Close()
	if _, err := cl.Status(ctx); !errors.Is(err, localcluster.ErrNotRunning) {
		t.Errorf("status with no owner: %v, want ErrNotRunning", err)
	}
}

func checkStates(t *testing.T, st localcluster.Status, want map[string]localcluster.State) {
	t.Helper()
	got := map[string]localcluster.State{}
	for _, m := range st.Etcd {
		got[m.Name] = m.State
	}
	for _, r := range st.Replicas {
		got[r.Name] = r.State
	}
	if st.HAProxy != nil {
		got[st.HAProxy.Name] = st.HAProxy.State
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("status: %s is %q, want %q", name, got[name], w)
		}
	}
}

// lastExit is the last recorded exit of the process called name.
func lastExit(c *localcluster.Cluster, name string) localcluster.Exit {
	var last localcluster.Exit
	for _, e := range c.Exits() {
		if e.Name == name {
			last = e
		}
	}
	return last
}

func exitedAs(c *localcluster.Cluster, pid int, cause string) bool {
	for _, e := range c.Exits() {
		if e.PID == pid && e.Cause == cause {
			return true
		}
	}
	return false
}

// get GETs path from addr, giving up after timeout.
func get(addr, path string, timeout time.Duration) (int, error) {
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitOK polls GET addr+path until it is 200.
func waitOK(t *testing.T, name, addr, path string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		code, err := get(addr, path, shortTimeout)
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not 200 after %s: %d %v", name, path, testTimeout, code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// etcdRevision is the revision of the etcd at endpoints, from xdsadmin.
func etcdRevision(t *testing.T, endpoints []string) int64 {
	t.Helper()
	return apply(t, endpoints, clusterYAML(fmt.Sprintf("probe-%d", time.Now().UnixNano()), "1s"))
}

package faults

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/localcluster"
)

// testWriter sends the Executor's lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p[:len(p)-1])); return len(p), nil }

// TestExecutorOnCluster runs a 24s schedule of seed 348 (11 of the 12 kinds) on a real cluster
// (3 etcd members, 3 replicas, every replica behind its fault proxies),
// heals, and checks the cluster is whole again: every replica ready and
// on a ring of three.
func TestExecutorOnCluster(t *testing.T) {
	tc := localcluster.StartForTest(t, localcluster.Config{
		EtcdMembers: 3, Replicas: 3, EtcdProxies: true, GossipProxies: true,
		Timeout: 60 * time.Second, Grace: 15 * time.Second,
	})
	c := tc.Cluster()
	ctx := context.Background()
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}
	// The replicas reach etcd through their proxies, and gossip through
	// theirs (the ring above is made of gossip to the proxies' addresses).
	for _, r := range c.Replicas() {
		g, err := c.EtcdProxies(r.Name)
		if err != nil {
			t.Fatal(err)
		}
		conns := 0
		for _, p := range g {
			conns += p.Conns()
		}
		if conns == 0 {
			t.Errorf("%s: no connection through its etcd proxies %v", r.Name, g.Addrs())
		}
	}

	const seed, duration, every = 348, 24 * time.Second, 2 * time.Second
	shape := Shape{EtcdMembers: 3, Replicas: 3}
	sched, err := Schedule(seed, duration, every, shape)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]bool{}
	for _, f := range sched {
		kinds[f.Kind] = true
	}
	if len(kinds) < 10 {
		t.Fatalf("seed %d draws only %d kinds: %s", seed, len(kinds), dump(sched))
	}
	e := NewExecutor(c, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	start := time.Now()
	if err := e.Run(ctx, sched); err != nil {
		t.Errorf("run: %v", err)
	}
	t.Logf("schedule of %d faults ran in %s", len(sched), time.Since(start).Round(time.Millisecond))
	if err := e.Heal(ctx); err != nil {
		t.Fatalf("heal: %v", err)
	}
	st := e.Stats()
	if st.Applied != len(sched) || st.Active != 0 {
		t.Errorf("stats %+v after %d faults and Heal", st, len(sched))
	}
	log := e.Log()
	if len(log) != len(sched) {
		t.Errorf("log of %d faults, want %d", len(log), len(sched))
	}
	for _, a := range log {
		if a.AppliedAt.Before(start) || a.HealedAt.Before(a.AppliedAt) {
			t.Errorf("log: %s applied at %s, healed at %s", a.Fault, a.AppliedAt, a.HealedAt)
		}
	}
	reps := c.Replicas()
	if len(reps) != 3 {
		t.Fatalf("%d replicas after heal, want 3: %+v", len(reps), reps)
	}
	for _, r := range reps {
		if code, body, err := c.HTTPGet(ctx, r.HTTPAddr, "/readyz"); err != nil || code != 200 {
			t.Errorf("%s /readyz: %d %s %v", r.Name, code, body, err)
		}
	}
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Etcd() {
		if m.State != localcluster.Running {
			t.Errorf("%s is %s after heal", m.Name, m.State)
		}
	}
	// A compaction at a revision already compacted is one done (chaos
	// seed 5: a compact-etcd fault failed so).
	r1, err := c.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := c.CompactEtcd(ctx); err != nil || r2 < r1 {
		t.Errorf("CompactEtcd again at %d: %d, %v", r1, r2, err)
	}
}

// TestExecutorErrors: a fault on a process the cluster does not have is
// reported, naming it, and the run goes on; an ended ctx ends Run at once.
func TestExecutorErrors(t *testing.T) {
	cfg := localcluster.DefaultConfig()
	cfg.Dir, cfg.HAProxy, cfg.EtcdBin, cfg.XDSNodeBin = t.TempDir(), false, "/nonexistent/etcd", "/nonexistent/xds-node"
	c, err := localcluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := NewExecutor(c, nil)
	sched := []Fault{
		{At: 0, Kind: FreezeReplica, Target: "replica-9", For: time.Millisecond},
		{At: time.Millisecond, Kind: DelayEtcd, Target: "replica-1", For: time.Millisecond},
	}
	err = e.Run(context.Background(), sched)
	if err == nil || !strings.Contains(err.Error(), `no process "replica-9"`) || !strings.Contains(err.Error(), "replica-1 has no etcd proxies") {
		t.Fatalf("Run: %v", err)
	}
	if st := e.Stats(); st.Applied != 0 || st.Active != 0 {
		t.Errorf("stats %+v after faults that failed", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := e.Run(ctx, []Fault{{At: time.Hour, Kind: CompactEtcd}}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("Run with a short ctx: %v after %s", err, time.Since(start))
	}
}

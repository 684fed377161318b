package shard_test

import (
	"context"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

const (
	// shardTestTimeout bounds what must happen; shardTestShortTimeout is
	// how long to watch for what must not.
	shardTestTimeout      = testbase.Timeout
	shardTestShortTimeout = 300 * time.Millisecond

	testPrefix   = "/legation/"
	testLeaseTTL = 2 * time.Second
)

// cluster is the etcd and the memberships of one test.
type cluster struct {
	t    *testing.T
	etcd *storetest.Etcd
	log  *slog.Logger
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, etcd: storetest.Start(t, storetest.Options{}), log: testbase.Logger(t)}
}

func (c *cluster) config(name string) shard.Config {
	return shard.Config{
		Name:     name,
		BindAddr: "127.0.0.1:0",
		XDSAddr:  "127.0.0.1:18000",
		HTTPAddr: "127.0.0.1:18001",
		// In the registry record only (xdsadmin apply reads them).
		Authorities: []string{"auth-" + name},
		Client:      c.etcd.Client(c.t), // one client each, as separate processes
		Prefix:      testPrefix,
		LeaseTTL:    testLeaseTTL,
		Logger:      c.log,
	}
}

// start starts a membership, closed when the test ends.
func (c *cluster) start(cfg shard.Config) *shard.Membership {
	c.t.Helper()
	m, err := shard.Start(testbase.Context(c.t), cfg)
	if err != nil {
		c.t.Fatalf("Start %s: %v", cfg.Name, err)
	}
	c.t.Cleanup(func() { m.Close() })
	return m
}

// startAll starts one membership per name, all at the same moment.
func (c *cluster) startAll(names ...string) []*shard.Membership {
	c.t.Helper()
	ms := make([]*shard.Membership, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		cfg := c.config(n)
		wg.Go(func() { ms[i], errs[i] = shard.Start(testbase.Context(c.t), cfg) })
	}
	wg.Wait()
	for i, m := range ms {
		if m != nil {
			c.t.Cleanup(func() { m.Close() })
		}
		if errs[i] != nil {
			c.t.Fatalf("Start %s: %v", names[i], errs[i])
		}
	}
	return ms
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// holds checks that cond stays true for d.
func holds(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !cond() {
			t.Fatalf("within %v: %s", d, what)
		}
	}
}

func ringNames(m *shard.Membership) []string { return names(m.Ring().Members()) }

// ringIs reports whether every membership's ring has exactly want.
func ringIs(ms []*shard.Membership, want ...string) func() bool {
	slices.Sort(want)
	return func() bool {
		for _, m := range ms {
			if !slices.Equal(ringNames(m), want) {
				return false
			}
		}
		return true
	}
}

func registered(t *testing.T, c *clientv3.Client) []string {
	t.Helper()
	ms, err := shard.ListRegistry(testbase.Context(t), c, testPrefix)
	if err != nil {
		t.Fatalf("ListRegistry: %v", err)
	}
	return names(ms)
}

func sameHomes(t *testing.T, ms []*shard.Membership) {
	t.Helper()
	for _, id := range nodeIDs(1000) {
		want, ok := ms[0].Home(id)
		if !ok {
			t.Fatalf("%s: Home(%q): none", ms[0].Self().Name, id)
		}
		for _, m := range ms[1:] {
			if got, _ := m.Home(id); got.Name != want.Name || got.XDSAddr != want.XDSAddr {
				t.Fatalf("Home(%q): %s says %s, %s says %s", id, ms[0].Self().Name, want.Name, m.Self().Name, got.Name)
			}
		}
	}
}

func TestDiscoveryThroughRegistry(t *testing.T) {
	c := newCluster(t)
	ms := c.startAll("xds-0", "xds-1", "xds-2")
	d := waitFor(t, shardTestTimeout, "the three do not all see each other", ringIs(ms, "xds-0", "xds-1", "xds-2"))
	t.Logf("converged %v after Start returned", d)
	sameHomes(t, ms)

	// The ring's records are what each member says of itself, but for
	// its authorities, which the gossip meta leaves out.
	for _, m := range ms {
		for _, got := range m.Ring().Members() {
			var want shard.Member
			for _, o := range ms {
				if o.Self().Name == got.Name {
					want = o.Self()
					want.Authorities = nil
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s's ring has %+v, the member says %+v", m.Self().Name, got, want)
			}
		}
	}

	reg, err := shard.ListRegistry(testbase.Context(t), c.etcd.Client(t), testPrefix)
	if err != nil {
		t.Fatalf("ListRegistry: %v", err)
	}
	if len(reg) != 3 {
		t.Fatalf("registry has %v, want the three", names(reg))
	}
	for i, m := range ms {
		self := m.Self()
		if !reflect.DeepEqual(reg[i], self) || !slices.Equal(reg[i].Authorities, []string{"auth-" + self.Name}) {
			t.Errorf("registry record %+v, member says %+v (authorities included)", reg[i], self)
		}
	}
}

// TestCrashLeavesRings: Close is a crash: no leave is broadcast and the
// lease is not revoked, so peers notice by probing and the record expires.
func TestCrashLeavesRings(t *testing.T) {
	c := newCluster(t)
	ms := c.startAll("xds-0", "xds-1", "xds-2")
	for _, m := range ms {
		m.SetReady(true)
	}
	waitFor(t, shardTestTimeout, "the three do not all see each other", ringIs(ms, "xds-0", "xds-1", "xds-2"))
	client := c.etcd.Client(t)

	if err := ms[2].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := time.Now()
	if got := registered(t, client); !slices.Contains(got, "xds-2") {
		t.Fatalf("registry right after Close = %v: the lease was revoked, as a crash would not", got)
	}
	holds(t, shardTestShortTimeout, "xds-2 left the others' rings at once: a leave was broadcast", ringIs(ms[:2], "xds-0", "xds-1", "xds-2"))

	waitFor(t, 10*time.Second, "xds-2 is still on the others' rings", ringIs(ms[:2], "xds-0", "xds-1"))
	t.Logf("xds-2 off the rings %v after Close", time.Since(closed))
	sameHomes(t, ms[:2])

	waitFor(t, testLeaseTTL+5*time.Second, "xds-2's record did not expire", func() bool {
		return !slices.Contains(registered(t, client), "xds-2")
	})
	t.Logf("xds-2's record gone %v after Close", time.Since(closed))
	if err := ms[2].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := ms[2].Leave(time.Second); err != nil {
		t.Errorf("Leave after Close: %v", err)
	}
}

func TestLeaveIsImmediate(t *testing.T) {
	c := newCluster(t)
	ms := c.startAll("xds-0", "xds-1", "xds-2")
	waitFor(t, shardTestTimeout, "the three do not all see each other", ringIs(ms, "xds-0", "xds-1", "xds-2"))
	client := c.etcd.Client(t)

	if err := ms[2].Leave(2 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	left := time.Now()
	if got := registered(t, client); slices.Contains(got, "xds-2") {
		t.Errorf("registry right after Leave = %v, want xds-2 gone", got)
	}
	waitFor(t, 2*time.Second, "xds-2 is still on the others' rings after it left", ringIs(ms[:2], "xds-0", "xds-1"))
	t.Logf("xds-2 off the rings %v after Leave returned", time.Since(left))

	if err := ms[2].Leave(time.Second); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	if err := ms[2].Close(); err != nil {
		t.Errorf("Close after Leave: %v", err)
	}
}

func TestReadiness(t *testing.T) {
	c := newCluster(t)
	ms := c.startAll("xds-0", "xds-1", "xds-2")
	all := []string{"xds-0", "xds-1", "xds-2"}
	waitFor(t, shardTestTimeout, "none ready: the rings do not hold every alive member", ringIs(ms, all...))

	for _, m := range ms {
		m.SetReady(true)
	}
	waitFor(t, shardTestTimeout, "all ready: the rings do not hold all three", func() bool {
		for _, m := range ms {
			for _, mem := range m.Ring().Members() {
				if !mem.Ready {
					return false
				}
			}
		}
		return ringIs(ms, all...)()
	})

	ms[1].SetReady(false)
	if ms[1].Self().Ready {
		t.Errorf("Self().Ready after SetReady(false) = true")
	}
	waitFor(t, shardTestTimeout, "xds-1 not ready is still on the rings", ringIs(ms, "xds-0", "xds-2"))
	if got := ms[0].Members(); len(got) != 3 || got[1].Name != "xds-1" || got[1].Ready {
		t.Errorf("Members() = %+v, want all three alive with xds-1 not ready", got)
	}
	for _, id := range nodeIDs(1000) {
		if h, _ := ms[0].Home(id); h.Name == "xds-1" {
			t.Fatalf("Home(%q) = xds-1, which is not ready", id)
		}
	}
	client := c.etcd.Client(t)
	waitFor(t, shardTestTimeout, "the registry does not say xds-1 is not ready", func() bool {
		reg, err := shard.ListRegistry(testbase.Context(t), client, testPrefix)
		return err == nil && len(reg) == 3 && reg[0].Ready && !reg[1].Ready && reg[2].Ready
	})

	ms[0].SetReady(false)
	ms[2].SetReady(false)
	waitFor(t, shardTestTimeout, "none ready: the rings do not fall back to every alive member", ringIs(ms, all...))
	sameHomes(t, ms)
}

func TestChanged(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	ch := a.Changed()
	if got := ringNames(a); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a alone: ring %v, want [a]", got)
	}
	select {
	case <-ch:
		t.Fatalf("Changed closed with no change")
	case <-time.After(shardTestShortTimeout):
	}

	c.start(c.config("b"))
	select {
	case <-ch:
	case <-time.After(shardTestTimeout):
		t.Fatalf("Changed not closed after b joined")
	}
	waitFor(t, shardTestTimeout, "a's ring is not [a b]", ringIs([]*shard.Membership{a}, "a", "b"))
	if a.Changed() == ch {
		t.Errorf("Changed returned the closed channel again")
	}
}

// unreachable returns a loopback address nothing listens on.
func unreachable(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestSeedsAndRefresh: replicas whose seeds are unreachable still find each
// other through the registry, which is re-read periodically; a seed is
// joined at start.
func TestSeedsAndRefresh(t *testing.T) {
	c := newCluster(t)
	cfg := func(name string) shard.Config {
		cfg := c.config(name)
		cfg.Join = []string{unreachable(t)}
		cfg.RefreshInterval = 100 * time.Millisecond
		return cfg
	}
	a := c.start(cfg("a"))
	b := c.start(cfg("b"))
	waitFor(t, shardTestTimeout, "a and b did not find each other through the registry", ringIs([]*shard.Membership{a, b}, "a", "b"))

	seeded := c.config("c")
	seeded.Join = []string{a.Self().GossipAddr}
	seeded.RefreshInterval = time.Hour // only the seed can bring it in
	m := c.start(seeded)
	// Start returns after the join: c already knows the others.
	if got := m.Ring().Len(); got != 3 {
		t.Errorf("c's ring right after Start joined its seed has %v, want all three", ringNames(m))
	}
	waitFor(t, shardTestTimeout, "c did not join through its seed", ringIs([]*shard.Membership{a, b, m}, "a", "b", "c"))
}

// TestReregistersAfterLeaseLoss: if the lease goes (etcd unreachable past
// the TTL; here revoked by hand), the member registers again.
func TestReregistersAfterLeaseLoss(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	client := c.etcd.Client(t)
	ctx := testbase.Context(t)
	key := shard.RegistryKey(testPrefix, "a")
	resp, err := client.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: %v, %d keys", key, err, len(resp.Kvs))
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := client.Revoke(ctx, lease); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	waitFor(t, shardTestTimeout, "a did not register again", func() bool {
		resp, err := client.Get(ctx, key)
		return err == nil && len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) != lease
	})
	// The new record is current.
	a.SetReady(true)
	waitFor(t, shardTestTimeout, "the new record does not follow SetReady", func() bool {
		reg, err := shard.ListRegistry(ctx, client, testPrefix)
		return err == nil && len(reg) == 1 && reg[0].Ready
	})
}

func TestStartWithoutEtcd(t *testing.T) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{unreachable(t)},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cfg := shard.Config{Name: "a", BindAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:18000", Client: client}
	if m, err := shard.Start(ctx, cfg); err == nil {
		m.Close()
		t.Fatalf("Start with etcd unreachable: no error")
	} else {
		t.Logf("Start: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	c := newCluster(t)
	reg := prometheus.NewPedanticRegistry()
	cfg := c.config("a")
	cfg.Registerer = reg
	a := c.start(cfg)
	c.start(c.config("b"))
	waitFor(t, shardTestTimeout, "a does not see b", ringIs([]*shard.Membership{a}, "a", "b"))
	if got := metricValue(t, reg, "legation_shard_members_alive"); got != 2 {
		t.Errorf("legation_shard_members_alive = %v, want 2", got)
	}
	if got := metricValue(t, reg, "legation_shard_ring_changes_total"); got < 2 {
		t.Errorf("legation_shard_ring_changes_total = %v, want >= 2 (a alone, then a and b)", got)
	}

	// A second membership on the same registry fails to start, cleanly.
	dup := c.config("c")
	dup.Registerer = reg
	if m, err := shard.Start(testbase.Context(t), dup); err == nil {
		m.Close()
		t.Errorf("Start with the metrics already registered: no error")
	}
	// Once a is closed, its metrics are gone and another can register.
	a.Close()
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("after Close, the registry still has %d metric families", len(mfs))
	}
	c.start(dup)
	if got := metricValue(t, reg, "legation_shard_members_alive"); got < 1 {
		t.Errorf("legation_shard_members_alive of c = %v, want >= 1", got)
	}
}

// metricValue returns the value of reg's gauge or counter called name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRegistryWriteBudget flaps a replica's readiness 200 times: its
// registry record is written at most about once a second, and ends in the
// last state.
func TestRegistryWriteBudget(t *testing.T) {
	c := newCluster(t)
	a := c.start(c.config("a"))
	client := c.etcd.Client(t)
	ctx := testbase.Context(t)
	key := shard.RegistryKey(testPrefix, "a")
	before, err := client.Get(ctx, key)
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("Get %s: %v", key, err)
	}
	began := time.Now()
	for i := range 200 {
		a.SetReady(i%2 == 0)
		time.Sleep(5 * time.Millisecond)
	}
	a.SetReady(true)
	waitFor(t, shardTestTimeout, "the record does not end ready", func() bool {
		reg, err := shard.ListRegistry(ctx, client, testPrefix)
		return err == nil && len(reg) == 1 && reg[0].Ready
	})
	after, err := client.Get(ctx, key)
	if err != nil || len(after.Kvs) != 1 {
		t.Fatalf("Get %s: %v", key, err)
	}
	writes := after.Kvs[0].Version - before.Kvs[0].Version
	// One write a second, plus the first at once.
	if limit := int64(time.Since(began).Seconds()) + 2; writes > limit {
		t.Errorf("record written %d times in %s, want at most %d", writes, time.Since(began), limit)
	}
	t.Logf("201 readiness changes in %s: %d record writes", time.Since(began), writes)
}

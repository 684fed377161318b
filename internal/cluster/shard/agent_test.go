package shard_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/cluster/shard"
)

// agentConfig is an agent of c whose readiness is ready, with short
// durations for tests.
func (c *cluster) agentConfig(name string, ready *atomic.Bool) shard.AgentConfig {
	return shard.AgentConfig{
		Membership:    c.config(name),
		Ready:         ready.Load,
		RetryInterval: 20 * time.Millisecond,
		Tick:          10 * time.Millisecond,
	}
}

// runAgent builds an agent from cfg and runs it until stop is called or
// the test ends; stop returns once Run has.
func runAgent(t *testing.T, cfg shard.AgentConfig) (a *shard.Agent, stop func()) {
	t.Helper()
	a, err := shard.NewAgent(cfg)
	if err != nil {
		t.Fatalf("NewAgent %s: %v", cfg.Membership.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run %s = %v, want nil", cfg.Membership.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

func joined(a *shard.Agent) func() bool { return func() bool { return a.Membership() != nil } }

// selfReady reports whether a's own record says ready.
func selfReady(a *shard.Agent) bool { return a.Membership().Self().Ready }

func TestAgentAlone(t *testing.T) {
	a, stop := runAgent(t, shard.AgentConfig{Membership: shard.Config{Name: "a"}, Alone: true})
	if a.Clustered() {
		t.Error("Clustered() = true for an agent alone")
	}
	for _, id := range nodeIDs(10) {
		if name, addr, self := a.Home(id); name != "a" || addr != "" || !self {
			t.Errorf("Home(%q) = %q, %q, %v; want a, \"\", true", id, name, addr, self)
		}
		if name, addr, self := a.Next(id, []string{"a"}); name != "a" || addr != "" || !self {
			t.Errorf("Next(%q) = %q, %q, %v; want a, \"\", true", id, name, addr, self)
		}
	}
	holds(t, shardTestShortTimeout, "an agent alone joined", func() bool { return a.Membership() == nil })
	if err := a.Leave(time.Second); err != nil {
		t.Errorf("Leave = %v, want nil", err)
	}
	stop()
}

func TestAgentConfigValidate(t *testing.T) {
	c := newCluster(t)
	var ready atomic.Bool
	good := c.agentConfig("a", &ready)
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	tests := []struct {
		name  string
		tweak func(*shard.AgentConfig)
	}{
		{"no ready", func(c *shard.AgentConfig) { c.Ready = nil }},
		{"bad membership", func(c *shard.AgentConfig) { c.Membership.XDSAddr = "" }},
		{"negative grace", func(c *shard.AgentConfig) { c.RingGrace = -time.Second }},
		{"alone without a name", func(c *shard.AgentConfig) { c.Alone, c.Membership.Name = true, "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.tweak(&cfg)
			if _, err := shard.NewAgent(cfg); err == nil {
				t.Error("NewAgent() = nil error")
			}
		})
	}
}

// TestAgentJoinRetries: an agent whose gossip port is taken retries, and
// joins once the port is free; until then Home answers this replica.
func TestAgentJoinRetries(t *testing.T) {
	c := newCluster(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ready atomic.Bool
	ready.Store(true)
	cfg := c.agentConfig("a", &ready)
	cfg.Membership.BindAddr = l.Addr().String()
	a, _ := runAgent(t, cfg)

	holds(t, shardTestShortTimeout, "joined with the gossip port taken", func() bool { return a.Membership() == nil })
	if name, _, self := a.Home("node"); name != "a" || !self {
		t.Errorf("Home before joining = %q, self %v; want a, true", name, self)
	}
	l.Close()
	waitFor(t, shardTestTimeout, "not joined once the port is free", joined(a))
	waitFor(t, shardTestTimeout, "the ready record is not kept", func() bool { return selfReady(a) })
}

// TestAgentRingGrace: a replica not ready leaves the ring's homes only
// after RingGrace; not ready for less than that, it never does; ready
// again, it is back at once.
func TestAgentRingGrace(t *testing.T) {
	const grace = 600 * time.Millisecond
	c := newCluster(t)
	// Three, so that the two others ready are a strict majority (see
	// ReadyRing) and the ring leaves b out when b is not ready.
	var readyA, readyB, readyC atomic.Bool
	readyA.Store(true)
	readyB.Store(true)
	readyC.Store(true)
	var agents []*shard.Agent
	for _, r := range []struct {
		name  string
		ready *atomic.Bool
	}{{"a", &readyA}, {"b", &readyB}, {"c", &readyC}} {
		cfg := c.agentConfig(r.name, r.ready)
		cfg.RingGrace = grace
		a, _ := runAgent(t, cfg)
		agents = append(agents, a)
	}
	a, b := agents[0], agents[1]
	waitFor(t, shardTestTimeout, "not joined", func() bool { return joined(a)() && joined(b)() && joined(agents[2])() })
	allReady := func() bool {
		r := a.Membership().Ring().Members()
		return len(r) == 3 && r[0].Ready && r[1].Ready && r[2].Ready
	}
	waitFor(t, shardTestTimeout, "a's ring does not hold a, b and c, ready", allReady)

	// Not ready for less than the grace: the ring never hears of it.
	readyB.Store(false)
	holds(t, grace/2, "b's record turned not ready within half the grace", func() bool { return selfReady(b) })
	readyB.Store(true)
	holds(t, grace+grace/2, "b's record turned not ready after a short spell", func() bool { return selfReady(b) })

	// Not ready for longer: the record says so once the grace has passed,
	// and a's ring leaves b out.
	readyB.Store(false)
	began := time.Now()
	waitFor(t, shardTestTimeout, "b's record still says ready", func() bool { return !selfReady(b) })
	if d := time.Since(began); d < grace {
		t.Errorf("b's record turned not ready %v after b did, before the %v grace", d, grace)
	}
	waitFor(t, shardTestTimeout, "a's ring still holds b", func() bool {
		return slices.Equal(names(a.Membership().Ring().Members()), []string{"a", "c"})
	})
	for _, id := range nodeIDs(100) {
		if name, _, _ := a.Home(id); name == "b" {
			t.Fatalf("a: Home(%q) = b, which is not ready", id)
		}
	}

	// Ready again: at once.
	readyB.Store(true)
	waitFor(t, shardTestTimeout, "a's ring does not take b back", allReady)
}

// TestAgentSettleThenRebalance: Rebalance is called only once the ring
// has stayed unchanged for SettleDelay, again after each later change, and
// Run waits for the calls to return.
func TestAgentSettleThenRebalance(t *testing.T) {
	const settle = 500 * time.Millisecond
	// tolerance covers the watcher below seeing a change later than the
	// agent does.
	const tolerance = 150 * time.Millisecond
	c := newCluster(t)
	var ready atomic.Bool
	ready.Store(true)

	var mu sync.Mutex
	var calls []time.Time   // when Rebalance was called
	var changes []time.Time // when a's ring changed
	var returned atomic.Int32
	cfg := c.agentConfig("a", &ready)
	cfg.SettleDelay = settle
	cfg.Rebalance = func(ctx context.Context) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		<-ctx.Done() // Run must wait for this
		returned.Add(1)
	}
	a, stopA := runAgent(t, cfg)
	waitFor(t, shardTestTimeout, "a did not join", joined(a))
	// Follow a's ring changes, as the agent does.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	watching.Go(func() {
		m := a.Membership()
		for {
			ch := m.Changed()
			select {
			case <-ch:
				mu.Lock()
				changes = append(changes, time.Now())
				mu.Unlock()
			case <-watchCtx.Done():
				return
			}
		}
	})
	defer func() {
		stopWatch()
		watching.Wait()
	}()
	nCalls := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}
	// Quiet: a's ring settles (a alone, then a ready) and stays unchanged.
	quiet := func() {
		t.Helper()
		for deadline := time.Now().Add(shardTestTimeout); ; {
			if time.Now().After(deadline) {
				t.Fatalf("a's ring did not settle within %v", shardTestTimeout)
			}
			n := nCalls()
			mu.Lock()
			last := time.Time{}
			if len(changes) > 0 {
				last = changes[len(changes)-1]
			}
			mu.Unlock()
			if time.Since(last) > 2*settle && nCalls() == n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	quiet()
	before := nCalls()
	holds(t, shardTestShortTimeout, "Rebalance called with no ring change", func() bool { return nCalls() == before })

	// b joins and turns ready: a's ring changes, then Rebalance is called
	// once it has settled.
	var readyB atomic.Bool
	readyB.Store(true)
	runAgent(t, c.agentConfig("b", &readyB))
	waitFor(t, shardTestTimeout, "a's ring is not [a b]", func() bool {
		return slices.Equal(names(a.Membership().Ring().Members()), []string{"a", "b"})
	})
	waitFor(t, shardTestTimeout, "Rebalance not called after b joined", func() bool { return nCalls() > before })
	quiet()

	mu.Lock()
	// The watcher may have missed the changes before b: check the calls
	// since.
	for _, call := range calls[before:] {
		var last time.Time
		for _, ch := range changes {
			if ch.Before(call) {
				last = ch
			}
		}
		if last.IsZero() {
			t.Errorf("Rebalance called at %v before any ring change", call)
		} else if gap := call.Sub(last); gap < settle-tolerance {
			t.Errorf("Rebalance called %v after a ring change, before the ring settled (%v)", gap, settle)
		}
	}
	n := len(calls)
	mu.Unlock()

	stopA()
	if got := returned.Load(); int(got) != n {
		t.Errorf("Run returned with %d of %d Rebalance calls still running", n-int(got), n)
	}
}

// TestAgentReadyChanged: with ReadyChanged the agent reads Ready only when
// told (an idle agent does not poll), still keeps RingGrace before the ring
// hears that the replica is not ready, and tells it ready again at once.
func TestAgentReadyChanged(t *testing.T) {
	const grace = 400 * time.Millisecond
	c := newCluster(t)
	var ready atomic.Bool
	ready.Store(true)
	var reads atomic.Int64
	changed := make(chan struct{}, 1)
	tell := func(v bool) {
		ready.Store(v)
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	cfg := c.agentConfig("a", &ready)
	cfg.Ready = func() bool { reads.Add(1); return ready.Load() }
	cfg.ReadyChanged = changed
	cfg.RingGrace = grace
	a, _ := runAgent(t, cfg)
	waitFor(t, shardTestTimeout, "not joined", joined(a))
	waitFor(t, shardTestTimeout, "a's record not ready", func() bool { return selfReady(a) })

	// Idle: a 10ms Tick would read Ready about 50 times in 500ms.
	before := reads.Load()
	time.Sleep(500 * time.Millisecond)
	if n := reads.Load() - before; n > 5 {
		t.Errorf("an idle agent with ReadyChanged read Ready %d times in 500ms; want only when told or the ring changes", n)
	}

	// Not ready: the record says so once the grace has passed, with no
	// further word on ReadyChanged.
	tell(false)
	began := time.Now()
	waitFor(t, shardTestTimeout, "a's record still says ready", func() bool { return !selfReady(a) })
	if d := time.Since(began); d < grace {
		t.Errorf("a's record turned not ready %v after a did, before the %v grace", d, grace)
	}

	// Ready again: at once.
	tell(true)
	waitFor(t, grace/2, "a's record not ready again within half the grace", func() bool { return selfReady(a) })

	// A short spell of not ready: the ring never hears of it.
	tell(false)
	holds(t, grace/2, "a's record turned not ready within half the grace", func() bool { return selfReady(a) })
	tell(true)
	holds(t, grace, "a's record turned not ready after a short spell", func() bool { return selfReady(a) })
}

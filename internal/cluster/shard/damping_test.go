package shard_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// startThree starts xds-0, xds-1 and xds-2, each with its config as set
// makes it, xds-0's metrics on a registry it returns, and waits until
// each sees the three.
func (c *cluster) startThree(set func(*shard.Config)) ([]*shard.Membership, *prometheus.Registry) {
	c.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	var ms []*shard.Membership
	for _, name := range []string{"xds-0", "xds-1", "xds-2"} {
		cfg := c.config(name)
		set(&cfg)
		if name == "xds-0" {
			cfg.Registerer = reg
		}
		ms = append(ms, c.start(cfg))
	}
	waitFor(c.t, shardTestTimeout, "the three do not all see each other", ringIs(ms, "xds-0", "xds-1", "xds-2"))
	return ms, reg
}

// TestDeathIsDamped: a member that stops answering gossip while its
// registration is live, and whose xDS address still accepts connections
// (as a frozen process's kernel does), stays on its peers' rings for
// RingDamping after memberlist declared it dead, then leaves them.
func TestDeathIsDamped(t *testing.T) {
	const damping = 2 * time.Second
	// A listener that accepts and never answers: what the probe of a
	// frozen process's xDS port meets.
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	ms, reg := newCluster(t).startThree(func(cfg *shard.Config) {
		cfg.XDSAddr = frozen.Addr().String()
		// The registration outlives the test: only the death can
		// remove xds-2.
		cfg.LeaseTTL = time.Minute
		cfg.RingDamping = damping
	})
	changes := metricValue(t, reg, "legation_shard_ring_changes_total")

	ms[2].Close() // a crash: the lease is kept, only no longer renewed
	waitFor(t, shardTestTimeout, "memberlist never declared xds-2 dead", func() bool {
		return metricValue(t, reg, "legation_shard_members_damped") == 1
	})
	dead := time.Now()
	if got := metricValue(t, reg, "legation_shard_member_deaths_total"); got != 1 {
		t.Errorf("legation_shard_member_deaths_total = %v, want 1", got)
	}
	holds(t, damping-500*time.Millisecond, "xds-2 left a ring before its damping ran out", ringIs(ms[:2], "xds-0", "xds-1", "xds-2"))
	waitFor(t, 2*time.Second, "xds-2 still on the rings after its damping", ringIs(ms[:2], "xds-0", "xds-1"))
	t.Logf("xds-2 off the rings %s after memberlist declared it dead (damping %s)", time.Since(dead).Round(time.Millisecond), damping)
	if got := metricValue(t, reg, "legation_shard_members_damped"); got != 0 {
		t.Errorf("legation_shard_members_damped = %v once the damping ran out, want 0", got)
	}
	if got := metricValue(t, reg, "legation_shard_ring_changes_total") - changes; got != 1 {
		t.Errorf("%v ring changes for one death, want 1", got)
	}
	if got := metricValue(t, reg, "legation_shard_member_deaths_confirmed_total"); got != 0 {
		t.Errorf("legation_shard_member_deaths_confirmed_total = %v with the xDS port accepting, want 0", got)
	}
	sameHomes(t, ms[:2])
}

// TestDeathConfirmedByRefusal: a member declared dead whose xDS address
// refuses connections (no process listens: it crashed) leaves the rings
// at once, however long the damping.
func TestDeathConfirmedByRefusal(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close() // nothing listens there any more
	ms, reg := newCluster(t).startThree(func(cfg *shard.Config) {
		cfg.LeaseTTL = time.Minute
		cfg.RingDamping = time.Hour
		cfg.XDSAddr = gone
	})
	ms[2].Close()
	closedAt := time.Now()
	waitFor(t, shardTestTimeout, "xds-2 still on the rings, its death not confirmed", ringIs(ms[:2], "xds-0", "xds-1"))
	t.Logf("xds-2 off the rings %s after its crash (damping 1h, lease 1m)", time.Since(closedAt).Round(time.Millisecond))
	if got := metricValue(t, reg, "legation_shard_member_deaths_confirmed_total"); got != 1 {
		t.Errorf("legation_shard_member_deaths_confirmed_total = %v, want 1", got)
	}
}

// TestLapsedRegistrationIsNotDamped: a crashed member whose lease
// expires leaves the ring then, however long the damping.
func TestLapsedRegistrationIsNotDamped(t *testing.T) {
	ms, _ := newCluster(t).startThree(func(cfg *shard.Config) { cfg.RingDamping = time.Hour })
	ms[2].Close()
	closed := time.Now()
	waitFor(t, testLeaseTTL+5*time.Second, "xds-2 still on the rings after its lease expired", ringIs(ms[:2], "xds-0", "xds-1"))
	t.Logf("xds-2 off the rings %s after its crash (lease TTL %s, damping 1h)", time.Since(closed).Round(time.Millisecond), testLeaseTTL)
}

// TestAgentPausesRebalanceWhenOverloaded: a ring change that comes while
// the replica was just starved of CPU (the whole test process frozen)
// is rebalanced only when it is not overloaded any more, or after
// MaxRebalancePause at most.
func TestAgentPausesRebalanceWhenOverloaded(t *testing.T) {
	const maxPause = 2 * time.Second
	c := newCluster(t)
	clock, err := awake.New(awake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var clockRun sync.WaitGroup
	clockRun.Go(func() { clock.Run(ctx) })
	defer func() { cancel(); clockRun.Wait() }()

	var ready atomic.Bool
	ready.Store(true)
	reg := prometheus.NewPedanticRegistry()
	calls := make(chan time.Time, 10)
	cfg := c.agentConfig("a", &ready)
	cfg.Membership.Clock = clock
	cfg.Membership.Registerer = reg
	cfg.SettleDelay = 200 * time.Millisecond
	cfg.MaxRebalancePause = maxPause
	cfg.Rebalance = func(context.Context) { calls <- time.Now() }
	a, _ := runAgent(t, cfg)
	waitFor(t, shardTestTimeout, "a did not join", joined(a))
	waitFor(t, shardTestTimeout, "a's first rebalance", func() bool { return len(calls) > 0 })
	for len(calls) > 0 {
		<-calls
	}

	testbase.Freeze(t, time.Second)
	if !a.Membership().Overloaded() {
		t.Fatal("Overloaded() = false right after the process was frozen for 1s")
	}
	runAgent(t, c.agentConfig("b", &ready))
	waitFor(t, shardTestTimeout, "a's ring is not [a b]", func() bool {
		return slices.Equal(names(a.Membership().Ring().Members()), []string{"a", "b"})
	})
	changed := time.Now()
	select {
	case at := <-calls:
		if waited := at.Sub(changed); waited < maxPause-300*time.Millisecond {
			t.Errorf("Rebalance called %s after the ring changed, while overloaded: want it paused up to %s", waited, maxPause)
		} else {
			t.Logf("Rebalance called %s after the ring changed (overloaded; at most %s)", waited.Round(time.Millisecond), maxPause)
		}
	case <-time.After(shardTestTimeout):
		t.Fatal("Rebalance never called after the ring changed")
	}
	if got := metricValue(t, reg, "legation_shard_rebalance_pauses_total"); got != 1 {
		t.Errorf("legation_shard_rebalance_pauses_total = %v, want 1", got)
	}
}

package relay_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// ring is a Rebalance home func from a map of node ids to replica names;
// a node it does not name is homed on self.
func ring(self string, m map[string]string) func(string) (string, bool) {
	return func(id string) (string, bool) {
		name, ok := m[id]
		if !ok || name == self {
			return self, true
		}
		return name, false
	}
}

// expectMoved waits for x to end with UNAVAILABLE "rebalance: home moved
// to <to>".
func expectMoved(t *testing.T, what string, x interface{ ExpectErr() error }, to string) {
	t.Helper()
	err := x.ExpectErr()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "rebalance: home moved to "+to {
		t.Errorf("%s ended with %v, want UNAVAILABLE rebalance: home moved to %s", what, err, to)
	}
}

// Rebalance closes exactly the streams whose home moved: local ones homed
// elsewhere now, relayed ones homed here or on a third replica now; the
// others stay. On the home, a relayed stream whose home moved is closed
// there, and the client gets the status through the relay.
func TestRebalance(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"n3": "b", "n4": "b", "n5": "b", "n6": "b"})

	streams := map[string]*xdstest.SotWStream{}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5", "n6", ""} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		streams[id] = s
	}
	d1 := deltaADSStream(t, a.addr)
	d1.Send(deltaCDSRequest("n1"))
	d1.Expect()

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	// n1 moves from a to b, n3 from b to a, n5 from b to c; n2 stays on
	// a, n4 and n6 on b (as far as a knows); "" has no home.
	if got := a.relay.Rebalance(ctx, ring("a", map[string]string{"n1": "b", "n3": "a", "n4": "b", "n5": "c", "n6": "b"})); got != 4 {
		t.Errorf("A's Rebalance closed %d streams, want 4", got)
	}
	expectMoved(t, "n1", streams["n1"], "b")
	expectMoved(t, "n1 delta", d1, "b")
	expectMoved(t, "n3", streams["n3"], "a")
	expectMoved(t, "n5", streams["n5"], "c")
	for _, id := range []string{"n2", "n4", "n6", ""} {
		streams[id].ExpectNone()
	}
	if n := metric(t, a.reg, "legation_relay_rebalance_closes_total"); n != 4 {
		t.Errorf("legation_relay_rebalance_closes_total = %v, want 4", n)
	}
	waitFor(t, "B to end the relayed legs of n3 and n5", func() bool {
		return len(streamsOf(b, "n3"))+len(streamsOf(b, "n5")) == 0
	})

	// B, the home, learns that n6 moved to a: it closes the stream it
	// serves for A, and the client gets B's status through A.
	if got := b.relay.Rebalance(ctx, ring("b", map[string]string{"n6": "a"})); got != 1 {
		t.Errorf("B's Rebalance closed %d streams, want 1", got)
	}
	expectMoved(t, "n6 (closed by its home)", streams["n6"], "a")
	streams["n4"].ExpectNone()
	if n := len(streamsOf(b, "n4")); n != 1 {
		t.Errorf("B serves %d streams of n4, want 1", n)
	}
}

// Rebalance closes no faster than the configured rate: with Rate 4 and
// Burst 1, five closes take at least 0.75s whatever the jitter (the
// bucket's debt is at most one token). Only a lower bound is checked: a
// slow machine makes it longer, never shorter.
func TestRebalancePacing(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a", func(cfg *relay.Config) { cfg.Rate, cfg.Burst = 4, 1 })
	c.apply(t, clusters(1)...)
	var all []*xdstest.SotWStream
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		all = append(all, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	start := time.Now()
	got := a.relay.Rebalance(ctx, func(string) (string, bool) { return "b", false })
	elapsed := time.Since(start)
	if got != 5 {
		t.Errorf("Rebalance closed %d streams, want 5", got)
	}
	if least := 700 * time.Millisecond; elapsed < least {
		t.Errorf("Rebalance closed 5 streams at 4/s (burst 1) in %s, want at least %s", elapsed, least)
	}
	for _, s := range all {
		expectMoved(t, "stream", s, "b")
	}
}

// A Rebalance stops early when its ctx ends, when a later one starts, and
// when the Relay closes.
func TestRebalanceStops(t *testing.T) {
	c := newCluster(t)
	// One close, then one every 10s: every wait for a token outlasts the
	// test.
	a := c.addReplica(t, "a", func(cfg *relay.Config) { cfg.Rate, cfg.Burst = 0.1, 1 })
	c.apply(t, clusters(1)...)
	for _, id := range []string{"n1", "n2", "n3"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
	}
	moved := func(string) (string, bool) { return "b", false }

	// Superseded: the first closes one stream and waits; the second
	// stops it.
	first := make(chan int, 1)
	go func() { first <- a.relay.Rebalance(context.Background(), moved) }()
	waitFor(t, "the first close", func() bool { return metric(t, a.reg, "legation_relay_rebalance_closes_total") == 1 })
	select {
	case n := <-first:
		t.Fatalf("the first Rebalance returned %d without waiting for a token", n)
	case <-time.After(xdstest.ShortTimeout):
	}
	if got := a.relay.Rebalance(context.Background(), func(string) (string, bool) { return "a", true }); got != 0 {
		t.Errorf("the second Rebalance, where nothing moved, closed %d", got)
	}
	select {
	case n := <-first:
		if n != 1 {
			t.Errorf("the superseded Rebalance closed %d, want 1", n)
		}
	case <-time.After(xdstest.Timeout):
		t.Fatal("the superseded Rebalance did not return")
	}

	// ctx ends while it waits for a token.
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.ShortTimeout)
	defer cancel()
	if got := a.relay.Rebalance(ctx, moved); got != 0 {
		t.Errorf("Rebalance with a short ctx closed %d, want 0", got)
	}

	// Close stops it.
	third := make(chan int, 1)
	go func() { third <- a.relay.Rebalance(context.Background(), moved) }()
	select {
	case n := <-third:
		t.Fatalf("Rebalance returned %d without waiting for a token", n)
	case <-time.After(xdstest.ShortTimeout):
	}
	if err := a.relay.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-third:
		if n != 0 {
			t.Errorf("Rebalance stopped by Close closed %d, want 0", n)
		}
	case <-time.After(xdstest.Timeout):
		t.Fatal("Close did not stop Rebalance")
	}
	if got := a.relay.Rebalance(context.Background(), moved); got != 0 {
		t.Errorf("Rebalance after Close closed %d, want 0", got)
	}
	if n := metric(t, a.reg, "legation_relay_rebalance_closes_total"); n != 1 {
		t.Errorf("legation_relay_rebalance_closes_total = %v, want 1", n)
	}
}

// TestRebalanceDropsBackedOffConns: a membership change drops the pooled
// connection to a home that could not be reached (backing off in
// TRANSIENT_FAILURE), so that the next stream to it dials at once, and
// keeps the others; streams on the kept connection carry on.
func TestRebalanceDropsBackedOffConns(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"n1": "b", "n2": "x"}) // x: not in the cluster, at gone
	relayed := adsStream(t, a.addr)
	relayed.Send(cdsRequest("n1"))
	relayed.Expect()
	local := adsStream(t, a.addr)
	local.Send(cdsRequest("n2")) // x unreachable: served by A
	local.Expect()
	waitFor(t, "the connection to x backing off", func() bool {
		st, ok := relay.PooledConnState(a.relay, gone)
		return ok && st == connectivity.TransientFailure
	})
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	a.relay.Rebalance(ctx, ring("a", map[string]string{"n1": "b", "n2": "x"}))
	if _, ok := relay.PooledConnState(a.relay, gone); ok {
		t.Error("the backed-off connection to x is still pooled after a membership change")
	}
	if st, ok := relay.PooledConnState(a.relay, b.addr); !ok || st != connectivity.Ready {
		t.Errorf("the connection to b: %v pooled %v, want it kept and ready", st, ok)
	}
	relayed.ExpectNone()
}

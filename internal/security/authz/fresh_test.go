package authz

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestWatcherStale: a watcher cut off from etcd for longer than
// StaleAfter reports its rules stale (Fresh, the gauge) and wakes the
// holders of its table once, so that they re-check; when etcd answers
// again the rules are fresh, with the revocation made meanwhile.
func TestWatcherStale(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()
	if err := Grant(ctx, c, prefix, Rule{Identity: edgeID, Nodes: []string{"edge-*"}}); err != nil {
		t.Fatal(err)
	}
	proxy := storetest.NewProxy(t, e.Endpoint)
	pc, err := clientv3.New(clientv3.Config{
		Endpoints: []string{proxy.Addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	const bound = 600 * time.Millisecond
	tw := startWatcher(t, WatcherConfig{
		Client: pc, Prefix: prefix, StaleAfter: bound,
		ProgressInterval: 100 * time.Millisecond, StallTimeout: 300 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
	})
	tw.waitReady(t)
	if err := tw.Fresh(); err != nil {
		t.Fatalf("Fresh after the load: %v", err)
	}
	// A healthy, idle watch stays fresh past the bound.
	stay := time.Now().Add(3 * bound)
	for time.Now().Before(stay) {
		if err := tw.Fresh(); err != nil {
			t.Fatalf("idle and reachable: Fresh = %v", err)
		}
		time.Sleep(bound / 10) // sampling over a span, not waiting for something
	}
	if tw.gauge(t, "legation_authz_stale") != 0 || tw.gauge(t, "legation_authz_stale_total") != 0 {
		t.Fatal("idle and reachable: the rules turned stale")
	}

	// Cut off, the holders are woken once the rules turn stale: the only
	// publications then are the wakes, as every reload fails.
	tab, changed := tw.Current()
	proxy.Cut()
	cut := time.Now()
	deadline := time.After(defaultTestTimeout)
	for woken := false; !woken; {
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the table's holders were not woken when the rules turned stale")
		}
		woken = errors.Is(tw.Fresh(), ErrStale)
		tab, changed = tw.Current()
	}
	t.Logf("stale %s after the cut", time.Since(cut).Round(time.Millisecond))
	if err := tw.Fresh(); !errors.Is(err, ErrStale) {
		t.Fatalf("Fresh while cut off = %v, want ErrStale", err)
	}
	if tab.Allows(edgeID, "edge-1", "") != nil {
		t.Error("the wake replaced the table")
	}
	if tw.gauge(t, "legation_authz_stale") != 1 || tw.gauge(t, "legation_authz_stale_total") != 1 {
		t.Errorf("legation_authz_stale = %v, legation_authz_stale_total = %v, want 1 and 1",
			tw.gauge(t, "legation_authz_stale"), tw.gauge(t, "legation_authz_stale_total"))
	}
	if age := tw.gauge(t, "legation_authz_rules_age_seconds"); age < bound.Seconds() {
		t.Errorf("legation_authz_rules_age_seconds = %v, want over %v", age, bound.Seconds())
	}
	if _, err := Revoke(ctx, c, prefix, edgeID); err != nil {
		t.Fatal(err)
	}

	proxy.Restore()
	tw.waitFor(t, defaultTestTimeout, "the revocation seen after the cut", func(tab *Table) bool {
		return tab.Allows(edgeID, "edge-1", "") != nil
	})
	if err := tw.Fresh(); err != nil {
		t.Errorf("Fresh once etcd answered: %v", err)
	}
	if tw.gauge(t, "legation_authz_stale") != 0 {
		t.Error("legation_authz_stale is still 1 once etcd answered")
	}
}

// TestWatcherConfigStaleAfter: a bound a healthy watch would cross
// between two progress notifications is refused.
func TestWatcherConfigStaleAfter(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	for _, cfg := range []WatcherConfig{
		{Client: c, StaleAfter: -time.Second},
		{Client: c, StaleAfter: time.Second},
		{Client: c, StaleAfter: time.Second, ProgressInterval: 2 * time.Second},
	} {
		if _, err := NewWatcher(cfg); err == nil {
			t.Errorf("NewWatcher with StaleAfter %s, ProgressInterval %s succeeded", cfg.StaleAfter, cfg.ProgressInterval)
		}
	}
	if _, err := NewWatcher(WatcherConfig{Client: c, StaleAfter: 1500 * time.Millisecond}); err != nil {
		t.Errorf("NewWatcher with StaleAfter 1.5s: %v", err)
	}
}

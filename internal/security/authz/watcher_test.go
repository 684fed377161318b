package authz

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// warnings records the Warn logs of a watcher that name a key.
type warnings struct {
	mu   sync.Mutex
	keys []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" {
			w.mu.Lock()
			w.keys = append(w.keys, a.Value.String())
			w.mu.Unlock()
		}
		return true
	})
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// count returns how many warnings named key.
func (w *warnings) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, k := range w.keys {
		if k == key {
			n++
		}
	}
	return n
}

// testWatcher is a running Watcher and what a test checks of it.
type testWatcher struct {
	*Watcher
	reg  *prometheus.Registry
	warn *warnings
}

// startWatcher runs a watcher until the test ends, and checks that Run
// then returns nil.
func startWatcher(t *testing.T, cfg WatcherConfig) *testWatcher {
	t.Helper()
	tw := newTestWatcher(t, cfg)
	tw.run(t)
	return tw
}

// newTestWatcher returns a watcher that does not run yet.
func newTestWatcher(t *testing.T, cfg WatcherConfig) *testWatcher {
	t.Helper()
	tw := &testWatcher{reg: prometheus.NewRegistry(), warn: &warnings{}}
	cfg.Registerer = tw.reg
	cfg.Logger = slog.New(tw.warn)
	w, err := NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tw.Watcher = w
	return tw
}

// run runs the watcher until the test ends, and checks that Run then
// returns nil.
func (tw *testWatcher) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(defaultTestTimeout):
			t.Error("Run did not return after its context ended")
		}
	})
}

func (tw *testWatcher) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-tw.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("watcher not ready")
	}
}

// gauge reads a gauge of the watcher's registry.
func (tw *testWatcher) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := tw.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// waitFor waits, within timeout, for a table for which ok holds, following
// the change channels; it returns the table.
func (tw *testWatcher) waitFor(t *testing.T, timeout time.Duration, what string, ok func(*Table) bool) *Table {
	t.Helper()
	deadline := time.After(timeout)
	for {
		tab, changed := tw.Current()
		if ok(tab) {
			return tab
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("within %s: %s (table at revision %d: %+v)", timeout, what, tab.Revision(), tab.Rules())
		}
	}
}

func TestWatcher(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()
	if err := Grant(ctx, c, prefix, Rule{Identity: edgeID, Nodes: []string{"edge-*"}}); err != nil {
		t.Fatal(err)
	}

	tw := newTestWatcher(t, WatcherConfig{Client: c, Prefix: prefix, DefaultTrustDomain: "default.example"})
	// Before the first load: deny everything, the default trust domain
	// included.
	tab, _ := tw.Current()
	if tab.Len() != 0 || tab.Allows(edgeID, "edge-1", "") == nil || tab.Allows("spiffe://default.example/x", "n", "") == nil {
		t.Fatal("the table before the first load allows something")
	}
	select {
	case <-tw.Ready():
		t.Fatal("ready before Run")
	default:
	}
	tw.run(t)
	tw.waitReady(t)

	tab, changed := tw.Current()
	if err := tab.Allows(edgeID, "edge-1", ""); err != nil {
		t.Fatalf("after the load: %v", err)
	}
	if err := tab.Allows("spiffe://default.example/ns/x/sa/y", "any", "any"); err != nil {
		t.Fatalf("default trust domain: %v", err)
	}
	if tab.Revision() == 0 || tw.gauge(t, "legation_authz_rules") != 1 {
		t.Errorf("revision %d, legation_authz_rules %v", tab.Revision(), tw.gauge(t, "legation_authz_rules"))
	}

	t.Run("grant", func(t *testing.T) {
		if err := Grant(ctx, c, prefix, Rule{Identity: dnsID, Nodes: []string{"mesh-1"}, Admin: true}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(revocationTimeout):
			t.Fatal("the channel was not closed after a grant")
		}
		tw.waitFor(t, revocationTimeout, "the grant is seen", func(tab *Table) bool { return tab.Admin(dnsID) && tab.Len() == 2 })
	})

	t.Run("revoke", func(t *testing.T) {
		_, changed := tw.Current()
		start := time.Now()
		if existed, err := Revoke(ctx, c, prefix, edgeID); err != nil || !existed {
			t.Fatalf("Revoke = %v, %v", existed, err)
		}
		select {
		case <-changed:
		case <-time.After(revocationTimeout):
			t.Fatal("the channel was not closed after a revocation")
		}
		tab := tw.waitFor(t, revocationTimeout, "the revocation is seen", func(tab *Table) bool { return tab.Allows(edgeID, "edge-1", "") != nil })
		t.Logf("revocation seen after %s", time.Since(start))
		if err := tab.Allows(edgeID, "edge-1", ""); !strings.Contains(err.Error(), "no rule for identity") {
			t.Errorf("after the revocation: %v", err)
		}
	})
}

func TestWatcherMalformed(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()
	dir := Dir(prefix)
	if err := Grant(ctx, c, prefix, Rule{Identity: edgeID, Nodes: []string{"edge-*"}}); err != nil {
		t.Fatal(err)
	}
	badJSON, badRule, wrongKey := dir+"bad-json", Key(prefix, "cn:bad-rule"), Key(prefix, "cn:wrong-key")
	putRaw(t, c, badJSON, "{not json")
	putRaw(t, c, badRule, `{"identity":"cn:bad-rule","nodes":["x\\"]}`)
	putRaw(t, c, wrongKey, `{"identity":"cn:someone-else","nodes":["*"]}`)
	// A rule stored before identities were typed names no kind.
	untyped := Key(prefix, "envoy-7.mesh.example.org")
	putRaw(t, c, untyped, `{"identity":"envoy-7.mesh.example.org","nodes":["*"]}`)

	tw := startWatcher(t, WatcherConfig{Client: c, Prefix: prefix})
	tw.waitReady(t)
	tab, _ := tw.Current()
	if tab.Len() != 1 || tab.Allows(edgeID, "edge-1", "") != nil {
		t.Fatalf("table: %+v", tab.Rules())
	}
	if err := tab.Allows("cn:someone-else", "n", ""); err == nil {
		t.Error("a rule stored under another identity's key is in force")
	}
	for _, id := range []string{"envoy-7.mesh.example.org", "dns:envoy-7.mesh.example.org", "cn:envoy-7.mesh.example.org"} {
		if err := tab.Allows(id, "n", ""); err == nil {
			t.Errorf("an untyped rule is in force for %q", id)
		}
	}
	if got := tw.gauge(t, "legation_authz_bad_rules"); got != 4 {
		t.Errorf("legation_authz_bad_rules = %v, want 4", got)
	}
	for _, k := range []string{badJSON, badRule, wrongKey, untyped} {
		if n := tw.warn.count(k); n != 1 {
			t.Errorf("%d warnings about %s, want 1", n, k)
		}
	}

	// A good rule written over a bad one is in force; a bad one over a
	// good one takes it out (the key's latest value is what counts).
	putRaw(t, c, badRule, `{"identity":"cn:bad-rule","nodes":["x"]}`)
	putRaw(t, c, Key(prefix, edgeID), `{"identity":"`+edgeID+`","nodes":["edge-*"],"extra":1}`)
	tw.waitFor(t, revocationTimeout, "the fixed rule in force and the broken one out", func(tab *Table) bool {
		return tab.Allows("cn:bad-rule", "x", "") == nil && tab.Allows(edgeID, "edge-1", "") != nil
	})
	if got := tw.gauge(t, "legation_authz_bad_rules"); got != 4 {
		t.Errorf("legation_authz_bad_rules = %v, want 4", got)
	}
	if got := tw.gauge(t, "legation_authz_rules"); got != 1 {
		t.Errorf("legation_authz_rules = %v, want 1", got)
	}

	// The same bad value written again is a new revision: warned about
	// once more. Deleting a bad key takes it off the gauge.
	putRaw(t, c, badJSON, "{not json")
	delRev := func(k string) {
		if _, err := c.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	delRev(wrongKey)
	tw.waitFor(t, revocationTimeout, "the deletion seen", func(*Table) bool { return tw.gauge(t, "legation_authz_bad_rules") == 3 })
	if n := tw.warn.count(badJSON); n != 2 {
		t.Errorf("%d warnings about %s, want 2 (one per revision)", n, badJSON)
	}
	if n := tw.warn.count(badRule); n != 1 {
		t.Errorf("%d warnings about %s, want 1", n, badRule)
	}
}

// TestWatcherReloadsAfterCompaction cuts a watcher off etcd, revokes a
// rule and compacts the history it would need to resume its watch, then
// lets it back: it must notice the stall, reload (no resumed watch could
// show it the revocation), and see the revocation.
func TestWatcherReloadsAfterCompaction(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := testbase.Context(t)
	prefix := newPrefix()
	for _, r := range testRules() {
		if err := Grant(ctx, c, prefix, r); err != nil {
			t.Fatal(err)
		}
	}
	junk := Dir(prefix) + "junk"
	putRaw(t, c, junk, "junk")
	proxy := storetest.NewProxy(t, e.Endpoint)
	pc, err := clientv3.New(clientv3.Config{
		Endpoints: []string{proxy.Addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })

	tw := startWatcher(t, WatcherConfig{
		Client: pc, Prefix: prefix,
		ProgressInterval: 100 * time.Millisecond, StallTimeout: 500 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
	})
	tw.waitReady(t)
	_, changed := tw.Current()

	proxy.Cut()
	if _, err := Revoke(ctx, c, prefix, edgeID); err != nil {
		t.Fatal(err)
	}
	rev := putRaw(t, c, "/elsewhere", "x")
	if _, err := c.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	// Cut off, the watcher keeps its last table.
	select {
	case <-changed:
		t.Fatal("the table changed while the watcher was cut off")
	case <-time.After(300 * time.Millisecond):
	}
	reloads := tw.gauge(t, "legation_authz_reloads_total")
	proxy.Restore()
	tw.waitFor(t, defaultTestTimeout, "the revocation seen after the cut", func(tab *Table) bool {
		return tab.Allows(edgeID, "edge-1", "") != nil && tab.Len() == len(testRules())-1
	})
	if got := tw.gauge(t, "legation_authz_reloads_total"); got <= reloads {
		t.Errorf("legation_authz_reloads_total = %v, want more than %v", got, reloads)
	}
	// The reload met the same malformed value at the same revision: it
	// was warned about once.
	if n := tw.warn.count(junk); n != 1 {
		t.Errorf("%d warnings about %s, want 1 across the reload", n, junk)
	}
}

func TestWatcherConfig(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	for _, tt := range []struct {
		name string
		cfg  WatcherConfig
		want string
	}{
		{"no client", WatcherConfig{}, "Client is required"},
		{"bad prefix", WatcherConfig{Client: c, Prefix: "legation"}, "must start and end with '/'"},
		{"bad trust domain", WatcherConfig{Client: c, DefaultTrustDomain: "spiffe://example.org"}, "default trust domain"},
		{"negative", WatcherConfig{Client: c, StallTimeout: -1}, "must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewWatcher(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewWatcher = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestWatcherIdleWakesRarely: a watcher whose watch hears nothing wakes
// about twice per ProgressInterval (to ask etcd for progress, then once
// more), not every quarter of it.
func TestWatcherIdleWakesRarely(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	tw := startWatcher(t, WatcherConfig{
		Client: c, Prefix: "/idle/",
		ProgressInterval: 400 * time.Millisecond, StallTimeout: 3 * time.Second,
	})
	tw.waitReady(t)
	// etcd answers a progress request only once its revision reached the
	// watch's start (the revision after the load): any write does it.
	putRaw(t, c, "/elsewhere", "x")
	time.Sleep(600 * time.Millisecond)
	const quiet = 2 * time.Second
	before, reloads := tw.checks.Load(), tw.gauge(t, "legation_authz_reloads_total")
	time.Sleep(quiet)
	// A ticker at a quarter of ProgressInterval wakes 20 times.
	if n := tw.checks.Load() - before; n > 12 || n < 3 {
		t.Errorf("the idle watcher's loop woke %d times in %s; want about 2 per ProgressInterval (10)", n, quiet)
	}
	if got := tw.gauge(t, "legation_authz_reloads_total"); got != reloads {
		t.Errorf("legation_authz_reloads_total = %v after an idle spell, want %v (no stall)", got, reloads)
	}
}
